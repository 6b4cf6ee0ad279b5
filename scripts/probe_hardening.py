#!/usr/bin/env python3
"""Hostile-input probe of `moe-server serve` (issue 34): a measurement script,
not a CI test.

Starts build/moe-server serve on a free loopback port (the demo model, or
--model), records its idle RSS, then sends each hostile request of the issue
(deep and huge tool-call arguments, many-key objects, smuggled and malformed
HTTP, grammars and schemas that cannot be matched) and, on copies of a
synthetic tiny model whose chat template is hostile, renders those templates.
For each case it prints one JSON line: status code, whether the server is
still alive, wall time, and peak RSS during the case (VmRSS polled every
20 ms, and VmHWM after resetting it through /proc/PID/clear_refs). Then it
sends SIGTERM while a hostile render is in flight and times the exit. A last
JSON line sums up: crashes, hangs (a case over 30 s), the worst peak RSS
against idle, SIGTERM-to-exit seconds. Every server it starts is killed at
the end, whatever happens.

Standard library only. Usage:
  scripts/probe_hardening.py [--binary build/moe-server] [--model DIR]
                             [--only SUBSTRING] [--skip-templates]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HANG_S = 30.0         # a case slower than this is a hang
CASE_TIMEOUT_S = 60.0  # then the client gives up on the case
START_TIMEOUT_S = 120.0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


class RssSampler:
    """Polls VmRSS every 20 ms while running; VmHWM reset at the start."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.hwm_reset = False

    def __enter__(self):
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self.peak_kib = proc_status_kib(self.pid, "VmRSS") or 0
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            rss = proc_status_kib(self.pid, "VmRSS")
            if rss is not None:
                self.peak_kib = max(self.peak_kib, rss)
            self._stop.wait(0.02)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.hwm_reset:
            hwm = proc_status_kib(self.pid, "VmHWM")
            if hwm is not None:
                self.peak_kib = max(self.peak_kib, hwm)
        return False


class Server:
    """One `moe-server serve` child on a free loopback port."""

    def __init__(self, binary, model, log_dir, name):
        self.binary = binary
        self.model = model
        self.log_path = os.path.join(log_dir, f"server-{name}.log")
        self.proc = None
        self.port = None
        self.load_s = None
        self.idle_kib = 0

    def start(self):
        self.port = free_port()
        args = [self.binary, "serve", "--port", str(self.port), "--ctx", "4096"]
        if self.model:
            args += ["--model", self.model]
        self.log = open(self.log_path, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.monotonic() - t0 < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} at start (see {self.log_path})")
            try:
                status, _, _ = http_exchange(self.port, request_bytes(self.port, "GET", "/health"), 2.0)
                if status == 200:
                    self.load_s = time.monotonic() - t0
                    time.sleep(0.3)
                    self.idle_kib = proc_status_kib(self.proc.pid, "VmRSS") or 0
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {START_TIMEOUT_S} s (see {self.log_path})")

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            status, _, _ = http_exchange(self.port, request_bytes(self.port, "GET", "/health"), 10.0)
            return status == 200
        except OSError:
            return False

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if getattr(self, "log", None):
            self.log.close()
            self.log = None


def request_bytes(port, method, path, body=b"", content_type="application/json", headers=None, length=True):
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    if body or method == "POST":
        if content_type:
            lines.append(f"Content-Type: {content_type}")
        if length:
            lines.append(f"Content-Length: {len(body)}")
    for h in headers or []:
        lines.append(h)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def http_exchange(port, raw, timeout, linger=0.0):
    """Sends raw bytes; reads until the response is complete (or EOF, or the
    timeout). Returns (status or None, all bytes received, closed by server).
    linger: seconds to keep reading after a complete response (to see a
    second, smuggled response)."""
    deadline = time.monotonic() + timeout
    data = b""
    closed = False
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading it all
        complete_at = None
        while True:
            now = time.monotonic()
            if now >= deadline or (complete_at is not None and now >= complete_at + linger):
                break
            s.settimeout(max(0.01, min(deadline, (complete_at or deadline) + linger) - now))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
            if complete_at is None and response_complete(data):
                complete_at = time.monotonic()
    status = None
    if data.startswith(b"HTTP/1."):
        try:
            status = int(data.split(b" ", 2)[1])
        except (IndexError, ValueError):
            status = None
    return status, data, closed


def response_complete(data):
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return False
    head = data[:head_end].decode("latin-1").lower()
    body = data[head_end + 4:]
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip() == "content-length":
            return len(body) >= int(value.strip())
        if name.strip() == "transfer-encoding" and "chunked" in value:
            return body.endswith(b"0\r\n\r\n")
    return False  # read to EOF


def json_body(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def tool_call_messages(arguments):
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]


def hostile_cases():
    """(name, request(port) -> raw bytes, linger seconds): bodies are built
    once, the request line and Host for whichever server runs the case."""
    cases = []

    def post(route, body, **kw):
        return lambda port: request_bytes(port, "POST", route, body, **kw)

    nested = "[" * 40000 + "]" * 40000  # 80 KB
    for route in ("/v1/chat/completions", "/apply-template", "/tokenize"):
        body = {"messages": tool_call_messages(nested)}
        if route == "/v1/chat/completions":
            body["max_tokens"] = 1
        cases.append((f"nested 40000 [ arguments {route}", post(route, json_body(body)), 0))
    many_empty = "[" + ",".join(["{}"] * 2_700_000) + "]"
    cases.append(("2.7M {} arguments /apply-template",
                  post("/apply-template", json_body({"messages": tool_call_messages(many_empty)})), 0))
    many_keys = json.dumps({f"k{i}": 0 for i in range(250_000)}, separators=(",", ":"))
    cases.append(("250000-key arguments /v1/chat/completions",
                  post("/v1/chat/completions", json_body({"messages": tool_call_messages(many_keys), "max_tokens": 1})),
                  0))
    keys_body = "{" + ",".join(f'"k{i}":0' for i in range(250_000)) + ',"content":"hi"}'
    cases.append(("250000-key /tokenize body", post("/tokenize", keys_body.encode()), 0))

    def smuggle(port):
        inner = request_bytes(port, "GET", "/v1/models").replace(b"Connection: close\r\n", b"")
        head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n\r\n" % (port, len(inner))
        return head.encode() + inner

    cases.append(("GET with a smuggled body", smuggle, 1.0))
    for te in ("gzip, chunked", "foo"):
        cases.append((f"Transfer-Encoding: {te}",
                      post("/tokenize", b'5\r\n{"con\r\n0\r\n\r\n', length=False, headers=[f"Transfer-Encoding: {te}"]),
                      0))
    cases.append(("100 KB request line", lambda port: request_bytes(port, "GET", "/" + "a" * 100_000), 0))
    cases.append(("20 KB header line",
                  lambda port: request_bytes(port, "GET", "/health", headers=["X-Big: " + "b" * 20_000]), 0))
    cases.append(("9 KB form-encoded JSON body",
                  post("/tokenize", json_body({"content": "x" * 9000}), content_type="application/x-www-form-urlencoded"),
                  0))
    grammars = {
        "nested repetition grammar": 'root ::= (("a"{0,1000}){0,1000})',
        "end token piece grammar": 'root ::= <[</s>]> "a"',
    }
    for stream in (False, True):
        suffix = " stream" if stream else ""
        for name, gbnf in grammars.items():
            cases.append((name + suffix, post("/v1/completions", json_body(
                {"prompt": "x", "grammar": gbnf, "max_tokens": 16, "stream": stream})), 0))
        schema = {"type": "string", "pattern": "^(.*a){60}$"}
        cases.append(("schema pattern ^(.*a){60}$" + suffix, post("/v1/chat/completions", json_body(
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "temperature": 0, "stream": stream,
             "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})), 0))
    return cases


HOSTILE_TEMPLATES = {
    # item 4: a list nested 200,000 deep through a namespace
    "template: list nested 200000 deep":
        "{% set ns = namespace(x=[]) %}{% for i in range(200000) %}{% set ns.x = [ns.x] %}{% endfor %}"
        "{{ ns.x | length }}",
    # item 5: spins a thread
    "template: range(1000000)|unique|list|length": "{{ range(1000000) | unique | list | length }}",
    "template: two lists of a million compared": "{{ range(1000000) | list == range(1000000) | list }}",
    # item 6: memory checked too late
    "template: [L]*300 of a million-item list": "{% set L = [0] * 1000000 %}{{ [L] * 300 }}",
    "template: shared tree through tojson":
        "{% set a = [0] * 1000 %}{% set b = [a] * 1000 %}{% set c = [b] * 100 %}{{ c | tojson }}",
    # item 7: a namespace that holds itself (rendered several times: the leak is per render)
    "template: namespace holding itself x10":
        "{% set ns = namespace() %}{% set ns.s = 'x' * 50000000 %}{% set ns.me = ns %}{{ ns.s | length }}",
    # SIGTERM's case: no allocation, only loop turns, so it runs until its
    # step budget (or deadline) ends it, the longest a render can run
    "template: loops until the step budget ends them":
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
}
TEMPLATE_REPEATS = {"template: namespace holding itself x10": 10}
SIGTERM_TEMPLATE = "template: loops until the step budget ends them"
SIGTERM_AFTER_S = 0.05  # after the request is sent: the render is under way


def run_case(server, name, make_request, linger, results):
    raw = make_request(server.port)
    pid = server.pid
    t0 = time.monotonic()
    status, data, closed, error = None, b"", False, None
    with RssSampler(pid) as rss:
        try:
            status, data, closed = http_exchange(server.port, raw, CASE_TIMEOUT_S, linger)
        except OSError as e:
            error = str(e)
    wall = time.monotonic() - t0
    alive = server.alive()
    responses = data.count(b"HTTP/1.1 ")
    body = data[data.find(b"\r\n\r\n") + 4:] if b"\r\n\r\n" in data else b""
    row = {
        "case": name,
        "status": status,
        "alive": alive,
        "wall_s": round(wall, 3),
        "peak_rss_mib": round(rss.peak_kib / 1024, 1),
        "idle_rss_mib": round(server.idle_kib / 1024, 1),
        "responses": responses,
        "closed": closed,
        "body": body[:160].decode("utf-8", "replace"),
    }
    if error:
        row["error"] = error
    print(json.dumps(row), flush=True)
    results.append(row)
    if not alive:
        server.kill()
        server.start()  # the next cases need a server
    return row


def template_model(binary, work, name, template):
    base = os.path.join(work, "tiny-base")
    if not os.path.exists(os.path.join(base, "config.json")):
        subprocess.run([binary, "synth-model", "--preset", "tiny", "--out", base], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = os.path.join(work, "tpl-" + str(abs(hash(name))))
    shutil.copytree(base, folder)
    path = os.path.join(folder, "tokenizer_config.json")
    config = {}
    if os.path.exists(path):
        with open(path) as f:
            config = json.load(f)
    config["chat_template"] = template
    with open(path, "w") as f:
        json.dump(config, f)
    return folder


def chat_request(port):
    return request_bytes(port, "POST", "/v1/chat/completions", json_body(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/moe-server")
    parser.add_argument("--model", default="", help="model folder (default: the demo model)")
    parser.add_argument("--only", default="", help="run only the cases whose name holds this")
    parser.add_argument("--skip-templates", action="store_true")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="probe-hardening-")
    servers = []
    results = []
    sigterm_s = None
    sigterm_tried = False
    try:
        main_server = Server(binary, args.model, work, "main")
        servers.append(main_server)
        main_server.start()
        print(json.dumps({"server": "main", "load_s": round(main_server.load_s, 2),
                          "idle_rss_mib": round(main_server.idle_kib / 1024, 1)}), flush=True)
        for name, make_request, linger in hostile_cases():
            if args.only in name:
                run_case(main_server, name, make_request, linger, results)
        main_server.kill()

        if not args.skip_templates:
            for name, template in HOSTILE_TEMPLATES.items():
                if args.only not in name and not (name == SIGTERM_TEMPLATE and args.only in "sigterm"):
                    continue
                server = Server(binary, template_model(binary, work, name, template), work, str(len(servers)))
                servers.append(server)
                try:
                    server.start()
                except RuntimeError as e:
                    row = {"case": name, "status": None, "alive": False, "wall_s": None, "peak_rss_mib": None,
                           "error": str(e)}
                    print(json.dumps(row), flush=True)
                    results.append(row)
                    continue
                for i in range(TEMPLATE_REPEATS.get(name, 1)):
                    run_case(server, name if i == 0 else f"{name} #{i + 1}", chat_request, 0, results)
                if name == SIGTERM_TEMPLATE:
                    # A hostile render in flight, then SIGTERM: seconds to exit.
                    answer = {}
                    sender = threading.Thread(
                        target=lambda: answer.update(
                            zip(("status", "data", "closed"),
                                http_exchange(server.port, chat_request(server.port), CASE_TIMEOUT_S))),
                        daemon=True)
                    sender.start()
                    time.sleep(SIGTERM_AFTER_S)
                    t0 = time.monotonic()
                    sigterm_tried = True
                    server.proc.send_signal(signal.SIGTERM)
                    try:
                        server.proc.wait(timeout=HANG_S)
                        sigterm_s = round(time.monotonic() - t0, 3)
                    except subprocess.TimeoutExpired:
                        sigterm_s = None
                    sender.join(timeout=5)
                    body = answer.get("data", b"").partition(b"\r\n\r\n")[2]
                    row = {"case": "SIGTERM with a hostile render in flight", "sigterm_to_exit_s": sigterm_s,
                           "exited": server.proc.poll() is not None, "exit_code": server.proc.poll(),
                           "in_flight_answer": answer.get("status"),
                           "render_stopped_by_sigterm": b"shutting down" in body,
                           "answer_body": body[:200].decode("utf-8", "replace")}
                    print(json.dumps(row), flush=True)
                server.kill()
    finally:
        for s in servers:
            s.kill()
        shutil.rmtree(work, ignore_errors=True)

    crashes = [r["case"] for r in results if not r.get("alive")]
    hangs = [r["case"] for r in results if r.get("wall_s") is None or r["wall_s"] > HANG_S]
    worst = None
    for r in results:
        if r.get("peak_rss_mib") and r.get("idle_rss_mib"):
            ratio = r["peak_rss_mib"] / r["idle_rss_mib"]
            if worst is None or ratio > worst["ratio"]:
                worst = {"case": r["case"], "peak_rss_mib": r["peak_rss_mib"], "idle_rss_mib": r["idle_rss_mib"],
                         "ratio": round(ratio, 2)}
    print(json.dumps({"summary": True, "cases": len(results), "crashes": len(crashes), "crashed": crashes,
                      "hangs": len(hangs), "hung": hangs, "worst_peak_vs_idle": worst,
                      "sigterm_to_exit_s": sigterm_s,
                      "sigterm_hang": sigterm_tried and sigterm_s is None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

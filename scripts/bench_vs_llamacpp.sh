#!/usr/bin/env bash
# Side-by-side CPU benchmark against llama.cpp (the best-known CPU engine) on
# the same GGUF files, in one run:
#   scripts/bench_vs_llamacpp.sh [--model SRC] [--types bf16,q8_0,q4_k_m] [--threads N] [--rounds N]
# SRC (default synth:mixtral-mini) is quantized by `moe-server quantize` into
# each type (cached under <build>/llamacpp/models/); llama.cpp's own
# `llama-bench` (pp512 and tg64) and moe-server's `bench prefill --tokens 512`
# / `bench decode --tokens 64` then run on each file with the same thread
# count, alternating engine and type for --rounds rounds so a swing of this
# machine's memory bandwidth hits both alike. Both engines' figures are the
# best of their repeats (moe-server's bench reports its best; llama-bench's
# samples_ts gives its own, its mean is printed beside). Prints one JSON line
# per type and round: both engines' figures, the ratios, the issue's targets,
# and the read bandwidth and FMA peak moe-server measured in the same run;
# then one summary line per type: the median and range of the ratios over
# the rounds.
#
# llama.cpp itself: the source of the release that the npm package
# node-llama-cpp carries as a git bundle (scripts/llamacpp_source.sh: the
# pinned version and checksum), built here once with GGML_NATIVE (<build>/llamacpp/, about ten
# minutes on two cores). Needs npm, git, cmake, a C++ compiler and python3
# (JSON of this script only). A benchmark, not a test: nothing here runs in
# scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MOE_BUILD_DIR:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
tools="$build/llamacpp"

model=synth:mixtral-mini
types=bf16,q8_0,q4_k_m
threads=2
rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --types) types="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    *) echo "bench_vs_llamacpp: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bin="$build/moe-server"
[ -x "$bin" ] || { echo "bench_vs_llamacpp: no $bin (build first: scripts/build.sh)" >&2; exit 2; }
log() { echo "bench_vs_llamacpp: $*" >&2; }

# ---- llama.cpp: the pinned release's source, llama-bench built once --------
llama_bench="$(bash "$root/scripts/llamacpp_build.sh" "$tools" llama-bench)/llama-bench"

# ---- the models: one GGUF per type, written by moe-server quantize ----------
declare -A file
for t in ${types//,/ }; do file[$t]="$(bash "$root/scripts/llamacpp_gguf.sh" "$bin" "$tools" "$model" "$t")"; done

# ---- the runs ---------------------------------------------------------------
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq 1 "$rounds"); do
  for t in ${types//,/ }; do
    f="${file[$t]}"
    llama=$("$llama_bench" -m "$f" -t "$threads" -p 512 -n 64 -r 3 -o jsonl 2>/dev/null)
    decode=$("$bin" bench decode --model "$f" --threads "$threads" --tokens 64 --repeat 3 2>/dev/null | tail -1)
    prefill=$("$bin" bench prefill --model "$f" --threads "$threads" --tokens 512 --repeat 2 2>/dev/null | tail -1)
    python3 - "$t" "$round" "$f" "$llama" "$decode" "$prefill" <<'EOF'
import json, sys
t, rnd, path, llama, decode, prefill = sys.argv[1:]
ll = [json.loads(l) for l in llama.splitlines() if l.strip().startswith("{")]
pp = next(r for r in ll if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0)
tg = next(r for r in ll if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0)
d, p = json.loads(decode), json.loads(prefill)
targets = {"q4_k_m": {"decode": 1.2, "prefill": 1.5}, "q8_0": {"decode": 1.1, "prefill": 1.5}}.get(t, {})
out = {
    "bench": "vs_llamacpp", "type": t, "round": int(rnd), "file": path, "threads": d["threads"],
    "llamacpp_build": pp.get("build_commit"), "llamacpp_cpu_info": pp.get("cpu_info"),
    "decode_tok_s": d["decode_tok_s"], "llamacpp_decode_tok_s": max(tg["samples_ts"]),
    "llamacpp_decode_mean_tok_s": tg["avg_ts"], "decode_ratio": d["decode_tok_s"] / max(tg["samples_ts"]),
    "prefill_tok_s": p["prefill_tok_s"], "llamacpp_prefill_tok_s": max(pp["samples_ts"]),
    "llamacpp_prefill_mean_tok_s": pp["avg_ts"], "prefill_ratio": p["prefill_tok_s"] / max(pp["samples_ts"]),
    "targets": targets,
    "read_gbs": d["read_gbs"], "decode_roofline_tok_s": d["roofline_tok_s"],
    "weight_bytes_per_token": d["weight_bytes_per_token"], "fma_peak_gflops": p["fma_peak_gflops"],
}
print(json.dumps(out))
EOF
  done
done | tee "$results"
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for t in dict.fromkeys(r["type"] for r in rows):
    rs = [r for r in rows if r["type"] == t]
    out = {"bench": "vs_llamacpp_summary", "type": t, "rounds": len(rs), "targets": rs[0]["targets"]}
    for k in ("decode_ratio", "prefill_ratio", "read_gbs"):
        v = [r[k] for r in rs]
        out[k] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
    print(json.dumps(out))
EOF

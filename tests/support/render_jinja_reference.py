#!/usr/bin/env python3
"""Renders chat templates with Python's jinja2 exactly as Hugging Face's
apply_chat_template does, as the reference for tests/unit/test_jinja.cpp.

The environment is transformers': ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, the
{% generation %} tag (its body rendered as is), a tojson filter
that is json.dumps(ensure_ascii=False, ...), and the globals raise_exception
and strftime_now (fixed at 2026-01-15 10:30:00 so renders are reproducible).
Variables: messages, tools, documents=None, add_generation_prompt, bos_token,
eos_token and each case's extras.

Usage: render_jinja_reference.py CASES.json OUT.json TEMPLATE_SPEC...
where TEMPLATE_SPEC is NAME=PATH (a .jinja file, or a tokenizer_config.json
whose chat_template is a string). Writes {NAME: {CASE: {"ok": true, "text":
...} | {"ok": false, "error": ...}}}.
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}, as transformers parses it
    (without its assistant-mask bookkeeping, which does not change the text)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load_template(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)["chat_template"]
    return text


def main():
    cases_path, out_path, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    env = environment()
    results = {}
    for spec in specs:
        name, path = spec.split("=", 1)
        template = env.from_string(load_template(path))
        per_case = {}
        for case in cases:
            try:
                text = template.render(
                    messages=case["messages"],
                    tools=case.get("tools"),
                    documents=None,
                    add_generation_prompt=case["add_generation_prompt"],
                    bos_token="<s>",
                    eos_token="</s>",
                    **case.get("extras", {}),
                )
                per_case[case["name"]] = {"ok": True, "text": text}
            except Exception as e:  # the C++ side must fail too
                per_case[case["name"]] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        results[name] = per_case
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()

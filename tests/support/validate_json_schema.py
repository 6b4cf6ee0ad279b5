#!/usr/bin/env python3
"""Validates JSON texts against JSON Schemas with Python's jsonschema, the
reference for tests/unit/test_json_schema.cpp (and for any test that checks
structured output).

Each text must be one JSON value (json.loads, with NaN and Infinity
refused); the validator is the one the schema's $schema names (Draft 2020-12
when absent), after checking the schema itself. Formats are not checked
(jsonschema's default: `format` is an annotation).

Usage: validate_json_schema.py IN.json OUT.json
IN: [{"schema": SCHEMA, "instances": [TEXT, ...]}, ...]
OUT: [[{"valid": true} | {"valid": false, "error": "..."}, ...], ...]
"""
import json
import sys

import jsonschema


def refuse_constant(name):
    raise ValueError("not JSON: " + name)


def check(validator, text):
    try:
        value = json.loads(text, parse_constant=refuse_constant)
    except ValueError as e:
        return {"valid": False, "error": "not JSON: " + str(e)}
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return {"valid": True}
    return {"valid": False, "error": error.message}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        schema = case["schema"]
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validator = cls(schema)
        out.append([check(validator, t) for t in case["instances"]])
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The GGUF both engines read in the comparisons with llama.cpp:
#   scripts/llamacpp_gguf.sh BIN DIR MODEL TYPE
# prints DIR/models/<MODEL as a file name>-TYPE.gguf, written first by
# `BIN quantize` when it is not there (its log in DIR/quantize.log). A file
# from an older build stays: delete it to write it again.
# Used by scripts/bench_vs_llamacpp.sh and scripts/validate_vs_llamacpp.sh.
set -euo pipefail
bin="${1:?usage: scripts/llamacpp_gguf.sh BIN DIR MODEL TYPE}" dir="${2:?}" model="${3:?}" type="${4:?}"
mkdir -p "$dir/models"
name=$(printf '%s' "$model" | tr -c 'A-Za-z0-9_.-' '_')
f="$dir/models/$name-$type.gguf"
if [ ! -f "$f" ]; then
  echo "llamacpp_gguf: quantizing $model to $type" >&2
  "$bin" quantize --model "$model" --type "$type" --out "$f" --threads "$(nproc)" >"$dir/quantize.log" 2>&1 ||
    { echo "llamacpp_gguf: quantize failed; see $dir/quantize.log" >&2; exit 1; }
fi
echo "$f"

#!/usr/bin/env bash
# llama.cpp's tools from the pinned source (scripts/llamacpp_source.sh),
# built once for this CPU:
#   scripts/llamacpp_build.sh DIR TARGET...
# leaves DIR/build/bin/TARGET for each target (llama-bench, llama-perplexity,
# ...), building what is missing with GGML_NATIVE (about ten minutes on two
# cores the first time, ccache when there is one), and prints DIR/build/bin.
# Used by scripts/bench_vs_llamacpp.sh and scripts/validate_vs_llamacpp.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:?usage: scripts/llamacpp_build.sh DIR TARGET...}"
shift
[ $# -gt 0 ] || { echo "llamacpp_build: no target given" >&2; exit 2; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
missing=()
for t in "$@"; do [ -x "$dir/build/bin/$t" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  bash "$root/scripts/llamacpp_source.sh" "$dir" >/dev/null
  echo "llamacpp_build: building ${missing[*]} ($(tr -d ' \n' <"$dir/src/llama.cpp.info.json"))" >&2
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # GGML_NATIVE turns on llama.cpp's AMX kernels where the CPU reports AMX;
  # on this project's Intel VMs they die with SIGILL at their first
  # tileloadd (Q8_0 prompt processing), so they are compiled out.
  # moe-server does not use AMX either.
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF "${launcher[@]}" >"$dir/cmake.log" 2>&1
  cmake --build "$dir/build" --target "${missing[@]}" -j "$(nproc)" >"$dir/build.log" 2>&1 ||
    { echo "llamacpp_build: ${missing[*]} did not build; see $dir/build.log" >&2; exit 1; }
fi
echo "$dir/build/bin"

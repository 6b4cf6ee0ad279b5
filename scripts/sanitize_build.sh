#!/usr/bin/env bash
# The one sanitizer build, shared by scripts/test.sh --sanitize and
# scripts/fuzz.sh: configures its folder once (clang-14, -fsanitize=LIST,
# CUDA off, -O1 with line tables only: reports name file and line, and the
# build skips full debug info), builds TARGET... (default: everything) and
# prints the folder on stdout (the build's own output goes to stderr).
# For address,undefined the folder is build-asan/ and also holds the
# libFuzzer targets of tests/fuzz/ (MOE_FUZZ), so CI compiles the
# instrumented libraries once for the fuzzers and the sanitized tests; any
# other LIST builds into build-san-LIST/. MOE_SANITIZE_BUILD_DIR overrides
# the folder. A folder configured with another compiler or list is
# configured afresh (its corpus and artifacts stay).
# Usage: scripts/sanitize_build.sh LIST [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
list="${1:?sanitize_build.sh needs a sanitizer list, e.g. address,undefined}"
shift
[[ "$list" =~ ^[a-z]+(,[a-z]+)*$ ]] || { echo "sanitize_build.sh: '$list' is not a sanitizer list such as address,undefined" >&2; exit 2; }
build="build-asan"
[ "$list" = "address,undefined" ] || build="build-san-${list//,/-}"
build="${MOE_SANITIZE_BUILD_DIR:-$build}"
fuzz=OFF
[ "$list" = "address,undefined" ] && fuzz=ON
bash scripts/setup.sh >&2
cache="$build/CMakeCache.txt"
if [ ! -f "$cache" ] || ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++-14$' "$cache" \
    || ! grep -q "^MOE_SANITIZE:STRING=$list\$" "$cache" || ! grep -q "^MOE_FUZZ:BOOL=$fuzz\$" "$cache"; then
  CC=clang-14 CXX=clang++-14 cmake --fresh -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DMOE_WITH_CUDA=OFF -DMOE_SANITIZE="$list" -DMOE_FUZZ="$fuzz" >&2
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}" >&2
echo "$build"

#!/usr/bin/env bash
# The one test command: installs dependencies, configures, builds, runs ctest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L unit]
#        scripts/test.sh --sanitize address,undefined [extra ctest args]
# --sanitize builds into its own folder (build-asan/ for address,undefined,
# else build-san-<list>/; CUDA off) and runs the unit, model and server labels
# (unless ctest args say otherwise); any sanitizer report, in a test or in a
# server it started, fails the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
sanitize=""
if [ "${1:-}" = "--sanitize" ]; then
  sanitize="${2:?--sanitize needs a list, e.g. address,undefined}"
  shift 2
fi
if [ -z "$sanitize" ]; then
  bash scripts/build.sh
  if [ -f scripts/setup_test_tools.sh ]; then bash scripts/setup_test_tools.sh; fi
  cd "${MOE_BUILD_DIR:-build}"
  exec ctest --output-on-failure "$@"
fi

build="build-asan"
[ "$sanitize" = "address,undefined" ] || build="build-san-${sanitize//,/-}"
build="${MOE_SANITIZE_BUILD_DIR:-$build}"
bash scripts/setup.sh >&2
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOE_WITH_CUDA=OFF -DMOE_SANITIZE="$sanitize" >&2
fi
cmake --build "$build" -j "$(nproc)" >&2
logs="$root/$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
# Every instrumented process, the servers the tests start included, writes
# its report to $logs; a report fails the run even where a test did not see it.
export ASAN_OPTIONS="detect_leaks=1:log_path=$logs/asan:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:log_path=$logs/tsan:${TSAN_OPTIONS:-}"
[ $# -gt 0 ] || set -- -L '^(unit|model|server)$'
rc=0
(cd "$build" && ctest --output-on-failure "$@") || rc=$?
if [ -n "$(ls -A "$logs")" ]; then
  for f in "$logs"/*; do
    echo "sanitizer report $f:"
    head -n 80 "$f"
  done
  exit 1
fi
exit "$rc"

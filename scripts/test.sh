#!/usr/bin/env bash
# The one test command: checks every #include against the graph of rooms
# (scripts/check_rooms.cmake, seconds, before any build), installs
# dependencies, configures, builds, runs ctest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L chat]
#        scripts/test.sh --quick [extra ctest args]
#        scripts/test.sh --sanitize address,undefined [extra ctest args]
# --quick leaves out the tests labelled slow (a 1.5 GB model, long prefills,
# many rounds, the browser) and soak: the edit-test loop. CI runs everything.
# --sanitize builds with scripts/sanitize_build.sh (clang-14, CUDA off;
# build-asan/ for address,undefined, which scripts/fuzz.sh shares, else
# build-san-<list>/) and runs every label but the browser (web), the npm
# client, soak, gpu and the slow tests (unless ctest args say otherwise); any sanitizer report, in a test
# or in a server it started, fails the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cmake >/dev/null || bash scripts/setup.sh >&2
cmake -P scripts/check_rooms.cmake
sanitize=""
exclude=()
# Tests run in parallel, one per core (MOE_TEST_JOBS overrides): each one
# uses at most two threads, and the test models they share on disk are
# written atomically (tests/support/test_models.cpp).
jobs=(-j "${MOE_TEST_JOBS:-$(nproc)}")
if [ "${1:-}" = "--quick" ]; then
  exclude=(-LE '^(slow|soak)$')
  shift
fi
if [ "${1:-}" = "--sanitize" ]; then
  sanitize="${2:?--sanitize needs a list, e.g. address,undefined}"
  shift 2
fi
if [ -z "$sanitize" ]; then
  bash scripts/build.sh
  if [ -f scripts/setup_test_tools.sh ]; then bash scripts/setup_test_tools.sh; fi
  cd "${MOE_BUILD_DIR:-build}"
  exec ctest --output-on-failure "${jobs[@]}" "${exclude[@]}" "$@"
fi

build="$(bash scripts/sanitize_build.sh "$sanitize")"
logs="$root/$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
# Every instrumented process, the servers the tests start included, writes
# its report to $logs; a report fails the run even where a test did not see it.
export ASAN_OPTIONS="detect_leaks=1:log_path=$logs/asan:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:log_path=$logs/tsan:${TSAN_OPTIONS:-}"
# The slow tests repeat for many rounds what the others check once; under
# ASan they take ten times as long (the grammar's brute-force walks: 25 s ->
# 313 s), so the sanitized run leaves them out unless ctest args say otherwise.
if [ $# -eq 0 ]; then
  exclude=(-LE '^(slow|soak|client|web|gpu)$')
fi
rc=0
(cd "$build" && ctest --output-on-failure "${jobs[@]}" "${exclude[@]}" "$@") || rc=$?
if [ -n "$(ls -A "$logs")" ]; then
  for f in "$logs"/*; do
    echo "sanitizer report $f:"
    head -n 80 "$f"
  done
  exit 1
fi
exit "$rc"

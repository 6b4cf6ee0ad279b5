#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ in the address,undefined
# sanitizer build (scripts/sanitize_build.sh: clang-14, CUDA off, build-asan/,
# which scripts/test.sh --sanitize shares; the main build/ is untouched)
# and runs each for SECONDS (default 60) from the seed corpus of
# tests/fuzz/seeds.sh plus the corpus kept in build-asan/corpus/. Fails on any
# crash, leak, timeout, out-of-memory or sanitizer report (the input that did
# it is left in build-asan/artifacts/), and prints the execs each target reached.
# --runs N runs each target for N executions instead (the long runs: each
# target at its own speed, e.g. --runs 1000000).
# Targets run one per core at a time (MOE_FUZZ_JOBS overrides).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#        scripts/fuzz.sh --runs N [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
limit=()
if [ "${1:-}" = "--runs" ]; then
  runs="${2:?--runs needs a count}"
  [[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --runs wants a positive whole number, not '$runs'" >&2; exit 2; }
  limit=(-runs="$runs")
  what="$runs runs"
  shift 2
else
  seconds="${1:-60}"
  [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2; exit 2; }
  limit=(-max_total_time="$seconds")
  what="${seconds} s"
  shift || true
fi
build="$(bash scripts/sanitize_build.sh address,undefined fuzzers)"
bash tests/fuzz/seeds.sh "$build/seeds" >&2

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp | sed 's/^fuzz_//')"); done
fi
mkdir -p "$build/artifacts" "$build/logs"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One target per core at a time (MOE_FUZZ_JOBS overrides): each fuzzer is
# one process on one thread, so a 2-core machine runs two at once. Each
# writes its verdict to its own file; they are printed in target order.
parallel="${MOE_FUZZ_JOBS:-$(nproc)}"
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: MOE_FUZZ_JOBS must be a positive whole number, not '$parallel'" >&2; exit 2; }
run_target() {
  local t="$1" log="$build/logs/$1.log" verdict="$build/logs/$1.verdict" rc=0 start=$SECONDS max_len=8192
  mkdir -p "$build/corpus/$t"
  # Inputs up to 8 KiB, but 1 KiB for the tokenizers: SentencePiece's
  # encoding time grows with the text and longer texts reach no other code.
  case "$t" in tokenizer) max_len=1024 ;; esac
  "$build/fuzz_$t" "${limit[@]}" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "$build/seeds/$t" > "$log" 2>&1 || rc=$?
  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ "$rc" -eq 0 ] && ! grep -q -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    echo "fuzz: $t: ok, ${execs:-0} execs in $((SECONDS - start)) s ($what), corpus $(ls "$build/corpus/$t" | wc -l) inputs" > "$verdict"
  else
    {
      echo "fuzz: $t: FAILED (exit $rc, ${execs:-?} execs); log $log:"
      grep -E -A 30 'ERROR:|runtime error:|deadly signal|Test unit written' "$log" | head -n 60 || tail -n 40 "$log"
    } > "$verdict"
  fi
}
for t in "${targets[@]}"; do
  [ -x "$build/fuzz_$t" ] || { echo "fuzz.sh: no fuzz target '$t' (tests/fuzz/fuzz_$t.cpp)" >&2; exit 2; }
  rm -f "$build/logs/$t.verdict"
done
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_target "$t" &
done
wait
passed=0
failed=0
for t in "${targets[@]}"; do
  cat "$build/logs/$t.verdict"
  if head -n 1 "$build/logs/$t.verdict" | grep -q ': ok,'; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# Before/after speed of two moe-server binaries in one run: `bench decode`
# and `bench prefill` on each model, the two binaries alternating (A B, then
# B A, ...) so both see the same moments of a noisy machine. Every bench
# line is printed with "build": "before" or "after" added; each line carries
# the ceiling its binary measured in the same process (read GB/s and the
# decode roofline, or the FMA peak), so the ratios are comparable across
# the two. The last lines are one summary per model and bench: the median
# ratio to the ceiling of each binary and after / before.
# Usage: scripts/bench_compare.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]
#   MODELS (default: synth:mixtral-mini and ../shared/data/reference/gguf/Q4_K_M.gguf)
#   THREADS (default: every core), DECODE_TOKENS (32), PREFILL_TOKENS (256)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
before="${1:?usage: scripts/bench_compare.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]}"
after="${2:?usage: scripts/bench_compare.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]}"
rounds="${3:-3}"
for b in "$before" "$after"; do
  [ -x "$b" ] || { echo "bench_compare.sh: $b is not an executable" >&2; exit 2; }
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_compare.sh: ROUNDS must be a positive whole number, not '$rounds'" >&2; exit 2; }
models="${MODELS:-synth:mixtral-mini $root/../shared/data/reference/gguf/Q4_K_M.gguf}"
threads="${THREADS:-$(nproc)}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

run() {  # build-name binary bench model
  local tokens="${DECODE_TOKENS:-32}"
  [ "$3" = prefill ] && tokens="${PREFILL_TOKENS:-256}"
  "$2" bench "$3" --model "$4" --tokens "$tokens" --threads "$threads" 2>/dev/null \
    | grep '^{' | python3 -c 'import json,sys
for line in sys.stdin:
    j=json.loads(line); j["build"]=sys.argv[1]; print(json.dumps(j))' "$1" | tee -a "$out"
}

for r in $(seq 1 "$rounds"); do
  for model in $models; do
    for bench in decode prefill; do
      if [ $((r % 2)) -eq 1 ]; then
        run before "$before" "$bench" "$model"; run after "$after" "$bench" "$model"
      else
        run after "$after" "$bench" "$model"; run before "$before" "$bench" "$model"
      fi
    done
  done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = {}
for j in rows:
    if j["bench"] not in ("decode", "prefill"):
        continue  # the ceiling lines each process prints first
    key = (j.get("model"), j["bench"])
    ratio = j.get("ratio_to_roofline", j.get("ratio_to_peak"))
    speed = j.get("decode_tok_s", j.get("prefill_tok_s"))
    groups.setdefault(key, {}).setdefault(j["build"], []).append((ratio, speed))
for (model, bench), builds in groups.items():
    line = {"bench": "compare", "model": model, "what": bench,
            "ceiling": "read roofline" if bench == "decode" else "fp32 FMA peak"}
    for b in ("before", "after"):
        v = builds.get(b, [])
        line[b + "_ratio_median"] = statistics.median(x[0] for x in v) if v else None
        line[b + "_tok_s_median"] = statistics.median(x[1] for x in v) if v else None
        line[b + "_runs"] = len(v)
    if line["before_ratio_median"] and line["after_ratio_median"]:
        line["after_over_before"] = line["after_ratio_median"] / line["before_ratio_median"]
    print(json.dumps(line))
EOF

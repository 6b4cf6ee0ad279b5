#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (root, no network needed):
#   scripts/gpu_check.sh OUTDIR
# Builds moe-server with CUDA for this GPU (CMAKE_CUDA_ARCHITECTURES=native),
# runs the gpu-labelled tests and the GPU benchmarks, and writes
#   OUTDIR/summary.txt      one line per step: ok / FAILED rc / skipped, seconds
#   OUTDIR/gpu_check.log    everything the steps printed
#   OUTDIR/ctest_gpu.log    ctest -L gpu --output-on-failure
#   OUTDIR/bench.jsonl      the benchmarks' JSON lines
#   OUTDIR/calibrate.txt    the latency model's fit on this machine (CPU and GPU),
#                           Mixtral-8x7B's expert shape; calibrate-mini.txt mixtral-mini's
# and last quantizes mixtral-mini to Q4_K_M and Q8_0 GGUFs and benchmarks
# them with their quantized experts on the device.
# Build dependencies missing from the machine come from .gpu-deps/ (made by
# scripts/fetch_gpu_deps.sh where Debian's archive is reachable), unpacked
# into a private prefix, never into /. Each step has a time limit and a
# failure does not stop the next; the whole run takes about 12 minutes on an
# H100 machine with 16 cores: where one command may run only 10 minutes,
# start it in the background (setsid) and collect OUTDIR in a second command.
# MOE_GPU_CHECK_PREFIX=1 uses the prefix even where the system has the
# packages (to try the mechanism on a development machine).
set -uo pipefail
out="${1:?usage: scripts/gpu_check.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu_check.log"
summary="$out/summary.txt"
bench="$out/bench.jsonl"
: >"$log"
: >"$summary"
: >"$bench"
t_start=$(date +%s)
cores=$(nproc)

note() { echo "$*" | tee -a "$summary"; }

# step NAME SECONDS COMMAND...: runs it with a time limit, output to the log.
step() {
  local name="$1" limit="$2"
  shift 2
  local t0=$(date +%s)
  echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then note "ok      $name (${dt}s)"; else note "FAILED  $name: rc $rc (${dt}s; 124 = time limit)"; fi
  return $rc
}

# bench_step NAME SECONDS ARGS...: a moe-server bench whose JSON lines go to bench.jsonl.
bench_step() {
  local name="$1" limit="$2"
  shift 2
  step "$name" "$limit" bash -c 'set -o pipefail; "$@" | tee -a "'"$bench"'"' bench "$@"
}

note "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $cores cores"
{ nvidia-smi || true; nvcc --version || true; cmake --version | head -1 || true; free -g || true; df -h "$root" || true; } >>"$log" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu     /' | tee -a "$summary"

# ---- build dependencies: the system's, else the carried .debs -------------
have_system_deps() {
  command -v pkg-config >/dev/null && pkg-config --exists cpp-httplib sentencepiece 2>/dev/null &&
    [ -f /usr/include/nlohmann/json.hpp ] && [ -f /usr/include/catch2/catch.hpp ]
}
cmake_extra=()
if [ "${MOE_GPU_CHECK_PREFIX:-0}" = 1 ] || ! have_system_deps; then
  prefix=/tmp/moe-deps
  if ! ls "$root"/.gpu-deps/debs/*.deb >/dev/null 2>&1; then
    note "FAILED  dependencies: missing here and no .gpu-deps/debs (run scripts/fetch_gpu_deps.sh where apt works, carry .gpu-deps)"
    exit 1
  fi
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in "$root"/.gpu-deps/debs/*.deb; do dpkg-deb -x "$f" "$prefix" || dpkg -x "$f" "$prefix"; done
  libdir="$prefix/usr/lib/x86_64-linux-gnu"
  # Absolute symlinks in the packages point into /: repoint them into the prefix.
  find "$prefix" -type l | while read -r link; do
    target=$(readlink "$link")
    case "$target" in /*) [ -e "$prefix$target" ] && ln -sfn "$prefix$target" "$link" ;; esac
  done
  export PKG_CONFIG_LIBDIR="$libdir/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LIBRARY_PATH="$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}"
  pkgconfig_bin=$(command -v pkg-config || echo "$prefix/usr/bin/pkgconf")
  cmake_extra+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DPKG_CONFIG_EXECUTABLE="$pkgconfig_bin"
    -DCMAKE_BUILD_RPATH="$libdir")
  note "deps    unpacked $(ls "$root"/.gpu-deps/debs/*.deb | wc -l) packages from .gpu-deps into $prefix"
else
  note "deps    from the system"
fi
if [ ! -d "$root/../shared/data" ] && [ -d "$root/.gpu-deps/shared-data" ]; then
  export MOE_SHARED_DATA="$root/.gpu-deps/shared-data"
fi
shared="${MOE_SHARED_DATA:-$root/../shared/data}"

# ---- build ----------------------------------------------------------------
build="$root/build-gpu"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
arch=native
nvidia-smi >/dev/null 2>&1 || arch="80;90"  # no GPU to ask (a dry run): build for named ones
step "configure (CUDA architectures $arch)" 300 cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" "${cmake_extra[@]}" || { note "stopping: no build"; exit 1; }
grep -E "CUDA executor|Found|sentencepiece|httplib" "$log" | tail -5 >>"$summary"
# Keep going past a failing file, so one run reports every compile error.
keep_going=(-k)
[ ${#gen[@]} -gt 0 ] && keep_going=(-k 0)
step "build" 900 cmake --build "$build" -j "$cores" -- "${keep_going[@]}" || { note "stopping: no build"; exit 1; }
bin="$build/moe-server"
# MOE_GPU_CHECK_STEPS=build stops here (a built tree for a command of one's own).
[ "${MOE_GPU_CHECK_STEPS:-all}" = build ] && { note "built; MOE_GPU_CHECK_STEPS=build stops here"; exit 0; }
export HOME="${HOME:-/root}"

# ---- tests ----------------------------------------------------------------
( cd "$build" && timeout 900 ctest -L gpu --output-on-failure >"$out/ctest_gpu.log" 2>&1 )
rc=$?
note "$([ $rc -eq 0 ] && echo "ok     " || echo "FAILED ") ctest -L gpu: $(grep -E "tests passed|tests failed" "$out/ctest_gpu.log" | tail -1)"
grep -E "Skipped|\*\*\*Failed|Not Run" "$out/ctest_gpu.log" | head -20 >>"$summary"

# ---- benchmarks -----------------------------------------------------------
bench_step "bench gpu (mixtral-8x7b expert shape)" 240 "$bin" bench gpu
# The latency model of this machine for Mixtral-8x7B's expert shape: the
# planner uses it from here on; its fit errors are the device-side accuracy.
step "calibrate synth:mixtral-8x7b" 420 bash -c 'set -o pipefail; "$0" calibrate --model synth:mixtral-8x7b --force --reps 9 | tee "'"$out/calibrate.txt"'"' "$bin"
big=(--model synth:mixtral-8x7b)
bench_step "decode mixtral-8x7b, 24 GiB GPU" 300 "$bin" bench decode "${big[@]}" --gpu-memory 24 --tokens 32 --repeat 2
bench_step "prefill 512 mixtral-8x7b, 24 GiB GPU" 240 "$bin" bench prefill "${big[@]}" --gpu-memory 24 --tokens 512 --repeat 2
bench_step "prefill 2048 mixtral-8x7b, 24 GiB GPU" 300 "$bin" bench prefill "${big[@]}" --gpu-memory 24 --tokens 2048 --repeat 1
bench_step "beam 4,8,16 mixtral-8x7b, 24 GiB GPU" 300 "$bin" bench beam "${big[@]}" --gpu-memory 24 --widths 4,8,16 --tokens 16
bench_step "decode mixtral-8x7b, CPU only" 240 "$bin" bench decode "${big[@]}" --gpu-device none --tokens 16 --repeat 1
bench_step "prefill 512 mixtral-8x7b, CPU only" 240 "$bin" bench prefill "${big[@]}" --gpu-device none --tokens 512 --repeat 1
bench_step "prefill 2048 mixtral-8x7b, CPU only" 300 "$bin" bench prefill "${big[@]}" --gpu-device none --tokens 2048 --repeat 1
bench_step "beam 4,8,16 mixtral-8x7b, CPU only" 300 "$bin" bench beam "${big[@]}" --gpu-device none --widths 4,8,16 --tokens 16
mini=(--model synth:mixtral-mini)
step "calibrate synth:mixtral-mini" 240 bash -c 'set -o pipefail; "$0" calibrate --model synth:mixtral-mini --force --reps 9 | tee "'"$out/calibrate-mini.txt"'"' "$bin"
bench_step "decode mixtral-mini, 25% experts on the GPU" 120 "$bin" bench decode "${mini[@]}" --gpu-memory 25% --tokens 64
bench_step "prefill 512 mixtral-mini, 25% on the GPU" 120 "$bin" bench prefill "${mini[@]}" --gpu-memory 25% --tokens 512
bench_step "beam 4,8,16 mixtral-mini, 25% on the GPU" 180 "$bin" bench beam "${mini[@]}" --gpu-memory 25% --widths 4,8,16
bench_step "decode mixtral-mini, CPU only" 120 "$bin" bench decode "${mini[@]}" --gpu-device none --tokens 64
prompts="$shared/prompts/sharegpt_v3_filtered_1000.json"
if [ -f "$prompts" ]; then
  step "profile mixtral-mini on ShareGPT" 240 "$bin" profile "${mini[@]}" --prompts "$prompts" --limit 100 --spread \
    --gen-tokens 8 --out "$out/profile-mini.json"
  bench_step "decode mixtral-mini, 25% on the GPU, popularity plan" 120 "$bin" bench decode "${mini[@]}" \
    --gpu-memory 25% --profile "$out/profile-mini.json" --tokens 64
else
  note "skipped profile: no $prompts"
fi

# Quantized weights on the device: mixtral-mini as Q4_K_M and Q8_0 GGUFs.
for type in q4_k_m q8_0; do
  gguf="$out/mixtral-mini-$type.gguf"
  step "quantize mixtral-mini to $type" 240 "$bin" quantize "${mini[@]}" --type "$type" --out "$gguf" --threads "$cores" || continue
  bench_step "bench gpu, mixtral-mini $type experts" 120 "$bin" bench gpu --model "$gguf"
  bench_step "decode mixtral-mini $type, all on the GPU" 120 "$bin" bench decode --model "$gguf" --gpu-memory 100% --tokens 64
  bench_step "decode mixtral-mini $type, 25% on the GPU" 120 "$bin" bench decode --model "$gguf" --gpu-memory 25% --tokens 64
  bench_step "prefill 512 mixtral-mini $type, 25% on the GPU" 120 "$bin" bench prefill --model "$gguf" --gpu-memory 25% --tokens 512
  bench_step "decode mixtral-mini $type, CPU only" 120 "$bin" bench decode --model "$gguf" --gpu-device none --tokens 64
  rm -f "$gguf"
done

note "total $(($(date +%s) - t_start))s"

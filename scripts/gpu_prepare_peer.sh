#!/usr/bin/env bash
# Run HERE, before a lent GPU machine runs issue 33's side-by-side with
# llama.cpp: builds llama.cpp's llama-bench from the pinned source
# (scripts/llamacpp_source.sh) with CUDA for Hopper (sm_90: H100, H200) and
# the CPU kernels of the lent machines' Sapphire Rapids hosts (AVX-512 with
# VNNI and BF16; AMX left out, as in scripts/bench_vs_llamacpp.sh: its
# kernels died with SIGILL on this project's Intel VMs), statically linked
# except for the CUDA libraries, which that machine's toolkit provides
# (without NCCL: one GPU, and the lent machine may not have it).
# sm_90 machine code only (90-real): with the PTX beside it (90), the
# binary was 68 MB stripped and 41 MB compressed (2026-11-28, 70 minutes to
# build on 2 cores), too much to carry beside moe-server and its packages.
# The build stays in build-peer/ (rebuilds are incremental); the stripped
# binary goes compressed into .gpu-peer/llama-bench.xz with the source's
# description, for the device tool to carry: carry [".gpu-peer"].
# Prints the build's time and the sizes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-peer"
out="$root/.gpu-peer"
mkdir -p "$out"
src=$(bash "$root/scripts/llamacpp_source.sh" "$build/llamacpp")
t0=$(date +%s)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$build/cuda" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=ON \
  -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
  "${launcher[@]}" >"$build/cmake.log" 2>&1 || { echo "gpu_prepare_peer: configure failed; see $build/cmake.log" >&2; exit 1; }
cmake --build "$build/cuda" --target llama-bench -j "$(nproc)" >"$build/build.log" 2>&1 ||
  { echo "gpu_prepare_peer: llama-bench did not build; see $build/build.log" >&2; exit 1; }
strip -o "$out/llama-bench" "$build/cuda/bin/llama-bench"
xz -T0 -6 -f "$out/llama-bench"
cp "$src/llama.cpp.info.json" "$out/"
# The shared libraries it needs beyond libc, libstdc++ and CUDA's (OpenMP's
# libgomp), for gpu_check.sh to put last on the library path there.
rm -rf "$out/lib" && mkdir -p "$out/lib"
ldd "$build/cuda/bin/llama-bench" | awk '/=> \//{print $3}' |
  { grep -vE '/lib(c|m|dl|rt|pthread|stdc\+\+|gcc_s|cuda|cudart|cublas|cublasLt)\.so' || true; } |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
echo "gpu_prepare_peer: built in $(($(date +%s) - t0)) s; llama-bench $(stat -c %s "$build/cuda/bin/llama-bench") bytes," \
  "stripped and compressed $(stat -c %s "$out/llama-bench.xz") bytes, carried libraries: $(ls "$out/lib" | tr '\n' ' ')" \
  "($(du -sb "$out/lib" | cut -f1) bytes); needs: $(ldd "$build/cuda/bin/llama-bench" |
  grep -oE 'lib(cuda|cublas|cublasLt|cudart)[^ ]*' | sort -u | tr '\n' ' ')"

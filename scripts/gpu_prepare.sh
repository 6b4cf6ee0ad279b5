#!/usr/bin/env bash
# Run HERE (a machine with Debian's package archive and the CUDA toolkit),
# before scripts/gpu_check.sh runs on a lent GPU machine that has no network,
# none of our Debian build dependencies and minutes of device time:
#   1. downloads the .deb files of those dependencies (headers, pkg-config
#      files and the libraries they link) into .gpu-deps/debs/;
#   2. copies the shared data the GPU tests and benchmarks read (the Mistral
#      tokenizer, the ShareGPT prompts, Qwen3's chat template) into
#      .gpu-deps/shared-data/;
#   3. builds moe-server and the gpu tests for Hopper (sm_90: H100, H200)
#      into build-gpu/, keeps only what `ctest -L gpu` and the benchmarks run
#      (binaries, CTest files) and stamps it with this checkout's path and
#      scripts/gpu_source_hash.sh, so gpu_check.sh there runs it instead of
#      spending device minutes on a build (and on a compiler of another
#      version). It builds there after all when the stamp does not match.
# The folders are git-ignored; the device tool carries them:
#   carry [".gpu-deps", ".gpu-node", "build-gpu"]   (about 59 MB together, 66 MB
#   with the working tree; the tool carries 64 MiB, 67.1 MB, at most)
# MOE_GPU_PREPARE_BUILD=0 skips step 3.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/.gpu-deps"
mkdir -p "$out/debs" "$out/shared-data/prompts"

PACKAGES=(
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libssl3 zlib1g-dev libbrotli-dev libbrotli1
  nlohmann-json3-dev libsentencepiece-dev libsentencepiece0 catch2 libsimde-dev
  libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2
  libdnnl-dev libdnnl2 ocl-icd-libopencl1
  pkgconf pkgconf-bin pkg-config libpkgconf3
)
apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64)
if ! apt-cache show libcpp-httplib-dev >/dev/null 2>&1; then apt-get "${apt_opts[@]}" update -qq; fi
rm -f "$out/debs"/*.deb
(cd "$out/debs" && apt-get "${apt_opts[@]}" download "${PACKAGES[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
for p in "${PACKAGES[@]}"; do
  ls "$out/debs/${p}_"*.deb >/dev/null 2>&1 || { echo "gpu_prepare: $p was not downloaded" >&2; exit 1; }
done

shared="$root/../shared/data"
if [ -d "$shared" ]; then
  cp "$shared/prompts/sharegpt_v3_filtered_1000.json" "$out/shared-data/prompts/"
  rm -rf "$out/shared-data/tokenizers"
  mkdir -p "$out/shared-data/tokenizers"
  cp "$shared/tokenizers/mistral-v1.model" "$out/shared-data/tokenizers/"
  # The openai SDK case serves a model with Qwen3's chat template (tools).
  mkdir -p "$out/shared-data/chat_templates"
  cp "$shared/chat_templates/Qwen-Qwen3-0.6B.jinja" "$out/shared-data/chat_templates/"
fi

# Node.js (this machine's, one self-contained binary) and the openai npm
# package without its type declarations, for the SDK case on the GPU: about
# 25 MB compressed, packed once (xz takes about 2 minutes), into .gpu-node/
# (a folder of its own: the side-by-side with llama.cpp carries no Node.js).
node_out="$root/.gpu-node"
mkdir -p "$node_out"
node_bin=$(command -v node || true)
modules="$root/build/npm/node_modules/openai"
if [ ! -f "$node_out/node.tar.xz" ] && [ -n "$node_bin" ] && [ -f "$modules/package.json" ]; then
  stage=$(mktemp -d)
  mkdir -p "$stage/node_modules"
  cp "$(readlink -f "$node_bin")" "$stage/node"
  (cd "$(dirname "$modules")" && find openai -type f ! \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \
    -o -name '*.ts' -o -name '*.mts' -o -name '*.md' \) -print0 | xargs -0 cp --parents -t "$stage/node_modules")
  tar cf - -C "$stage" node node_modules | xz -T0 -6 >"$node_out/node.tar.xz.tmp" && mv "$node_out/node.tar.xz.tmp" "$node_out/node.tar.xz"
  rm -rf "$stage"
elif [ ! -f "$node_out/node.tar.xz" ]; then
  echo "gpu_prepare: no Node.js or no openai package in build/npm (scripts/setup_test_tools.sh): the SDK case will skip there" >&2
fi

if [ "${MOE_GPU_PREPARE_BUILD:-1}" != 0 ]; then
  # The build itself stays in build-gpu-full/ (an incremental rebuild takes
  # a minute or two); build-gpu/ gets its binaries and CTest files only.
  full="$root/build-gpu-full"
  build="$root/build-gpu"
  # test_client (the openai SDK case) looks for Node.js and the package where
  # gpu_check.sh unpacks .gpu-node/node.tar.xz.
  configured=$(cmake -S "$root" -B "$full" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMOE_NODE_EXECUTABLE=/tmp/moe-node/node -DMOE_TEST_NODE_MODULES=/tmp/moe-node/node_modules)
  grep -q "CUDA executor ON" <<<"$configured" || { echo "gpu_prepare: no CUDA toolkit here (nvcc)" >&2; exit 1; }
  # MOE_GPU_PREPARE_TESTS=0: moe-server alone (7 MB), for a call that runs no
  # tests and carries llama.cpp's llama-bench beside it (gpu_check.sh's peer steps).
  binaries=(moe-server test_gpu test_client)
  [ "${MOE_GPU_PREPARE_TESTS:-1}" = 0 ] && binaries=(moe-server)
  cmake --build "$full" -j "$(nproc)" --target "${binaries[@]}"
  # The binaries and every CTest file (ctest reads them; the tests of the
  # labels not built register as not built and -L gpu leaves them out),
  # their paths moved from build-gpu-full to build-gpu.
  rm -rf "$build"
  (cd "$full" && find . -type f \( -name 'CTestTestfile.cmake' -o -name '*_tests-*.cmake' -o -name '*_include-*.cmake' \
    -o -name '*_slow_labels.cmake' \) -print0) | while IFS= read -r -d '' f; do
    mkdir -p "$build/$(dirname "$f")"
    sed "s#$full#$build#g" "$full/$f" >"$build/$f"
  done
  for b in "${binaries[@]}"; do strip -o "$build/$b" "$full/$b"; done
  printf 'root=%s\nsources=%s\n' "$root" "$(bash "$root/scripts/gpu_source_hash.sh" "$root")" >"$build/prebuilt.stamp"
  du -sh "$build" | awk '{print "gpu_prepare: build-gpu holds " $1 " (sm_90)"}'
fi
du -sh "$out" "$node_out" | awk '{print "gpu_prepare: " $2 " holds " $1}'

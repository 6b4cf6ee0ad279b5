#!/usr/bin/env bash
# Run HERE (a machine with Debian's package archive), before a session runs
# scripts/gpu_check.sh on a rented GPU machine that has no network and none
# of our Debian build dependencies. Downloads the .deb files of those
# dependencies (headers, pkg-config files and the libraries they link) into
# .gpu-deps/debs/, and copies the shared data the GPU benchmarks read into
# .gpu-deps/shared-data/. The folder is git-ignored; the device tool carries
# it (carry [".gpu-deps"]). gpu_check.sh unpacks the .debs into a private
# prefix there, never into /.
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
  ls "$out/debs/${p}_"*.deb >/dev/null 2>&1 || { echo "fetch_gpu_deps: $p was not downloaded" >&2; exit 1; }
done

shared="$root/../shared/data"
if [ -d "$shared" ]; then
  cp "$shared/prompts/sharegpt_v3_filtered_1000.json" "$shared/prompts/sharegpt_sg90k_first_sampled_sorted.json" \
     "$out/shared-data/prompts/"
  cp -r "$shared/tokenizers" "$out/shared-data/"
fi
du -sh "$out" | awk '{print "fetch_gpu_deps: .gpu-deps holds " $1}'

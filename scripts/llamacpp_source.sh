#!/usr/bin/env bash
# The pinned llama.cpp source: the release that the npm package
# node-llama-cpp (version and checksum below) carries as a git bundle.
#   scripts/llamacpp_source.sh DIR
# leaves the source in DIR/src (fetching the package into DIR once, checking
# its checksum, cloning the bundle) and prints DIR/src. Needs npm and git.
# Used by scripts/bench_vs_llamacpp.sh (the CPU comparison) and
# scripts/gpu_prepare_peer.sh (llama-bench with CUDA for a lent GPU).
set -euo pipefail
dir="${1:?usage: scripts/llamacpp_source.sh DIR}"
NLC_VERSION=3.22.1
NLC_SHA256=a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
if [ ! -f "$dir/src/CMakeLists.txt" ]; then
  tgz="$dir/node-llama-cpp-$NLC_VERSION.tgz"
  if [ ! -f "$tgz" ]; then
    echo "llamacpp_source: fetching node-llama-cpp $NLC_VERSION from npm (it carries llama.cpp's source)" >&2
    (cd "$dir" && npm pack --silent "node-llama-cpp@$NLC_VERSION" >/dev/null)
  fi
  echo "$NLC_SHA256  $tgz" | sha256sum -c --quiet - || { echo "llamacpp_source: checksum mismatch: $tgz" >&2; exit 1; }
  rm -rf "$dir/src" "$dir/pkg" && mkdir -p "$dir/pkg"
  tar xzf "$tgz" -C "$dir/pkg" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  git -c advice.detachedHead=false clone -q "$dir/pkg/package/llama/gitRelease.bundle" "$dir/src"
  cp "$dir/pkg/package/llama/llama.cpp.info.json" "$dir/src/llama.cpp.info.json"
fi
echo "$dir/src"

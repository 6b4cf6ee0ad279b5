#!/usr/bin/env bash
# Installs the build dependencies (scripts/setup.sh), configures and builds
# build/moe-server (Release). Idempotent; an up-to-date build is quick.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
build="${MOE_BUILD_DIR:-build}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$build" -j "$(nproc)" >&2

#!/usr/bin/env bash
# Prints one hash of every file a build of moe-server reads (sources, CMake
# files, tests, the committed web bundle and assets; not the READMEs, the
# scripts, the GPU run logs, build folders, the .gpu-* carries or node_modules), so that
# scripts/gpu_check.sh can tell whether the build scripts/gpu_prepare.sh
# made here is the build of the tree it was carried with.
# Usage: scripts/gpu_source_hash.sh [ROOT]   (default: this checkout)
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
find . \( -path ./.git -o -path './build*' -o -path './.gpu-*' -o -path ./scripts -o -path ./docs \
  -o -name node_modules \) -prune -o -type f ! -name '*.md' ! -name '*.tmp*' -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-32

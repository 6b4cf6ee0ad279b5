#!/usr/bin/env bash
# The one test command: installs dependencies, configures, builds, runs ctest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

bash scripts/setup.sh
[ -x scripts/setup_test_tools.sh ] && bash scripts/setup_test_tools.sh

build="${MOE_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure "$@"

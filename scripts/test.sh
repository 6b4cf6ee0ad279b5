#!/usr/bin/env bash
# The one test command: installs dependencies, configures, builds, runs ctest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/build.sh
if [ -f scripts/setup_test_tools.sh ]; then bash scripts/setup_test_tools.sh; fi
cd "${MOE_BUILD_DIR:-build}"
ctest --output-on-failure "$@"

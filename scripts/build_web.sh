#!/usr/bin/env bash
# Rebuilds the browser UI bundle web/dist/index.html from web/src (Node 20 +
# npm needed here only; building the C++ never needs Node). Commit the result:
# the "web: bundle is up to date" test fails while it is stale.
# Usage: scripts/build_web.sh           install web/node_modules from the lockfile if needed, build
#        scripts/build_web.sh --check   exit 1 if the committed bundle differs from a fresh build
set -euo pipefail
cd "$(dirname "$0")/../web"

# npm ci wipes and reinstalls; only do it when the lockfile changed since the
# last install (npm keeps its own copy in node_modules/.package-lock.json).
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
node build.mjs "$@"

#!/usr/bin/env bash
# Builds moe-server if needed, then runs `moe-server serve` with the given
# flags. Without --model it serves the built-in demo model.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
exec "$root/${MOE_BUILD_DIR:-build}/moe-server" serve "$@"

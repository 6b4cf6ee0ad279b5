#!/usr/bin/env bash
# Installs what the client and web tests need, when missing: Node.js + npm and
# Chromium from Debian, Python's jinja2 (python3-jinja2, the reference
# renderer of tests/chat/test_jinja.cpp) and jsonschema (python3-jsonschema,
# the validator of tests/chat/test_json_schema.cpp), and the npm packages pinned in tests/client/
# (package.json + package-lock.json: openai, playwright-core) into
# <build>/npm/node_modules. Called by scripts/test.sh after setup.sh; the
# build folder is $MOE_BUILD_DIR (default build). Idempotent: a second run
# only compares a checksum. A failed download is reported, not fatal: the
# client tests then fail with a message pointing here, the other tests run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MOE_BUILD_DIR:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
prefix="$build/npm"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1 || missing+=(python3-jinja2)
/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1 || missing+=(python3-jsonschema)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_test_tools: installing ${missing[*]} (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
    echo "setup_test_tools: WARNING: could not install ${missing[*]}; client/web tests will fail or skip" >&2
  fi
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "setup_test_tools: WARNING: npm is not available; the openai and playwright-core packages are not installed" >&2
  exit 0
fi

lock="$root/tests/client/package-lock.json"
stamp="$prefix/node_modules/.moe-lock.sha256"
want="$(sha256sum "$root/tests/client/package.json" "$lock" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup_test_tools: npm packages up to date in $prefix/node_modules"
  exit 0
fi

echo "setup_test_tools: npm ci into $prefix"
mkdir -p "$prefix"
cp "$root/tests/client/package.json" "$lock" "$prefix/"
if npm ci --prefix "$prefix" --no-audit --no-fund --loglevel=error; then
  echo "$want" > "$stamp"
else
  echo "setup_test_tools: WARNING: npm ci failed (offline?); the client tests will fail until this succeeds" >&2
fi

#!/usr/bin/env bash
# Installs the Debian packages that building and testing moe-server need.
# Idempotent: packages already present are not fetched again. Run as root
# (or with sudo available) on a fresh Debian machine.
set -euo pipefail

PACKAGES=(
  cmake g++ make pkg-config
  libcpp-httplib-dev nlohmann-json3-dev
  libsentencepiece-dev sentencepiece
  libpcre2-dev libutf8proc-dev  # engine/text/hf_tokenizer.cpp: pre-tokenizer regexes, Unicode normalization
  libdnnl-dev catch2 libsimde-dev
  curl
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer and the sanitizers with clang
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all build packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

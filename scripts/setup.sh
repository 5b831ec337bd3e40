#!/usr/bin/env bash
# Installs what detaudit's build and tests need, from Debian 12 packages.
# Idempotent: when everything is present it only asks dpkg and returns. Uses sudo only when not root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git curl ca-certificates
  libcli11-dev nlohmann-json3-dev doctest-dev libpcre2-dev libxxhash-dev
  libcurl4-openssl-dev libcpp-httplib-dev
  libvulkan-dev glslc mesa-vulkan-drivers
  clang libclang-rt-14-dev
  chromium
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
install_node_modules() {
  # The e2e test of the official OpenAI Node client: its exact version is pinned by the lockfile.
  local dir
  dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e/openai-node" && pwd)
  if [ ! -d "$dir/node_modules/openai" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund --silent) || { echo "setup.sh: npm ci failed in $dir" >&2; exit 1; }
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  command -v npm >/dev/null || missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  install_node_modules
  exit 0
fi

echo "setup.sh: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
command -v npm >/dev/null || $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
install_node_modules
echo "setup.sh: done" >&2

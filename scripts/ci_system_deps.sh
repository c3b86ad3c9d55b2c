#!/usr/bin/env bash
# System packages CI needs (Debian/Ubuntu, run as root). Idempotent: installs only what is missing.
#   postgresql       - throwaway metadata DB for the stress test (scripts/postgres.sh)
#   chromium,
#   chromium-driver  - headless browser for the UI tests
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "ci_system_deps.sh: run as root (sudo bash $0)" >&2; exit 1; }
PACKAGES=(postgresql chromium chromium-driver)
missing=()
for pkg in "${PACKAGES[@]}"; do
  if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    echo "ci_system_deps: $pkg already installed"
  else
    missing+=("$pkg")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "ci_system_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
# Debian's postgresql package may start a cluster service; the tests start their own server.

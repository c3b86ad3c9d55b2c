#!/usr/bin/env bash
# System packages CI needs (Debian/Ubuntu, run as root). Idempotent: installs only what is missing.
#   postgresql       - throwaway metadata DB for the stress test (scripts/postgres.sh)
#   chromium,
#   chromium-driver  - headless browser for the UI tests
#   docker.io,
#   docker-compose,
#   debootstrap      - the Docker Compose smoke run (scripts/docker_smoke.py): a private dockerd,
#                      Compose v1 where v2 is missing, the stand-in images' Debian base. Optional:
#                      when they cannot be installed, tests/integration/test_docker_stack.py skips
#                      and says why.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "ci_system_deps.sh: run as root (sudo bash $0)" >&2; exit 1; }
PACKAGES=(postgresql chromium chromium-driver)
OPTIONAL=(docker.io docker-compose debootstrap)

missing_of() {
  local pkg
  for pkg in "$@"; do
    if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      echo "ci_system_deps: $pkg already installed" >&2
    else
      echo "$pkg"
    fi
  done
}
mapfile -t missing < <(missing_of "${PACKAGES[@]}")
mapfile -t missing_optional < <(missing_of "${OPTIONAL[@]}")
if [ "${#missing[@]}" -eq 0 ] && [ "${#missing_optional[@]}" -eq 0 ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
if [ "${#missing[@]}" -gt 0 ]; then
  echo "ci_system_deps: installing ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if [ "${#missing_optional[@]}" -gt 0 ]; then
  echo "ci_system_deps: installing ${missing_optional[*]}"
  apt-get install -y -q --no-install-recommends "${missing_optional[@]}" \
    || echo "ci_system_deps: could not install ${missing_optional[*]}: the Docker smoke test will skip" >&2
fi
# Debian's postgresql package may start a cluster service; the tests start their own server. Likewise
# docker.io may start a system dockerd; the smoke run starts a private one on its own socket.

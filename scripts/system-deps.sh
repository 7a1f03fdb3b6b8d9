#!/usr/bin/env bash
# Debian packages the test suite needs: docker-compose (validates docker-compose.yml without an
# engine), prometheus and promtool (a real scrape in the tests; configs and alert tests), amtool
# (the Alertmanager config), chromium (headless: the Temporal UI decoding through the codec
# endpoint), libtcmalloc-minimal4 (the CPU engine's allocator: workers/llm.py). Idempotent.
set -euo pipefail
missing=()
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
command -v chromium >/dev/null || missing+=(chromium)
[[ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ]] || missing+=(libtcmalloc-minimal4)
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

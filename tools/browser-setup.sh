#!/usr/bin/env bash
# Headless Chromium (Debian's package) for tools/check_html.py. Playwright drives it; it never downloads
# a browser of its own.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi
chromium --version

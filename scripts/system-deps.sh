#!/usr/bin/env bash
# Debian packages the tests use beyond Python's and the SBF build's: iproute2 (ip, tc) and
# iptables for the emulated internet (client/psyche/testnet/internet.py); chromium for the run
# explorer's browser checks (tests/e2e/explorer_browser.py, Playwright drives /usr/bin/chromium,
# so no browser is downloaded). Best effort: without
# root, apt or a registry the tests that need them skip, naming what is missing.
set -uo pipefail
want=(iproute2 iptables chromium postgresql)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
((${#missing[@]})) || exit 0
SUDO=()
[ "$(id -u)" = 0 ] || SUDO=(sudo -n)
if command -v apt-get >/dev/null; then
  echo "[system-deps] apt-get install ${missing[*]}" >&2
  "${SUDO[@]}" apt-get update -qq >/dev/null 2>&1
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
    >/dev/null 2>&1 || echo "[system-deps] could not install ${missing[*]}; their tests skip" >&2
fi
exit 0

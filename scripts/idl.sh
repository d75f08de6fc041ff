#!/usr/bin/env bash
# Generate idl/<program>.json for every program (`--program NAME` for one) from the programs (Anchor's
# idl-build machinery, no anchor CLI); `scripts/idl.sh --check` fails if the committed IDL is stale.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/psyche/cargo-target}"
exec python3 "$root/scripts/idl.py" "$@"

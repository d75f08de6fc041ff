#!/usr/bin/env bash
# Generate idl/<program>.json for every program (`--program NAME` for one) from the programs (Anchor's
# idl-build machinery, no anchor CLI); `scripts/idl.sh --check` fails if the committed IDL is stale.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# A target directory of its own: the programs built with `idl-build` and without it share
# fingerprints, so in one directory this check and `cargo test` rebuilt each other's (45 s a run).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/psyche/cargo-target}/idl-build"
# Run on its own (sources just edited), it keeps the record of scripts/cargo_mtimes.py current.
python3 "$root/scripts/cargo_mtimes.py" "${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}/cargo-mtimes.json" > /dev/null
exec python3 "$root/scripts/idl.py" "$@"

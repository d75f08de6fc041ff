#!/usr/bin/env bash
# Install everything and run the whole test suite: the SBF build of the programs, the Rust tests
# (fmt, clippy, cargo test natively and against the SBF build, IDL freshness), then Python lint,
# types and tests (the Solana ones run the SBF build in a real SVM). This is the command the
# README gives and .ci/run calls; arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/system-deps.sh
export PATH="$root/.venv/bin:$PATH"
paths=(client tests)
[ -d bench ] && paths+=(bench)
bash scripts/build-sbf.sh
bash scripts/rust-test.sh
echo "== ruff"
ruff check "${paths[@]}"
ruff format --check "${paths[@]}"
# mypy's cache lives beside the other caches, outside the clone: a fresh clone is checked in
# seconds, not 1.5 minutes (mypy compares each file's hash, so a changed file is checked again).
echo "== mypy"; MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}/mypy}" mypy
echo "== pytest"; pytest "$@"

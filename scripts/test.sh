#!/usr/bin/env bash
# Install everything and run the whole test suite: lint, types, Python tests (and the Rust programs
# once they exist). This is the command the README gives and .ci/run calls.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
export PATH="$root/.venv/bin:$PATH"
paths=(client tests)
[ -d bench ] && paths+=(bench)
echo "== ruff"
ruff check "${paths[@]}"
ruff format --check "${paths[@]}"
echo "== mypy"; mypy
echo "== pytest"; pytest "$@"

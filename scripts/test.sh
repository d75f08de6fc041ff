#!/usr/bin/env bash
# Install everything and run the whole test suite: the Rust programs (fmt, clippy, cargo test, IDL
# freshness), then Python lint, types and tests. This is the command the README gives and .ci/run
# calls; arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
export PATH="$root/.venv/bin:$PATH"
paths=(client tests)
[ -d bench ] && paths+=(bench)
bash scripts/rust-test.sh
echo "== ruff"
ruff check "${paths[@]}"
ruff format --check "${paths[@]}"
echo "== mypy"; mypy
echo "== pytest"; pytest "$@"

#!/usr/bin/env bash
# Install, then run the default job: a simulated 3-client training run on a tiny local model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
exec "$root/.venv/bin/psyche" demo "$@"

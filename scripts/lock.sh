#!/usr/bin/env bash
# Re-pin every dependency (runtime + dev) into requirements.lock for Python 3.11 on Linux.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export UV_CACHE_DIR="${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}/uv"
uv pip compile pyproject.toml --extra dev --python-version 3.11 --python-platform x86_64-manylinux_2_28 -o requirements.lock "$@"

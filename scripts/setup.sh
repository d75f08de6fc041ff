#!/usr/bin/env bash
# Install everything psyche needs into ./.venv on a fresh machine that reaches only the package
# registries. Downloads are cached outside the clone (~/.cache/psyche) so repeated runs are fast.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}"
mkdir -p "$cache"
export UV_CACHE_DIR="$cache/uv" PIP_CACHE_DIR="$cache/pip"
# Trust the system certificate store (machines behind a TLS-inspecting proxy add its CA there).
export UV_NATIVE_TLS="${UV_NATIVE_TLS:-1}"
# uv resolves and installs the CUDA torch wheel set an order of magnitude faster than pip;
# it is itself a PyPI package, bootstrapped into a venv of its own when missing.
UV_VERSION=0.13.9
uv="$(command -v uv || true)"
if [ -z "$uv" ]; then
  if [ ! -x "$cache/bootstrap/bin/uv" ]; then
    python3 -m venv "$cache/bootstrap"
    "$cache/bootstrap/bin/pip" install --quiet "uv==$UV_VERSION"
  fi
  uv="$cache/bootstrap/bin/uv"
fi
py="${PSYCHE_PYTHON:-python3}"
"$py" -c 'import sys; assert sys.version_info >= (3, 11), "psyche needs Python >= 3.11"'
venv="$root/.venv"
stamp="$venv/.psyche-stamp"
# The marker after the two files: a change to how the environment is built (bytecode-1: compiled
# at install) rebuilds environments made the old way.
want="$( (cat "$root/requirements.lock" "$root/pyproject.toml"; echo bytecode-1) | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$venv/bin/python" ] || "$uv" venv --quiet --python "$py" "$venv"
# Compiled to bytecode here, once (about 40 s on 2 cores): where PYTHONDONTWRITEBYTECODE is
# set (container images and CI machines often set it) Python never caches what it compiles, and
# every process then compiled torch and transformers again at its start (a client's imports took
# 17.4 s instead of 7.4 s on the 2-core development machine). The package's own source too: it is
# installed editable, so uv leaves it alone.
"$uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" \
  -r "$root/requirements.lock" -e "$root"
"$venv/bin/python" -m compileall -q "$root/client" > /dev/null
echo "$want" > "$stamp"
echo "psyche: environment ready in $venv" >&2

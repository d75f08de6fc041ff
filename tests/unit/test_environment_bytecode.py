"""`scripts/setup.sh` leaves the environment compiled to bytecode (2026-12-06).

Where PYTHONDONTWRITEBYTECODE is set (this machine and CI set it) Python never caches what it
compiles, so without bytecode from the install every process compiled torch and transformers
again at its start: a client's imports took 17.4 s instead of 7.4 s, and the suite ~15 minutes
more. This fails on an environment the old setup built (no `.pyc` at all under torch).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

MODULES = ("torch", "transformers", "psyche.training.loading", "psyche.cli.client_process")
"""What a client's start imports most of (`python -X importtime`), the package's own included."""


@pytest.mark.parametrize("name", MODULES)
def test_what_a_client_imports_is_compiled(name: str) -> None:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    cached = Path(importlib.util.cache_from_source(spec.origin))
    assert cached.is_file(), (
        f"{name} has no bytecode ({cached}): rebuild the environment with bash scripts/setup.sh"
    )

"""How the Solana testnet starts its processes as a deployment would: each in the environment a
container inherits plus its own values, from this environment's console scripts, and each
client on a P2P port free on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["INHERITED_ENV", "console_script", "container_env", "free_port"]

# What a container would inherit from its image: the launcher passes these on, and nothing else
# of its own environment, so each client is configured by its env file alone.
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "XDG_CACHE_HOME",
    "CUDA_VISIBLE_DEVICES",
)


def container_env(values: Mapping[str, str]) -> dict[str, str]:
    """``values`` over the few variables a container inherits (:data:`INHERITED_ENV`)."""
    base = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    return {**base, **values}


def console_script(name: str) -> str:
    """This environment's console script ``name`` (beside the running Python), else PATH's."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (pip install -e . in this environment)")
    return found


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (kept for the client's whole life, restarts included)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

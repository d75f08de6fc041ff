"""Token-file writers shared by the data tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_npy(path: Path, tokens: np.ndarray) -> Path:
    np.save(path, tokens, allow_pickle=False)
    return path


def write_raw(path: Path, tokens: np.ndarray) -> Path:
    path.write_bytes(tokens.tobytes())
    return path

"""A fresh copy of the repository, as CI's clone is: the files git tracks (and new files it does
not ignore), without ``.venv``, ``target/`` or ``runs/``."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .shell import Shell

ROOT = Path(__file__).resolve().parents[2]


def copy_repository(dest: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if not src.is_file():
            continue  # deleted in the working tree, not yet in a commit
        target = dest / name.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest


@pytest.fixture(scope="session")
def fresh_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh copy for every scene, in the order the documentation reads (scenes share what
    a reader's earlier commands made, e.g. ``runs/tiny`` from the quick start)."""
    return copy_repository(tmp_path_factory.mktemp("clone") / "psyche")


@pytest.fixture
def shell_for(fresh_copy: Path, tmp_path: Path) -> Iterator[object]:
    shells: list[Shell] = []

    def make(scene: str) -> Shell:
        shell = Shell(fresh_copy, scene, tmp_path / "logs")
        shells.append(shell)
        return shell

    yield make
    for shell in shells:
        shell.close()

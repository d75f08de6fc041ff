"""Which programs to load: by default the repository's Anchor programs from ``target/deploy``,
with the ids of ``Anchor.toml`` (``[programs.localnet]``) or, without it, of ``idl/*.json``."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path

from solders.pubkey import Pubkey

__all__ = [
    "BUILD_HINT",
    "MissingProgramError",
    "default_program_ids",
    "deploy_programs",
    "load_programs",
    "repo_root",
]

BUILD_HINT = "run scripts/build-sbf.sh to build the programs"


class MissingProgramError(FileNotFoundError):
    """A program's ``.so`` is not there."""


def repo_root() -> Path:
    """The checkout this package lives in (client/psyche/localsvm/ → three levels up)."""
    return Path(__file__).resolve().parents[3]


def default_program_ids(root: Path | None = None) -> dict[str, Pubkey]:
    """Program name → id, from ``Anchor.toml`` or else the IDLs."""
    root = root or repo_root()
    anchor = root / "Anchor.toml"
    if anchor.is_file():
        with anchor.open("rb") as f:
            localnet = tomllib.load(f).get("programs", {}).get("localnet", {})
        if localnet:
            return {name: Pubkey.from_string(pid) for name, pid in localnet.items()}
    out = {}
    for idl in sorted((root / "idl").glob("*.json")):
        doc = json.loads(idl.read_text())
        out[doc["metadata"]["name"]] = Pubkey.from_string(doc["address"])
    return out


def deploy_programs(
    deploy_dir: Path | None = None, ids: Mapping[str, Pubkey] | None = None
) -> dict[Pubkey, Path]:
    """Program id → ``<deploy_dir>/<name>.so`` for the default programs."""
    deploy_dir = deploy_dir or repo_root() / "target" / "deploy"
    ids = ids if ids is not None else default_program_ids()
    return {pid: deploy_dir / f"{name}.so" for name, pid in ids.items()}


def load_programs(
    programs: Mapping[Pubkey, Path | str | bytes] | Mapping[str, Path | str | bytes],
) -> dict[Pubkey, bytes]:
    """Program id → ELF bytes; a missing file raises :class:`MissingProgramError`."""
    out: dict[Pubkey, bytes] = {}
    missing = []
    for pid, source in programs.items():
        key = pid if isinstance(pid, Pubkey) else Pubkey.from_string(str(pid))
        if isinstance(source, bytes):
            out[key] = source
            continue
        path = Path(source)
        if not path.is_file():
            missing.append(str(path))
            continue
        out[key] = path.read_bytes()
    if missing:
        raise MissingProgramError(f"no such program file: {', '.join(missing)} ({BUILD_HINT})")
    return out

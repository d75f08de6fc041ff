"""Give the Rust sources of a fresh clone the modification times they had when cargo last saw the
same bytes, so the shared target directory (~/.cache/psyche/cargo-target) is reused.

Why: cargo decides that a path dependency is stale by comparing its files' mtimes with the
build's, and a fresh clone's files are all newer than any build: every clone recompiled the
workspace, and anchor-lang with it (it depends on the patched solana-invoke), about 2 minutes
of clippy and `cargo test` on 2 cores (stable cargo has no checksum-based freshness). Here a
file whose content (sha256) is the one recorded gets the recorded mtime back, older than the
build that used it; a file whose content differs keeps its fresh mtime (so cargo rebuilds it)
and becomes the record. The worst a wrong record can cost is a rebuild, never a stale build:
an mtime is only ever set back to the time its very bytes were first seen.

Usage: python3 scripts/cargo_mtimes.py RECORD.json
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUTS = [
    "Cargo.toml",
    "Cargo.lock",
    "programs",
    "shims",
    "idl",
    "tests/vectors",
    "client/psyche/solana/compute_units.json",
]
"""What cargo fmt, clippy, the tests (include_str!, fixtures read at run time) and the IDL
check read from the clone."""


def files() -> list[Path]:
    found: list[Path] = []
    for name in INPUTS:
        path = ROOT / name
        if path.is_file():
            found.append(path)
        for top, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if d != "target"]
            found.extend(Path(top) / n for n in names)
    return sorted(found)


def main(record_path: Path) -> None:
    try:
        record: dict[str, list] = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {}
    restored = 0
    for path in files():
        key = str(path.relative_to(ROOT))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        seen = record.get(key)
        if seen is not None and seen[0] == digest:
            os.utime(path, ns=(seen[1], seen[1]))
            restored += 1
        else:
            record[key] = [digest, path.stat().st_mtime_ns]
    record_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = record_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, sort_keys=True))
    tmp.replace(record_path)
    print(f"[cargo-mtimes] {restored} of {len(record)} recorded sources unchanged since last seen")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

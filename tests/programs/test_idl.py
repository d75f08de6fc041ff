"""The committed IDL (idl/*.json) is well formed.

Python learns every byte layout of the Solana programs from these files. Freshness (the files
equal what the programs generate now) is checked by `scripts/idl.sh --check`, which
`scripts/rust-test.sh` runs as part of the test command.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ("psyche_coordinator", "psyche_authorizer")


def test_idl_files_are_well_formed() -> None:
    for program in PROGRAMS:
        idl = json.loads((ROOT / "idl" / f"{program}.json").read_text())
        assert idl["metadata"]["name"] == program
        assert len(idl["address"]) >= 32
        assert idl["instructions"], program
        codes = [e["code"] for e in idl["errors"]]
        assert codes == list(range(6000, 6000 + len(codes))), program

"""Every environment twin a CLI flag declares is listed in .env.example."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_envvar_is_documented() -> None:
    declared = set()
    for path in (ROOT / "client" / "psyche" / "cli").glob("*.py"):
        declared |= set(re.findall(r'envvar="([A-Z0-9_]+)"', path.read_text()))
    # A variable may be listed commented out (PSYCHE_DEVICE: it must not override the image's).
    text = (ROOT / ".env.example").read_text()
    listed = set(re.findall(r"^#?\s*([A-Z0-9_]+)=", text, re.M))
    assert declared, "no envvars found; did the CLI move?"
    assert declared <= listed, f"missing from .env.example: {sorted(declared - listed)}"

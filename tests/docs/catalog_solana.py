"""The Solana run creator's and the rewards' documented commands (README "Solana", "Rewards",
docs/rewards.md), each scene on its own local SVM: ``test_solana_documented.py``."""

from __future__ import annotations

SOLANA_SCENES: dict[str, list[str]] = {}

"""Local testnet launcher (psyche-centralized-local-testnet):
a server plus N clients on this machine."""

from __future__ import annotations

import click


@click.group()
def testnet() -> None:
    """Local testnet launcher (psyche-centralized-local-testnet):
    a server plus N clients on this machine.

    No commands yet: they arrive with the end-to-end and Solana milestones (see README).
    """

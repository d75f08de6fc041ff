"""Solana client (psyche-solana-client): run administration and the training daemon on Solana."""

from __future__ import annotations

import click


@click.group()
def solana() -> None:
    """Solana client (psyche-solana-client):
    run administration and the training daemon on Solana.

    No commands yet: they arrive with the end-to-end and Solana milestones (see README).
    """

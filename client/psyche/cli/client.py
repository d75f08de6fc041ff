"""Centralized client (psyche-centralized-client): the training daemon against a TCP coordinator."""

from __future__ import annotations

import click


@click.group()
def client() -> None:
    """Centralized client (psyche-centralized-client):
    the training daemon against a TCP coordinator.

    No commands yet: they arrive with the end-to-end and Solana milestones (see README).
    """

"""Centralized client (psyche-centralized-client): the training daemon against a TCP coordinator."""

from __future__ import annotations

import click


@click.group()
def client() -> None:
    """Centralized client (psyche-centralized-client): the training daemon against a TCP coordinator."""

"""Centralized server (psyche-centralized-server): hosts the coordinator over TCP."""

from __future__ import annotations

import click


@click.group()
def server() -> None:
    """Centralized coordinator server (psyche-centralized-server)."""

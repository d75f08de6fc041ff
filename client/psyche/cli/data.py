"""Data utilities: tokenize local text into token files, serve data."""

from __future__ import annotations

import click


@click.group(name="data")
def data_group() -> None:
    """Data utilities: tokenize local text into token files, serve data."""

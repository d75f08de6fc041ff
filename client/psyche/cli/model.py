"""Model utilities: create tiny local models, inspect checkpoints."""

from __future__ import annotations

import click


@click.group(name="model")
def model_group() -> None:
    """Model utilities: create tiny local models, inspect checkpoints."""

"""The ``psyche`` command: one click group; the reference's program names alias its subgroups."""

from __future__ import annotations

import click

from psyche import __version__
from psyche.cli.client import client
from psyche.cli.data import data_group
from psyche.cli.demo import demo
from psyche.cli.evals import evals_group
from psyche.cli.exit_codes import CliGroup
from psyche.cli.explorer import explorer  # light: heavy imports are inside the command
from psyche.cli.help_markdown import add_print_all_help
from psyche.cli.model import model_group
from psyche.cli.process_exit import ProcessMain
from psyche.cli.server import server
from psyche.cli.solana import solana
from psyche.cli.testnet import testnet


@click.group(cls=CliGroup)
@click.version_option(__version__, prog_name="psyche")
def cli() -> None:
    """psyche: train one language model together on untrusted computers."""


cli.add_command(server, "centralized-server")
cli.add_command(client, "centralized-client")
cli.add_command(testnet, "centralized-local-testnet")
cli.add_command(solana, "solana-client")
cli.add_command(model_group, "model")
cli.add_command(data_group, "data")
cli.add_command(demo, "demo")
cli.add_command(evals_group, "evals")
cli.add_command(explorer, "explorer")

add_print_all_help(cli, "psyche")

main = ProcessMain(cli)
"""The ``psyche`` process (the console script, ``python -m psyche.cli.main``)."""

if __name__ == "__main__":
    main()

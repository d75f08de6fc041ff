"""Solana client (psyche-solana-client): run administration and the training daemon on Solana.

Every flag has an environment twin (listed in .env.example). Endpoints: ``--rpc``/``--ws-rpc``
and a fallback pair ``--rpc-2``/``--ws-rpc-2``, each a URL or a cluster moniker (``devnet``,
``mainnet-beta``, ``testnet``, ``localnet``). The wallet is a solana-keygen JSON file
(``--wallet-private-key-path``) or ``RAW_WALLET_PRIVATE_KEY``. Instruction layouts come from the
committed IDLs in ``idl/`` (``--idl-dir``).

Environment values may carry one pair of surrounding quotes: ``docker run --env-file`` passes a
line ``RPC="http://…"`` on with its quotes, and a joiner's .env is written for both docker and
shells, so every value this client reads from the environment is unquoted once, on entry
(:func:`~psyche.cli.solana_options.unquote_environ`), by the group before any command parses.

The commands live beside this group: :mod:`psyche.cli.solana_admin` (the run creator's),
:mod:`psyche.cli.solana_join` (join authorizations, ``can-join`` and ``train``),
:mod:`psyche.cli.solana_treasurer` (``treasurer-*``, ``create-test-mint``),
:mod:`psyche.cli.solana_mining_pool` (the Mining Pool's ``mining-pool-*`` and
``json-dump-user``), and their shared options in :mod:`psyche.cli.solana_options`.
"""

from __future__ import annotations

import os

import click

from psyche.cli import solana_admin, solana_join, solana_mining_pool, solana_treasurer
from psyche.cli.exit_codes import CliGroup
from psyche.cli.help_markdown import add_print_all_help
from psyche.cli.process_exit import ProcessMain
from psyche.cli.solana_options import DIRECT_ENV, envvars, unquote_environ


@click.group(cls=CliGroup)
@click.pass_context
def solana(ctx: click.Context) -> None:
    """Solana client (psyche-solana-client):
    run administration and the training daemon on Solana."""
    # A group's callback runs before its subcommand parses, so the subcommand's options read
    # the unquoted values.
    cmd = solana.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None
    names = set(DIRECT_ENV) | (envvars(cmd) if cmd is not None else set())
    unquote_environ(names, os.environ)


for command in (
    *solana_admin.COMMANDS,
    *solana_join.COMMANDS,
    *solana_treasurer.COMMANDS,
    *solana_mining_pool.COMMANDS,
):
    solana.add_command(command)


add_print_all_help(solana, "psyche-solana-client")

main = ProcessMain(solana)
"""The ``psyche-solana-client`` process."""

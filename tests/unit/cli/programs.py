"""The six command lines a user runs: (click group, program name), for the tests that go over
every one of them."""

from __future__ import annotations

import click

from psyche.cli.client import client
from psyche.cli.main import cli
from psyche.cli.server import server
from psyche.cli.solana import solana
from psyche.cli.solana_testnet import solana_testnet
from psyche.cli.testnet import testnet as centralized_testnet

PROGRAMS: list[tuple[click.Group, str]] = [
    (client, "psyche-centralized-client"),
    (server, "psyche-centralized-server"),
    (centralized_testnet, "psyche-centralized-local-testnet"),
    (solana, "psyche-solana-client"),
    (solana_testnet, "psyche-solana-local-testnet"),
    (cli, "psyche"),
]

"""One exit code per kind of mistake, in every command (issue 42, item 3).

A file the user names on the command line (a key, a config, a state or data file, a model folder)
that is missing, unreadable or malformed is exit 2 and one line, ``error: FLAG PATH: REASON``, in
every command that takes one (README, "Troubleshooting"; :mod:`psyche.cli.input_files`). Before,
the same missing key was exit 1 for ``show-identity`` and 2 for ``train``, and a missing config
exit 1 for ``validate-config``, ``update-config`` and the testnets but 2 for the server's ``run``.

Every case runs the command in this process (click's runner) and is caught before anything
starts: no server, chain, network or model. Being root here, a file without read permission is
still readable; "unreadable" is a directory where the file belongs (for a folder option: the
folder's own file, ``state.toml``, is a directory).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from solders.keypair import Keypair

from psyche.cli.client import client
from psyche.cli.main import cli
from psyche.cli.server import server
from psyche.cli.solana import solana
from psyche.cli.solana_testnet import solana_testnet
from psyche.cli.testnet import testnet as centralized_testnet

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "config" / "tiny"
PUBKEY = str(Keypair().pubkey())
NO_SERVER = "127.0.0.1:9"  # the discard port: nothing listens
CLEAN_ENV: dict[str, str | None] = {
    name: None
    for name in (
        "RAW_IDENTITY_SECRET_KEY",
        "IDENTITY_SECRET_KEY_PATH",
        "RAW_WALLET_PRIVATE_KEY",
        "WALLET_PRIVATE_KEY_PATH",
        "CONFIG_PATH",
        "PSYCHE_STATE",
        "PSYCHE_DATA_CONFIG",
        "RUN_ID",
        "PSYCHE_LOG",
    )
} | {"RPC": f"http://{NO_SERVER}"}
WALLET_ENV = {"RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair())))}

MISTAKES = ("missing", "unreadable", "malformed")

# What a malformed file of each kind holds.
MALFORMED: dict[str, bytes] = {
    "toml": b"run_id = [[[\n",
    "p2p-key": b"hello",  # neither 32 raw bytes nor 64 hex digits
    "wallet": b"not a keypair\n",
    "text": b"\xff\xfe not UTF-8\n",
}


def named_file(kind: str, mistake: str, tmp: Path) -> Path:
    """The path to name on the command line for ``mistake`` in a file of ``kind``."""
    if kind == "config-folder":  # a testnet's --config-path: a folder with state.toml
        folder = tmp / "config"
        if mistake == "missing":
            return folder
        folder.mkdir()
        if mistake == "unreadable":
            (folder / "state.toml").mkdir()
        else:
            (folder / "state.toml").write_bytes(MALFORMED["toml"])
        return folder
    if kind == "model-folder":  # evals run --model: a Hugging Face folder with config.json
        folder = tmp / "model"
        if mistake == "missing":
            return folder
        folder.mkdir()
        if mistake == "unreadable":
            (folder / "config.json").mkdir()
        else:
            (folder / "config.json").write_text("{")
        return folder
    path = tmp / ("named.txt" if kind == "text" else "named.file")
    if mistake == "unreadable":
        path.mkdir()
    elif mistake == "malformed":
        path.write_bytes(MALFORMED[kind])
    return path


@dataclass(frozen=True)
class Case:
    program: str
    group: click.Group
    argv: Callable[[str, Path], list[str]]
    """The command line, given the named file and a scratch folder."""
    flag: str
    """How the error line names the option."""
    kind: str
    env: dict[str, str] = field(default_factory=dict)
    mistakes: tuple[str, ...] = MISTAKES
    well_formed: dict[str, str] = field(default_factory=dict)
    """Other files the command reads, written into the scratch folder as they should be."""


def _solana_args(cmd: click.Command) -> list[str]:
    """Values for a Solana command's required options, so that only the wallet is wrong."""
    values = {
        "run_id": "run",
        "repo": "owner/name",
        "amount": "1",
        "max_deposit": "1",
        "pool_index": "0",
        "decimals": "0",
        "join_authority": PUBKEY,
        "collateral_mint": PUBKEY,
        "redeemable_mint": PUBKEY,
    }
    args: list[str] = []
    for p in cmd.params:
        if p.required and isinstance(p, click.Option):
            assert p.name in values, f"{cmd.name}: give the test a value for {p.name}"
            args += [p.opts[-1], values[p.name]]
    return args


def _wallet_cases() -> list[Case]:
    """Every Solana command that signs or reads with a wallet, given a bad -w file."""
    cases = []
    for name, cmd in sorted(solana.commands.items()):
        if any(p.name == "wallet_private_key_path" for p in cmd.params):
            cases.append(
                Case(
                    "psyche-solana-client",
                    solana,
                    lambda f, t, name=name, cmd=cmd: [name, *_solana_args(cmd), "-w", f],
                    "-w/--wallet-private-key-path",
                    "wallet",
                )
            )
    return cases


TRAIN = ["--run-id", "run", "--server-addr", NO_SERVER]


TASK = json.dumps({"context": "a b", "choices": [" c", " d"], "gold": 0}) + "\n"
"""A well-formed eval task, so that only the model folder is wrong."""


CASES: list[Case] = [
    Case(
        "psyche-centralized-client",
        client,
        lambda f, t: ["show-identity", "-i", f],
        "-i/--identity-secret-key-path",
        "p2p-key",
    ),
    Case(
        "psyche-centralized-client",
        client,
        lambda f, t: ["train", *TRAIN, "-i", f],
        "-i/--identity-secret-key-path",
        "p2p-key",
    ),
    Case(
        "psyche-solana-client",
        solana,
        lambda f, t: ["show-static-p2p-identity", f],
        "PATH",
        "p2p-key",
    ),
    *_wallet_cases(),
    Case(
        "psyche-solana-client",
        solana,
        lambda f, t: [
            "join-authorization-delegate",
            "--join-authority",
            PUBKEY,
            "--delegate-keypair",
            f,
        ],
        "--delegate-keypair",
        "wallet",
        env=WALLET_ENV,
    ),
    Case(
        "psyche-solana-client",
        solana,
        lambda f, t: ["update-config", "--run-id", "run", "--config-path", f],
        "--config-path",
        "toml",
        env=WALLET_ENV,
    ),
    Case(
        "psyche-centralized-server",
        server,
        lambda f, t: ["validate-config", "--state", f],
        "--state",
        "toml",
    ),
    Case(
        "psyche-centralized-server",
        server,
        lambda f, t: ["validate-config", "--state", str(TINY / "state.toml"), "--data-config", f],
        "--data-config",
        "toml",
    ),
    Case(
        "psyche-centralized-server",
        server,
        lambda f, t: ["run", "--state", f, "--tui", "false", "--host", "127.0.0.1"],
        "--state",
        "toml",
    ),
    Case(
        "psyche-centralized-server",
        server,
        lambda f, t: [
            "run",
            "--state",
            str(TINY / "state.toml"),
            "--data-config",
            f,
            "--tui",
            "false",
            "--host",
            "127.0.0.1",
        ],
        "--data-config",
        "toml",
    ),
    Case(
        "psyche-centralized-local-testnet",
        centralized_testnet,
        lambda f, t: ["start", "--config-path", f, "--out", str(t / "out"), "--tui", "false"],
        "--config-path",
        "config-folder",
    ),
    Case(
        "psyche-solana-local-testnet",
        solana_testnet,
        lambda f, t: ["start", "--config-path", f, "--out", str(t / "out"), "--tui", "false"],
        "--config-path",
        "config-folder",
    ),
    Case(
        "psyche",
        cli,
        lambda f, t: ["data", "serve", "--data-config", f, "--host", "127.0.0.1", "--port", "0"],
        "--data-config",
        "toml",
    ),
    Case(
        "psyche",
        cli,
        lambda f, t: ["data", "prepare", "--text", f, "--out", str(t / "tokens")],
        "--text",
        "text",
        # A folder is a valid --text (its *.txt are read): no "unreadable" by a directory.
        mistakes=("missing", "malformed"),
    ),
    Case(
        "psyche",
        cli,
        lambda f, t: ["demo", "--config", f, "--out", str(t / "demo")],
        "--config",
        "toml",
    ),
    Case(
        "psyche",
        cli,
        lambda f, t: ["evals", "run", "--model", f, "--tasks", str(t / "task.jsonl")],
        "--model",
        "model-folder",
        well_formed={"task.jsonl": TASK},
    ),
]


def _id(case: Case) -> str:
    words = case.argv("FILE", Path("."))
    return (
        f"{case.program} {words[0] if words[0] not in ('data', 'evals') else ' '.join(words[:2])}"
    )


PARAMS = [
    pytest.param(case, mistake, id=f"{_id(case)} {case.flag} {mistake}")
    for case in CASES
    for mistake in case.mistakes
]


@pytest.mark.parametrize(("case", "mistake"), PARAMS)
def test_a_mistake_in_a_named_file_is_one_line_and_exit_2(
    case: Case, mistake: str, tmp_path: Path
) -> None:
    path = named_file(case.kind, mistake, tmp_path)
    for name, text in case.well_formed.items():
        (tmp_path / name).write_text(text)
    res = CliRunner().invoke(
        case.group, case.argv(str(path), tmp_path), env={**CLEAN_ENV, **case.env}
    )
    out = res.output
    assert "Traceback" not in out, out
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [line for line in out.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error:")]
    assert res.exit_code == 2, f"exit {res.exit_code}: {out}"
    assert len(errors) == 1 and errors[0].startswith("error: "), out
    assert not any(line.startswith("Usage:") for line in lines), out
    assert case.flag in errors[0] and str(path) in errors[0], errors[0]


def test_a_well_formed_config_that_breaks_the_rules_is_still_exit_1(tmp_path: Path) -> None:
    """The one kind of file mistake that is a failure (README): ``invalid config: …``."""
    state = tmp_path / "state.toml"
    state.write_text(
        (TINY / "state.toml").read_text().replace("min_clients = 2", "min_clients = 0")
    )
    res = CliRunner().invoke(server, ["validate-config", "--state", str(state)], env=CLEAN_ENV)
    assert res.exit_code == 1, res.output
    assert res.output.startswith("invalid config: "), res.output


def test_show_identity_without_a_key_is_exit_2() -> None:
    res = CliRunner().invoke(client, ["show-identity"], env=CLEAN_ENV)
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: no identity to show") and res.output.count("\n") == 1


# --- every file the commands read is covered ----------------------------------------------------

KEY_OPTIONS = {"identity_secret_key_path", "wallet_private_key_path", "delegate_keypair"}
"""Key files, read where the key is chosen (an environment variable may win over the flag)."""
NOT_READ = {(id(solana.commands["train"]), "identity_secret_key_path")}
"""Accepted and ignored with a warning: a Solana client's P2P key is its wallet's."""


def _programs() -> dict[str, click.Command]:
    """Every console script of pyproject.toml, by name."""
    import importlib

    from psyche.cli.process_exit import ProcessMain

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    found = {}
    for name, ref in scripts.items():
        module, attr = ref.split(":")
        entry = getattr(importlib.import_module(module), attr)
        found[name] = entry.command if isinstance(entry, ProcessMain) else entry
    return found


def _walk(cmd: click.Command, path: str) -> list[tuple[str, click.Command]]:
    if isinstance(cmd, click.Group):
        return [w for name, sub in cmd.commands.items() for w in _walk(sub, f"{path} {name}")]
    return [(path, cmd)]


def test_every_file_a_command_reads_has_a_case() -> None:
    from psyche.cli.input_files import InputFile

    covered = set()
    for case in CASES:
        cmd = case.group
        for word in case.argv("FILE", Path(".")):
            if not isinstance(cmd, click.Group) or word not in cmd.commands:
                break
            cmd = cmd.commands[word]
        flag = case.flag
        covered |= {
            (id(cmd), p.name)
            for p in cmd.params
            if flag in ("/".join(p.opts), p.human_readable_name)
        }
    missing = []
    for program, group in _programs().items():
        for path, cmd in _walk(group, program):
            for p in cmd.params:
                reads = isinstance(p.type, InputFile) or p.name in KEY_OPTIONS
                reads |= path.endswith("show-static-p2p-identity") and p.name == "path"
                if reads and not {(id(cmd), p.name)} & (NOT_READ | covered):
                    missing.append(f"{path} {'/'.join(p.opts)}")
    assert not missing, f"files the commands read without a case here: {missing}"


def test_no_command_checks_a_file_the_old_way() -> None:
    """``click.Path(exists=True)`` answers with a usage error (several lines, no reason such as
    permission denied): a file the command reads is declared with ``InputFile`` instead."""
    old = [
        f"{path} {'/'.join(p.opts)}"
        for program, group in _programs().items()
        if program != "psyche-local-svm"  # the local SVM's own command line (psyche.localsvm)
        for path, cmd in _walk(group, program)
        for p in cmd.params
        if isinstance(p.type, click.Path) and p.type.exists
    ]
    assert not old, old

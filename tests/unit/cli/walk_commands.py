"""Walk every command and option of every entry point with bad values; print what went wrong.

Run by ``test_no_traceback_anywhere.py`` as one subprocess (its state — logging handlers, the
environment the Solana group unquotes — stays out of the test session). Each case invokes the
real click command in this process (``CliRunner``), so a heavy library is imported once, not once
per case. A case fails when the command ends in an exception other than ``SystemExit`` (what a
user sees as a traceback) or prints one; one that runs past ``CASE_TIMEOUT_S`` is reported as a
hang. Output: one JSON object per finding on stdout, then a ``{"cases": N}`` line.

Each command gets valid values for its required parameters and, for the commands that would
otherwise start something long-running (a training client, a server, a testnet, a simulated
run), a "stopper" that ends it right after its checks (``--device cuda:999``, a state file that
does not exist). The parameter under test comes first on the command line, so click processes
it, with its callback, before anything else.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
CASE_TIMEOUT_S = 20

ENTRY_POINTS = {
    "psyche": "psyche.cli.main:cli",
    "psyche-centralized-server": "psyche.cli.server:server",
    "psyche-centralized-client": "psyche.cli.client:client",
    "psyche-centralized-local-testnet": "psyche.cli.testnet:testnet",
    "psyche-solana-client": "psyche.cli.solana:solana",
    "psyche-local-svm": "psyche.localsvm.cli:main",
    "psyche-solana-local-testnet": "psyche.cli.solana_testnet:solana_testnet",
}

MISSING = object()
"""The option given last, without its value."""

BAD: list[Any] = [
    MISSING,
    "",
    " ",
    "x" * 5000,
    "-1",
    "abc",
    "nan",
    "1e999",
    "/nonexistent/dir/file",
    "\u2603",
]

PUBKEY = "11111111111111111111111111111112"
NO_RPC = "http://127.0.0.1:9"  # the discard port: connection refused at once

# Valid values for required parameters, by parameter name.
VALID = {
    "run_id": "walk",
    "server_addr": "127.0.0.1:9",
    "state_path": "/nonexistent/state.toml",
    "join_authority": PUBKEY,
    "collateral_mint": PUBKEY,
    "redeemable_mint": PUBKEY,
    "repo": "org/repo",
    "texts": "/nonexistent/text",
    "model_dir": "/nonexistent/model",
    "tasks": "/nonexistent/task.jsonl",
    "source": "/nonexistent/model",
    "data_config": "/nonexistent/data.toml",
    "preset": "tiny",
}

# Commands that would start something long-running: what ends them right after their checks.
STOPPERS = {
    "train": ["--device", "cuda:999"],
    "demo": ["--device", "cuda:999"],
    "start": ["--config-path", "/nonexistent/config"],
    "run": ["--deploy-dir", "/nonexistent/deploy"],  # psyche-local-svm run
    "serve": ["--port", "-5"],  # psyche data serve / explorer serve: refused at parse time
}


PREWARM = (
    "torch",
    "psyche.cli.client_process",
    "psyche.cli.solana_client_process",
    "psyche.training.device",
)


# Values read from the environment outside any option: each given every bad value.
ENV_CASES = [
    ("psyche-centralized-client", ["show-identity"], ["RAW_IDENTITY_SECRET_KEY"]),
    (
        "psyche-centralized-client",
        ["train", "--run-id", "walk", "--server-addr", "127.0.0.1:9", "--device", "cuda:999"],
        ["RAW_IDENTITY_SECRET_KEY"],
    ),
    (
        "psyche-centralized-client",
        ["train", "--run-id", "walk", "--server-addr", "127.0.0.1:9", "--device", "cuda:999"],
        ["PSYCHE_LOG"],
    ),
    ("psyche-solana-client", ["json-dump-run", "--run-id", "walk"], ["RAW_WALLET_PRIVATE_KEY"]),
    ("psyche-solana-client", ["create-run", "--run-id", "walk"], ["RAW_WALLET_PRIVATE_KEY"]),
    ("psyche-solana-client", ["json-dump-run", "--run-id", "walk"], ["RPC"]),
]


SKIP = [["explorer"]]
"""``psyche explorer`` (issue 29) was being built while this walk was written: its ``cost``
command runs until stopped, and needs a stopper here once its options settle."""


class CaseTimeout(BaseException):
    """Raised by the alarm: not an Exception, so no handler in the code under test eats it."""


def commands(group: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    if isinstance(group, click.Group):
        for name, cmd in sorted(group.commands.items()):
            yield from commands(cmd, [*path, name])
    else:
        yield path, group


def valid_value(param: click.Parameter, work: Path) -> str:
    name = param.name or ""
    if name in VALID:
        return VALID[name]
    if isinstance(param.type, click.Choice):
        return str(param.type.choices[0])
    if isinstance(param.type, click.types._NumberParamTypeBase):
        return "1"
    if isinstance(param.type, click.Path):
        return str(work / f"{name}-out")
    return "x"


def option_args(param: click.Parameter, value: Any) -> list[str]:
    if isinstance(param, click.Argument):
        return [] if value is MISSING else [value]
    flag = max(param.opts, key=len)
    return [flag] if value is MISSING else [flag, value]


def base_args(cmd: click.Command, skip: click.Parameter | None, work: Path) -> list[str]:
    args: list[str] = []
    for p in cmd.params:
        if p is skip or not p.required:
            continue
        args += option_args(p, valid_value(p, work))
    return args


# The endpoint, wallet and IDL options every Solana command shares: each builds the command's
# session the same way before the command runs, so one command walks them.
SESSION_OPTIONS = {
    "rpc",
    "ws_rpc",
    "rpc_2",
    "ws_rpc_2",
    "rpc_3",
    "ws_rpc_3",
    "wallet_private_key_path",
    "idl_dir",
    "coordinator_program_id",
    "authorizer_program_id",
    "treasurer_program_id",
    "mining_pool_program_id",
}


def shape(param: click.Parameter, path: list[str]) -> tuple[Any, ...]:
    """What identifies a case: the option, and the command unless the option does the same
    wherever it appears (the session options; the daemon flags both ``train`` commands share,
    checked the same way before either client starts)."""
    callback = getattr(param.callback, "__qualname__", None)
    key = (tuple(param.opts), repr(param.type), callback, repr(param.envvar))
    if param.name in SESSION_OPTIONS or path[-1:] == ["train"]:
        return key
    return (*key, tuple(path))


def run_case(
    runner: CliRunner,
    cmd: click.Command,
    prog: str,
    args: list[str],
    env: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTimeout

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        result = runner.invoke(cmd, args, prog_name=prog, catch_exceptions=True, env=env)
    except CaseTimeout:
        return {"problem": "hang"}
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # pyo3's PanicException is no Exception: CliRunner lets it out
        return {"problem": "traceback", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    finally:
        signal.alarm(0)
    if isinstance(result.exception, CaseTimeout):
        return {"problem": "hang"}
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        e = result.exception
        return {"problem": "traceback", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    if "Traceback (most recent call last)" in output:
        return {"problem": "traceback in output", "error": output[-600:]}
    return {}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="psyche-walk-"))
    os.chdir(work)
    from solders.keypair import Keypair

    env = {
        "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(Keypair()))),
        "RPC": NO_RPC,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "COLUMNS": "200",
    }
    os.environ.update(env)
    # What the commands import after parsing, imported once here, outside any case's alarm.
    for module in PREWARM:
        importlib.import_module(module)
    runner = CliRunner()
    seen_commands: set[int] = set()
    seen_shapes: set[tuple[Any, ...]] = set()
    cases = 0
    only = set(sys.argv[1:])
    for prog, spec in ENTRY_POINTS.items():
        if only and prog not in only:
            continue
        module, attr = spec.split(":")
        top = getattr(importlib.import_module(module), attr)
        for path, cmd in commands(top, []):
            if id(cmd) in seen_commands or (path and path[-1] == "print-all-help"):
                continue
            if path[:1] in SKIP:
                continue
            seen_commands.add(id(cmd))
            stopper = STOPPERS.get(path[-1] if path else "", [])
            for param in cmd.params:
                if param.name == "help" or shape(param, path) in seen_shapes:
                    continue
                seen_shapes.add(shape(param, path))
                flag_only = getattr(param, "is_flag", False)
                for value in [MISSING] if flag_only else BAD:
                    mutated = option_args(param, value)
                    stop = [] if set(stopper) & set(getattr(param, "opts", [])) else stopper
                    args = [*path, *mutated, *stop, *base_args(cmd, param, work)]
                    if value is MISSING and not flag_only:
                        args = [*path, *stop, *base_args(cmd, param, work), *mutated]
                    cases += 1
                    found = run_case(runner, top, prog, args)
                    if found:
                        shown = [a if len(a) < 60 else a[:20] + f"…({len(a)})" for a in args]
                        print(json.dumps({"command": [prog, *shown], **found}), flush=True)
    for prog, args, overrides in ENV_CASES:
        if only and prog not in only:
            continue
        module, attr = ENTRY_POINTS[prog].split(":")
        top = getattr(importlib.import_module(module), attr)
        for value in BAD[1:]:
            cases += 1
            found = run_case(runner, top, prog, args, {k: value for k in overrides})
            if found:
                print(json.dumps({"command": [prog, *args], "env": overrides, **found}), flush=True)
    print(json.dumps({"cases": cases}), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

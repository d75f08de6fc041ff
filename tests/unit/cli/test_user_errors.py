"""A user's mistake is one line and exit 2, never a traceback (issue 28, items 1 and 3): each case
runs the installed command as a subprocess, as a user would, and checks the line and the code.

None of them needs a server or a chain: every check happens before the client connects anywhere
(the RPC and server addresses below refuse connections).
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from solders.keypair import Keypair

from psyche.cli.solana import solana
from psyche.cli.solana_options import RUN_ID_MAX_BYTES

BIN = Path(sys.executable).parent
NO_SERVER = "127.0.0.1:9"  # the discard port: nothing listens
NO_RPC = f"http://{NO_SERVER}"
TRAIN = ["train", "--run-id", "tiny", "--server-addr", NO_SERVER]
DROP = {
    "RAW_IDENTITY_SECRET_KEY",
    "IDENTITY_SECRET_KEY_PATH",
    "RAW_WALLET_PRIVATE_KEY",
    "WALLET_PRIVATE_KEY_PATH",
    "RUN_ID",
    "RPC",
    "PSYCHE_DEVICE",
    "SERVER_ADDR",
    "BIND_P2P_HOST",
    "BIND_P2P_INTERFACE",
    "LOGS",
    "PSYCHE_LOG",
}


def run(program: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in DROP}
    res = subprocess.run(
        [str(BIN / program), *args],
        env={**clean, "COLUMNS": "200", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    return res


def error_lines(res: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith(("error:", "Error:"))]


def only_error(res: subprocess.CompletedProcess[str]) -> str:
    lines = error_lines(res)
    assert len(lines) == 1, res.stderr
    return lines[0]


# --- the centralized client's key and server address ---------------------------------------------


def test_a_missing_key_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.key"
    res = run("psyche-centralized-client", [*TRAIN, "-i", str(missing)], tmp_path)
    assert res.returncode == 2
    assert only_error(res) == (
        f"error: -i/--identity-secret-key-path {missing}: No such file or directory (create a "
        "key with `openssl rand 32 > secret.key`)"
    )


def test_a_key_file_that_is_not_a_key(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    res = run("psyche-centralized-client", [*TRAIN, "-i", str(bad)], tmp_path)
    assert res.returncode == 2
    assert "must hold 32 raw bytes or 64 hex digits (found 5 bytes)" in only_error(res)


def test_a_raw_identity_key_that_is_not_a_key(tmp_path: Path) -> None:
    res = run("psyche-centralized-client", TRAIN, tmp_path, RAW_IDENTITY_SECRET_KEY="zz")
    assert res.returncode == 2
    assert only_error(res) == (
        "error: RAW_IDENTITY_SECRET_KEY: secret key hex must be 64 hex digits"
    )


def test_a_server_address_without_a_port(tmp_path: Path) -> None:
    args = ["train", "--run-id", "tiny", "--server-addr", "notahost"]
    res = run("psyche-centralized-client", args, tmp_path)
    assert res.returncode == 2
    assert only_error(res) == (
        "Error: Invalid value for '--server-addr': address 'notahost' must look like host:port "
        "(e.g. 127.0.0.1:20000)"
    )


# --- P2P binding and logs defaults (item 3) ------------------------------------------------------


def test_an_unknown_interface_name_is_an_error(tmp_path: Path) -> None:
    res = run("psyche-centralized-client", [*TRAIN, "--bind-p2p-interface", "nosuch0"], tmp_path)
    assert res.returncode == 2
    line = only_error(res)
    assert "'nosuch0' is neither an IP address nor a network interface here" in line
    assert "lo" in line  # the interfaces there are


@pytest.mark.parametrize("program", ["psyche-centralized-client", "psyche-solana-client"])
def test_both_clients_bind_p2p_to_all_interfaces_by_default(program: str, tmp_path: Path) -> None:
    res = run(program, ["train", "--help"], tmp_path)
    assert res.returncode == 0
    help_text = " ".join(res.stdout.split())
    start = help_text.index("--bind-p2p-host")
    assert "[default: 0.0.0.0]" in help_text[start : help_text.index("--data-parallelism")]


def _default_logs(*, terminal: bool) -> str:
    code = "from psyche.cli.daemon_options import default_logs; print(default_logs())"
    argv = [sys.executable, "-c", code]
    if not terminal:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(argv, stdout=follower, stderr=subprocess.DEVNULL, check=True)
        assert proc.returncode == 0
        return os.read(leader, 100).decode().strip()
    finally:
        os.close(leader)
        os.close(follower)


def test_logs_default_to_tui_on_a_terminal_and_console_otherwise() -> None:
    assert _default_logs(terminal=True) == "tui"
    assert _default_logs(terminal=False) == "console"


# --- Solana run ids -------------------------------------------------------------------------------


def _run_id_commands() -> list[str]:
    return sorted(
        name for name, cmd in solana.commands.items() if any(p.name == "run_id" for p in cmd.params)
    )


def test_every_run_id_command_is_covered() -> None:
    assert {
        "create-run",
        "update-config",
        "set-paused",
        "json-dump-run",
        "check-authorization",
        "can-join",
        "train",
        "tick",
    } <= set(_run_id_commands())


@pytest.mark.parametrize("command", _run_id_commands())
def test_a_run_id_over_the_seed_limit_is_refused_where_parsed(command: str, tmp_path: Path) -> None:
    long_id = "r" * (RUN_ID_MAX_BYTES + 1)
    wallet = json.dumps(list(bytes(Keypair())))
    res = run(
        "psyche-solana-client",
        [command, "--run-id", long_id],
        tmp_path,
        RPC=NO_RPC,
        RAW_WALLET_PRIVATE_KEY=wallet,
    )
    assert res.returncode == 2
    assert only_error(res) == (
        "Error: Invalid value for '--run-id': 33 bytes; a Solana run id is at most 32 bytes of "
        "UTF-8 (the run's address is derived from it as one seed)"
    )


def test_the_solana_testnet_checks_the_run_id_too(tmp_path: Path) -> None:
    res = run("psyche-solana-local-testnet", ["start", "--run-id", "é" * 17], tmp_path)
    assert res.returncode == 2
    assert "34 bytes; a Solana run id is at most 32 bytes" in only_error(res)


# --- a device that is not there ------------------------------------------------------------------


@pytest.mark.slow
def test_cuda_without_cuda_is_a_configuration_error(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here")
    wallet = json.dumps(list(bytes(Keypair())))
    res = run(
        "psyche-solana-client",
        ["train", "--run-id", "tiny"],
        tmp_path,
        RPC=NO_RPC,
        RAW_WALLET_PRIVATE_KEY=wallet,
        PSYCHE_DEVICE="cuda",
    )
    assert res.returncode == 2  # docker/entrypoint.sh does not restart it
    assert only_error(res) == (
        "error: --device/PSYCHE_DEVICE: device 'cuda' requested but CUDA is not available; use "
        "'cpu' or 'auto'"
    )


def test_a_misspelt_device_is_refused_at_parse_time(tmp_path: Path) -> None:
    res = run("psyche-centralized-client", [*TRAIN, "--device", "gpu"], tmp_path)
    assert res.returncode == 2
    assert "'gpu': expected auto, cpu, cuda, cuda:N or mps" in only_error(res)


# --- paths ---------------------------------------------------------------------------------------


def test_a_path_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    """Found by the command walk (test_no_traceback_anywhere): any command writing to a path the
    system refuses (here a name too long) says so in one line."""
    res = run("psyche-solana-client", ["create-static-p2p-identity", "k" * 300], tmp_path)
    assert res.returncode == 2
    assert only_error(res) == f"error: {'k' * 300}: File name too long"

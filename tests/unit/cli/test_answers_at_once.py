"""``--help`` and usage errors of every entry point cost well under a second of CPU (issue 28,
item 6): commands parse their arguments before importing torch, libp2p or solana, and import
them only in the commands that use them.

Measured as the CPU time (user + system) of the subprocess and its children, from
``resource.getrusage(RUSAGE_CHILDREN)``, not wall time: a loaded CI machine stretches wall time,
not CPU time. Importing torch alone costs several seconds of CPU, so the 1 s bound fails at once
if any of these paths imports it again.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
LIMIT_S = 1.0

ENTRY_POINTS = [
    "psyche",
    "psyche-centralized-server",
    "psyche-centralized-client",
    "psyche-centralized-local-testnet",
    "psyche-solana-client",
    "psyche-local-svm",
    "psyche-solana-local-testnet",
]

# Usage errors, each refused before anything heavy is imported.
USAGE_ERRORS = [
    ["psyche", "model", "init", "--preset", "nope", "--out", "m"],
    ["psyche", "data", "prepare", "--text", "t", "--out", "o", "--seq-len", "0"],
    ["psyche", "demo", "--clients", "0"],
    ["psyche-centralized-client", "train", "--run-id", "r", "--server-addr", "notahost"],
    ["psyche-centralized-client", "train", "--run-id", "r", "--server-addr", "h:1", "-i", "/no"],
    ["psyche-centralized-client", "train", "--run-id", "r", "--server-addr", "h:1",
     "--device", "gpu"],
    [
        "psyche-centralized-client", "train", "--run-id", "r", "--server-addr", "h:1",
        "--hub-repo", "org/repo",
    ],
    ["psyche-solana-client", "train", "--run-id", "r" * 40],
    ["psyche-solana-client", "create-run", "--run-id", "r" * 40],
    ["psyche-solana-client", "json-dump-run"],
    ["psyche-centralized-server", "run"],
    ["psyche-centralized-local-testnet", "start", "--allowed-to-kill", "x"],
    ["psyche-local-svm", "run", "--rpc-port", "-1"],
    ["psyche-solana-local-testnet", "start", "--num-clients", "x"],
]  # fmt: skip


def cpu_seconds(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAW_", "RUN_ID", "RPC"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=120,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used, res


@pytest.mark.parametrize("program", ENTRY_POINTS)
def test_help_costs_under_a_second(program: str, tmp_path: Path) -> None:
    used, res = cpu_seconds([program, "--help"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert used < LIMIT_S, f"{program} --help: {used:.2f} s of CPU"


def _leaf_helps() -> list[list[str]]:
    from psyche.cli.main import cli

    out = []
    for name, group in cli.commands.items():
        sub = getattr(group, "commands", None)
        if sub is None:
            out.append(["psyche", name, "--help"])
        else:
            out += [["psyche", name, leaf, "--help"] for leaf in sub]
    return out


def test_every_commands_help_costs_under_a_second(tmp_path: Path) -> None:
    slow = []
    for argv in _leaf_helps():
        used, res = cpu_seconds(argv, tmp_path)
        assert res.returncode == 0, (argv, res.stderr)
        if used >= LIMIT_S:
            slow.append(f"{' '.join(argv)}: {used:.2f} s")
    assert not slow, slow


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=lambda a: " ".join(a)[:60])
def test_usage_errors_cost_under_a_second(argv: list[str], tmp_path: Path) -> None:
    used, res = cpu_seconds(argv, tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert used < LIMIT_S, f"{' '.join(argv)}: {used:.2f} s of CPU"

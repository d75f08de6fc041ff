"""The Solana testnet's small parts: env files as docker reads them, and program logs as an
explorer reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from psyche.testnet.envfile import EnvFileError, read_env_file, write_env_file
from psyche.testnet.program_calls import SIGNATURE, instructions_in_logs

COORD = "9jg3qZJhRk3LRFtgFPCKAm9ZnGcYqG2cLPny5681vyff"


def test_env_file_is_written_quoted_and_read_literally_as_docker_does(tmp_path: Path) -> None:
    path = tmp_path / "client.env"
    write_env_file(path, {"RPC": "http://127.0.0.1:1", "RAW_WALLET_PRIVATE_KEY": "[1,2]"}, "hi")
    assert path.read_text() == '# hi\nRPC="http://127.0.0.1:1"\nRAW_WALLET_PRIVATE_KEY="[1,2]"\n'
    assert path.stat().st_mode & 0o777 == 0o600
    # Quotes kept, no expansion, comments and blanks skipped, a bare name taken from ours.
    path.write_text("# c\n\nRPC=\"x\"\nA=$HOME b\n  B='y' \nBARE\nGONE\nE=\n")
    assert read_env_file(path, {"BARE": "from-launcher"}) == {
        "RPC": '"x"',
        "A": "$HOME b",
        "B": "'y' ",
        "BARE": "from-launcher",
        "E": "",
    }


def test_env_file_refuses_what_it_cannot_write_or_read(tmp_path: Path) -> None:
    with pytest.raises(EnvFileError):
        write_env_file(tmp_path / "a.env", {"K": 'a"b'})
    (tmp_path / "b.env").write_text("NOT A NAME=1\n")
    with pytest.raises(EnvFileError, match=r"b\.env:1"):
        read_env_file(tmp_path / "b.env", {})


def test_instructions_are_attributed_to_the_program_that_logged_them() -> None:
    logs = [
        f"Program {COORD} invoke [1]",
        "Program log: Instruction: InitCoordinator",
        "Program 11111111111111111111111111111111 invoke [2]",
        "Program 11111111111111111111111111111111 success",
        f"Program {COORD} consumed 12323 of 200000 compute units",
        f"Program {COORD} success",
        "Program ComputeBudget111111111111111111111111111111 invoke [1]",
        "Program ComputeBudget111111111111111111111111111111 success",
        f"Program {COORD} invoke [1]",
        "Program log: Instruction: Tick",
        f"Program {COORD} failed: custom program error: 0x1770",
    ]
    assert instructions_in_logs(logs) == [(COORD, "InitCoordinator", 12323), (COORD, "Tick", None)]


def test_signatures_are_found_in_command_output_and_public_keys_are_not() -> None:
    sig = "4hrVcptoLxHMcDn3ZbU173a3cqpNS391Tjrynbpw5DfA7eDg41yRRm1DpvQBNTA2Pi5jJVsLcGZ6LLUA9h2R9aPG"
    text = f'{{"coordinator_account": "{COORD}", "signature": "{sig}"}}'
    assert SIGNATURE.findall(text) == [sig]

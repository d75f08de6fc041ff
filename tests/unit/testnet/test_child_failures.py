"""A child the local testnet needs that fails at start ends the testnet with the child's own
error line and exit code (issue 42, item 4: it used to be "testnet failed: the server exited",
exit 1, the reason only in logs/server.log)."""

from __future__ import annotations

import io
import signal
import sys
from pathlib import Path

import pytest
from rich.console import Console

from psyche.cli.testnet import run_and_report
from psyche.protocol.run_file import load_run_config
from psyche.testnet.base import Proc
from psyche.testnet.failures import ChildFailed, error_line, log_error_line
from psyche.testnet.launcher import Testnet, TestnetOptions

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "config" / "tiny"

SERVER_LINE = (
    "cannot start the server: model.LLM.data_location is Server: pass --data-config "
    "data.toml to serve the data"
)
# What the server writes to its log: Rich wraps its console at 80 columns on a file.
WRAPPED = (
    "2026-12-02 05:22:14,971 WARNING psyche.backends.centralized.app: config.witness_nodes = 1\n"
    "cannot start the server: model.LLM.data_location is Server: pass --data-config \n"
    "data.toml to serve the data\n"
)


def test_the_error_line_is_found_and_its_wrapped_continuation_joined() -> None:
    assert error_line(WRAPPED) == SERVER_LINE
    # A word longer than the width is folded inside it: joined without a space.
    path = "/tmp/" + "x" * 70 + "/data.toml"
    folded = f"error: {path}: No such file"
    lines = [folded[:80], folded[80:]]
    assert error_line("\n".join(lines) + "\n") == folded


def test_the_last_error_line_wins_over_log_records_and_tracebacks() -> None:
    assert error_line("Error: OSError: [Errno 98] Address already in use\n") == (
        "Error: OSError: [Errno 98] Address already in use"
    )
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: bad value\n"
    )
    assert error_line(traceback) == "ValueError: bad value"
    logged = (
        "05:25:01 ERROR psyche.client: wallet W may not join run 'r'\n"
        "05:25:02 INFO psyche.client: closing\n"
    )
    assert error_line(logged) == "05:25:01 ERROR psyche.client: wallet W may not join run 'r'"
    # Colours are not part of the line; nothing that looks like an error: the last line.
    assert error_line("\x1b[1;31mcannot listen\x1b[0m (port 1): taken\n") == (
        "cannot listen (port 1): taken"
    )
    assert error_line("starting\nKilled\n\n") == "Killed"
    assert error_line("\n \n") is None


def test_only_this_run_of_the_log_is_read(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("error: the first run's reason\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("starting again\n")
    assert log_error_line(log, offset) == "starting again"
    assert log_error_line(tmp_path / "missing.log") is None


@pytest.mark.parametrize(("code", "expected"), [(7, 7), (0, 1), (None, 1), (-9, 1)])
def test_the_launcher_exits_with_the_childs_code_or_1(code: int | None, expected: int) -> None:
    assert ChildFailed("x", code=code).exit_code == expected


class FailingServer(Testnet):
    """A testnet whose server prints the real server's wrapped error and exits 7."""

    __test__ = False

    def _spawn(self, label: str, args: list[str]) -> Proc:
        script = f"import sys; sys.stderr.write({WRAPPED!r}); sys.exit(7)"
        return self.spawn(label, [sys.executable, "-c", script])


def test_a_server_that_fails_at_start_ends_the_testnet_with_its_line_and_code(
    tmp_path: Path,
) -> None:
    options = TestnetOptions(config_path=TINY, out_dir=tmp_path, server_port=1)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "server.log").write_text("error: an earlier run's reason\n")
    net = FailingServer(options, load_run_config(TINY / "state.toml"), tmp_path)
    out = io.StringIO()
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit_:
            run_and_report(net, Console(file=out, width=200, soft_wrap=True), tui=False)
    finally:
        signal.signal(signal.SIGTERM, before)
    lines = out.getvalue().splitlines()
    assert exit_.value.code == 7, lines
    failed = next(i for i, line in enumerate(lines) if line.startswith("testnet failed: "))
    assert lines[failed] == (
        f"testnet failed: the server exited (exit 7); see {tmp_path / 'logs' / 'server.log'}"
    )
    assert lines[failed + 1] == SERVER_LINE


def test_a_failed_setup_step_of_the_solana_testnet_says_why_in_its_own_words(
    tmp_path: Path,
) -> None:
    from psyche.testnet.solana import SolanaTestnet, SolanaTestnetOptions

    config = ROOT / "config" / "tiny-solana"
    options = SolanaTestnetOptions(config_path=config, out_dir=tmp_path)
    (tmp_path / "logs").mkdir()
    net = SolanaTestnet(
        options, load_run_config(config / "state.toml"), tmp_path, log_line=lambda _: None
    )
    script = "import sys; print('{}'); sys.stderr.write('error: run x already exists\\n'); exit(2)"
    with pytest.raises(ChildFailed) as failed:
        net.setup("create-run", [sys.executable, "-c", script])
    assert failed.value.exit_code == 2
    assert failed.value.detail == "error: run x already exists"
    assert str(failed.value).startswith("create-run failed (exit 2); see ")

"""``--write-log``: every record also lands in a file, in the log mode's format."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from psyche.cli.logs import setup_logging


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    converter = logging.Formatter.converter
    try:
        yield
    finally:
        for h in root.handlers:
            if h not in handlers:
                h.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.Formatter.converter = converter  # type: ignore[method-assign]


@pytest.mark.usefixtures("restore_root_logging")
def test_console_mode_writes_plain_lines_with_utc_times(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "client.log"  # the folder is made
    setup_logging("console", logging.INFO, write_log=path)
    # Not libp2p: once imported, py-libp2p sets its logger to propagate=False, so whether its
    # records reach the root depends on which tests ran before.
    logging.getLogger("psyche.test").info("round %d applied", 7)
    logging.getLogger("psyche.test").debug("below the level: not written")
    logging.getLogger("urllib3.connectionpool").info("chatty library at INFO: not written")
    logging.getLogger("urllib3.connectionpool").warning("library warning")
    for h in logging.getLogger().handlers:
        h.flush()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("INFO psyche.test: round 7 applied")
    assert lines[1].endswith("WARNING urllib3.connectionpool: library warning")
    stamp = lines[0].split(" INFO ")[0]
    written = time.strptime(stamp.split(",")[0], "%Y-%m-%d %H:%M:%S")
    assert abs(time.mktime(written) - time.mktime(time.gmtime())) < 120  # UTC, not local time


@pytest.mark.usefixtures("restore_root_logging")
def test_json_mode_writes_json_lines_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "client.log"
    path.write_text("an earlier run's line\n", encoding="utf-8")
    setup_logging("json", logging.DEBUG, write_log=path)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("psyche.test").exception("step failed")
    for h in logging.getLogger().handlers:
        h.flush()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "an earlier run's line"  # appended, not truncated
    record = json.loads(lines[1])
    assert record["level"] == "ERROR" and record["logger"] == "psyche.test"
    assert record["msg"] == "step failed" and "RuntimeError: boom" in record["exc"]

"""The host process's logging: expected dial failures are not reported as errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from psyche.p2p.host import DialFailuresAtDebug

TCP = "libp2p.transport.tcp.tcp"


@pytest.fixture
def tcp_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(TCP)
    saved = list(logger.filters)
    yield logger
    logger.filters[:] = saved


def test_failed_dials_are_dropped_below_debug_and_other_errors_kept(
    tcp_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    tcp_logger.addFilter(DialFailuresAtDebug(logging.INFO))
    with caplog.at_level(logging.DEBUG, logger=TCP):
        tcp_logger.error("Failed to open TCP stream: %s", "connection refused")
        tcp_logger.error("Unexpected error opening TCP stream: %s", "reset")
        tcp_logger.error("listener died")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("ERROR", "listener died")]


def test_failed_dials_show_as_debug_when_the_host_logs_debug(
    tcp_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    tcp_logger.addFilter(DialFailuresAtDebug(logging.DEBUG))
    with caplog.at_level(logging.DEBUG, logger=TCP):
        tcp_logger.error("Failed to open TCP stream: %s", "no route to host")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "Failed to open TCP stream: no route to host")
    ]

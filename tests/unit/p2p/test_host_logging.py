"""The host process's logging: expected dial failures are not reported as errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from psyche.p2p.host.main import DialFailuresAtDebug

TCP = "libp2p.transport.tcp.tcp"


@pytest.fixture
def tcp_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(TCP)
    saved = list(logger.filters)
    yield logger
    logger.filters[:] = saved


@pytest.mark.parametrize(
    ("host_level", "shown"),
    [
        # Below DEBUG the failed dials are gone; any other error stays an error.
        (logging.INFO, [("ERROR", "listener died")]),
        # A host logging at DEBUG shows them, as DEBUG.
        (
            logging.DEBUG,
            [
                ("DEBUG", "Failed to open TCP stream: connection refused"),
                ("DEBUG", "Unexpected error opening TCP stream: reset"),
                ("ERROR", "listener died"),
            ],
        ),
    ],
)
def test_failed_dials_are_debug_lines_and_other_errors_stay_errors(
    tcp_logger: logging.Logger,
    caplog: pytest.LogCaptureFixture,
    host_level: int,
    shown: list[tuple[str, str]],
) -> None:
    tcp_logger.addFilter(DialFailuresAtDebug(host_level))
    with caplog.at_level(logging.DEBUG, logger=TCP):
        tcp_logger.error("Failed to open TCP stream: %s", "connection refused")
        tcp_logger.error("Unexpected error opening TCP stream: %s", "reset")
        tcp_logger.error("listener died")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == shown

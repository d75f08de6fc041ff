"""The host process's logging: py-libp2p failures its callers handle are not reported as errors;
its other warnings keep their level."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

# Messages as py-libp2p 0.8.1 writes them (its own format strings, filled in).
PEER = "12D3KooWCjMAbMuva7SWwWDSg4gbytr5B7HjRfLeZi1RSJACNrZP"
HANDLED_LINES = [
    ("libp2p.transport.tcp.tcp", "Failed to open TCP stream: connection refused"),
    ("libp2p.transport.tcp.tcp", "Unexpected error opening TCP stream: reset"),
    (
        "libp2p.host.basic_host",
        f"Failed to open stream to peer {PEER}:\n  Error: handshake write failed\n"
        "  Protocols: ['/psyche/blob/1']",
    ),
    (
        "libp2p.protocol_muxer.multiselect_client",
        "MultiselectClient handshake: read failed: fail to read from multiselect communicator",
    ),
    ("libp2p.pubsub.gossipsub", f"GRAFT: ignoring request from {PEER}, back off until 1796639271"),
    (
        "libp2p.stream_muxer.yamux.yamux",
        f"Error in handle_incoming for peer {PEER}: ConnectionClosedError: TCP connection reset"
        " by remote peer: socket connection broken: [Errno 32] Broken pipe",
    ),
]
# Lines of the same loggers that are not handled by a caller: they keep their level.
OTHER_LINES = [
    ("libp2p.transport.tcp.tcp", logging.ERROR, "listener died"),
    ("libp2p.pubsub.gossipsub", logging.WARNING, f"GRAFT flood detected from peer {PEER}"),
    (
        "libp2p.stream_muxer.yamux.yamux",
        logging.ERROR,
        f"Error in handle_incoming for peer {PEER}: ValueError: bad frame",
    ),
]


@pytest.fixture
def host_logging() -> Iterator[None]:
    """Runs :func:`install` on this process's loggers and puts them back afterwards."""
    from psyche.p2p.host.handled_failures import HANDLED

    names = ["libp2p", *HANDLED]
    saved = {n: (list(logging.getLogger(n).filters), logging.getLogger(n).level) for n in names}
    yield
    for n, (filters, level) in saved.items():
        logging.getLogger(n).filters[:] = filters
        logging.getLogger(n).setLevel(level)


def _emit_all() -> None:
    for name, message in HANDLED_LINES:
        logging.getLogger(name).error(message)
    for name, level, message in OTHER_LINES:
        logging.getLogger(name).log(level, message)


SHOWN_AT = {
    # At INFO the handled failures are gone and every other line keeps its level.
    logging.INFO: [(n, logging.getLevelName(lv), m) for n, lv, m in OTHER_LINES],
    # A host at DEBUG keeps them, as DEBUG records.
    logging.DEBUG: [(n, "DEBUG", m) for n, m in HANDLED_LINES]
    + [(n, logging.getLevelName(lv), m) for n, lv, m in OTHER_LINES],
}


@pytest.mark.parametrize("host_level", list(SHOWN_AT), ids=logging.getLevelName)
def test_handled_failures_are_demoted_and_other_lines_keep_their_level(
    host_logging: None, caplog: pytest.LogCaptureFixture, host_level: int
) -> None:
    from psyche.p2p.host import handled_failures

    handled_failures.install(host_level)
    with caplog.at_level(logging.DEBUG):
        _emit_all()
    shown = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert shown == SHOWN_AT[host_level]


def test_the_host_process_prints_only_what_is_not_handled() -> None:
    """In a fresh process, as the host sets itself up: py-libp2p imported (it turns its loggers'
    propagation off and sets some of them to INFO itself), then the host's logging at INFO."""
    script = f"""
import logging, libp2p
from psyche.p2p.host.main import _setup_logging
_setup_logging(logging.INFO)
logging.getLogger("libp2p.network.auto_connector").info("AUTO_CONNECTOR_STATE: num_connections=0")
for name, message in {HANDLED_LINES!r}:
    logging.getLogger(name).error(message)
logging.getLogger("libp2p.pubsub.gossipsub").warning("GRAFT flood detected from peer {PEER}")
"""
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [f"GRAFT flood detected from peer {PEER}"]

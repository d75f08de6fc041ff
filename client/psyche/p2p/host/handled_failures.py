"""The host's log: py-libp2p failures that its callers handle are DEBUG lines, not errors.

py-libp2p logs several failures at WARNING or ERROR and then raises to the caller as well: a
failed dial, a stream whose protocol negotiation failed or timed out, a connection reset under a
Yamux reader. Our callers count each of them (fetch failures by reason, ``told_failed``, ping
and hole-punch outcomes) and log what it means, and with peers behind NAT, peers leaving, or 32
hosts on two cores they are routine: a 10-round, 32-host ``bench/scale.py --p2p-hosts`` run
printed 285 seven-line "Failed to open stream" reports, 163 multiselect handshake errors and
1,271 GossipSub ``GRAFT: ignoring request ... back off`` warnings (the library already answers
those with its own penalty). These messages are demoted to DEBUG records (dropped unless the host
logs at DEBUG), and any other line of the same loggers keeps its level.

py-libp2p turns its loggers' propagation off at import, so its lines reach stderr through
:data:`logging.lastResort` (WARNING and above, bare messages); that is left as it is. Turned on,
it let through the INFO lines of loggers the library sets to INFO itself
(``libp2p.network.auto_connector``: two lines every 10 s per host, seen in CI's logs). So even
at DEBUG a demoted record reaches stderr only through a handler py-libp2p's own
``LIBP2P_DEBUG`` set-up attaches; lastResort passes WARNING and above.
"""

from __future__ import annotations

import logging
import re

HANDLED: dict[str, re.Pattern[str]] = {
    # Dials: the caller counts a failed dial (fetch, hole punch, redial loop).
    "libp2p.transport.tcp.tcp": re.compile(
        r"Failed to open TCP stream|Unexpected error opening TCP stream"
    ),
    # Stream opens: BasicHost.new_stream raises StreamFailure after this report.
    "libp2p.host.basic_host": re.compile(r"Failed to open stream to peer "),
    "libp2p.protocol_muxer.multiselect_client": re.compile(r"MultiselectClient handshake: "),
    # A GRAFT inside the back-off the library itself set: it penalises the sender and goes on.
    "libp2p.pubsub.gossipsub": re.compile(r"GRAFT: ignoring request from "),
    # A peer's connection reset under the Yamux reader: the connection closes, the redial loop
    # or the peer itself reconnects.
    "libp2p.stream_muxer.yamux.yamux": re.compile(
        r"Error in handle_incoming for peer \S+: ConnectionClosedError"
    ),
}
"""Per py-libp2p logger, the start of the messages its callers handle."""


class HandledFailuresAtDebug(logging.Filter):
    """Demotes one logger's handled failures (``pattern``) to DEBUG; drops them unless the host
    logs at DEBUG (``level``)."""

    def __init__(self, level: int, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.level = level
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and self.pattern.match(record.getMessage()):
            if self.level > logging.DEBUG:
                return False
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def install(level: int) -> None:
    """py-libp2p's log at ``level`` (never below WARNING: its INFO and DEBUG lines are
    per-frame) with the handled failures demoted."""
    logging.getLogger("libp2p").setLevel(max(level, logging.WARNING))
    for name, pattern in HANDLED.items():
        logging.getLogger(name).addFilter(HandledFailuresAtDebug(level, pattern))

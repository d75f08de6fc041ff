"""Logging set-up, done only here (the CLI), never at import time of a library module."""

from __future__ import annotations

import json
import logging
import sys
import time

from rich.logging import RichHandler


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "t": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(mode: str = "console", level: int = logging.INFO) -> None:
    """``console``: rich, readable lines; ``json``: one JSON object per line; ``tui`` falls back
    to console lines when stdout is not a terminal."""
    root = logging.getLogger()
    root.handlers.clear()
    if mode == "json":
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_JsonFormatter())
    else:
        handler = RichHandler(show_path=False, rich_tracebacks=True, log_time_format="%H:%M:%S")
    root.addHandler(handler)
    root.setLevel(level)
    # libp2p and transformers are chatty at INFO.
    for name in ("libp2p", "transformers", "urllib3", "httpx", "filelock"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.Formatter.converter = time.gmtime

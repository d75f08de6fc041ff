"""Logging set-up, done only here (the CLI), never at import time of a library module."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

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


def setup_logging(
    mode: str = "console", level: int = logging.INFO, *, write_log: str | Path | None = None
) -> None:
    """``console``: rich, readable lines; ``json``: one JSON object per line; ``tui`` falls back
    to console lines when stdout is not a terminal. ``write_log`` (``--write-log``) also appends
    every record to that file, as plain text lines with UTC times (JSON lines in ``json`` mode)."""
    root = logging.getLogger()
    root.handlers.clear()
    if write_log is not None:
        path = Path(write_log)
        path.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(path, encoding="utf-8")
        to_file.setFormatter(
            _JsonFormatter()
            if mode == "json"
            else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        root.addHandler(to_file)
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
    spec = os.environ.get("PSYCHE_LOG")
    if spec:
        apply_log_spec(spec)
    logging.Formatter.converter = time.gmtime


_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL + 1,
}


def apply_log_spec(spec: str) -> None:
    """``PSYCHE_LOG`` / the testnet's ``--log``: ``LEVEL[,logger=LEVEL…]`` (``warn,psyche=debug``:
    everything at warnings, psyche's own loggers at debug). Levels: trace (= debug), debug, info,
    warn, error, off. A bad spec raises ``ValueError`` naming the part."""
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        name, _, level = part.rpartition("=")
        value = _LEVELS.get(level.strip().lower())
        if value is None:
            raise ValueError(f"log spec {spec!r}: unknown level {level!r} in {part!r}")
        logging.getLogger(name.strip() or None).setLevel(value)

"""Why a testnet's child failed, in the child's own words: its last error line and exit code.

A child the testnet cannot run without (the centralized server, the local SVM, a step of the run
creator's flow) that ends at start ends the testnet: the launcher then prints the child's own
error line after its ``testnet failed: …`` line and exits with the child's exit code, instead of
leaving the reason in ``logs/<child>.log`` (issue 42, item 4).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["ChildFailed", "error_line", "log_error_line"]

EXIT_UNKNOWN = 1
"""The launcher's exit code when the child's tells nothing (psyche.cli.exit_codes.EXIT_ERROR)."""
TAIL_BYTES = 64 * 1024
"""How much of a log's end is searched for the error line."""
WRAP_WIDTH = 80
"""The width Rich wraps a console at when it writes to a file."""
MAX_CONTINUATION = 8
"""At most this many lines after an error line are read as its wrapped continuation."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ERROR_START = re.compile(
    # ``error: …`` (the CLIs' one-line failures), click's ``Error: …``, the server's
    # ``cannot start the server: …``, a traceback's last line, a Rust panic, a logged ERROR.
    r"^(?:(?i:error|cannot|fatal|invalid)\b"
    r"|[\w.]*(?:Error|Exception)\b"
    r"|thread '.*' panicked)"
    r"|\s(?:ERROR|CRITICAL)\s"
)
_NEW_RECORD = re.compile(r"^(?:\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|\[|\s*$)")
"""A line that starts a log record of its own (or a blank line): not a wrapped continuation."""


class ChildFailed(RuntimeError):
    """A child the testnet needs ended. ``str()`` says which and where its log is; ``detail`` is
    the child's own last error line (None when its log has none); ``code`` its exit status."""

    def __init__(self, message: str, *, code: int | None = None, detail: str | None = None):
        super().__init__(message)
        self.code = code
        self.detail = detail

    @property
    def exit_code(self) -> int:
        """The launcher's exit code: the child's, or 1 where that is unknown, 0, or a signal."""
        return self.code if self.code is not None and self.code > 0 else EXIT_UNKNOWN


def error_line(text: str) -> str | None:
    """The last error line of a child's output, with its wrapped continuation joined (a console
    that wraps at its width, as Rich's does on a file, splits one message over several lines);
    else the last non-blank line; None for empty output."""
    lines = [_ANSI.sub("", line).rstrip("\r") for line in text.splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return None
    starts = [i for i, line in enumerate(lines) if _ERROR_START.search(line)]
    if not starts:
        return lines[-1].strip()
    start = starts[-1]
    joined = prev = lines[start]
    for line in lines[start + 1 : start + 1 + MAX_CONTINUATION]:
        if _NEW_RECORD.match(line) or _ERROR_START.search(line):
            break
        # A word wrap leaves its space at the end of the line; a fold inside a long word
        # (a path) fills the line to the width: join both as they were, other lines with a space.
        sep = "" if prev.endswith((" ", "\t")) or len(prev) == WRAP_WIDTH else " "
        joined += sep + line
        prev = line
    return " ".join(joined.split())


def log_error_line(log: Path, offset: int = 0) -> str | None:
    """:func:`error_line` of ``log`` from byte ``offset`` (where the child's run of it began: a
    restarted child appends to the same file); None when the log cannot be read."""
    try:
        with log.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(offset, size - TAIL_BYTES))
            data = f.read()
    except OSError:
        return None
    return error_line(data.decode(errors="replace"))

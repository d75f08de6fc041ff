"""Decoding bytes from untrusted peers, in one place.

Every network decoder of the client (centralized protocol, data wire, P2P control frames and
gossip announcements, checkpoint JSON) goes through :func:`decode_untrusted`, so whatever hostile
input makes a decoder raise ends as the caller's typed protocol error. (Servers count and log
such input with :class:`psyche.net.faults.FaultLog`.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec

__all__ = ["decode_untrusted", "safe_reason"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")

# A schema error is not all that hostile bytes can raise. msgspec and json recurse once per
# nesting level, so a few kilobytes of nested arrays raise RecursionError before any schema check;
# msgspec raises UnicodeDecodeError (not a MsgspecError) for invalid UTF-8 in a msgpack string;
# json accepts lone surrogates ("\ud800") that blow up as UnicodeEncodeError wherever the text is
# encoded later; validators raise ValueError. UnicodeError and JSONDecodeError are ValueErrors.
_DECODE_ERRORS = (msgspec.MsgspecError, RecursionError, ValueError)


def decode_untrusted(
    decode: Callable[[_In], _Out], data: _In, error: Callable[[str], Exception], what: str
) -> _Out:
    """``decode(data)``, with anything hostile input can make it raise turned into ``error``.

    The message is ``"{what}: {reason}"``, made safe to log and to put on the wire (a reason may
    quote the peer's lone surrogates, which a UTF-8 log stream or encoder would choke on).
    """
    try:
        return decode(data)
    except _DECODE_ERRORS as e:
        raise error(f"{what}: {safe_reason(e)}") from None


def safe_reason(e: BaseException) -> str:
    """``str(e)`` that always encodes as UTF-8 (lone surrogates escaped)."""
    reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
    return reason.encode("utf-8", "backslashreplace").decode("utf-8")

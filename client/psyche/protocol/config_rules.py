"""The building blocks of run-config rules: one failed rule is one :class:`ConfigError` whose
message names the key, and numbers are checked as the program stores them.

Every config component's ``check`` is written with these, so Python and the Rust program (its
``core/model.rs`` and ``core/config.rs`` helpers) apply the same predicates.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable

from psyche.protocol.strict_obj import ConfigError

__all__ = [
    "above_0",
    "as_f32",
    "at_least_0",
    "beta",
    "http_url_ok",
    "number_rule",
    "rule",
    "server_address_ok",
    "unit",
]


def rule(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def as_f32(x: float) -> float:
    """``x`` rounded to the nearest f32, overflow giving ±inf: Rust's ``x as f32``, which is what
    the program stores for the optimizer's f32 fields."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def number_rule(
    path: str, value: float, what: str, ok: Callable[[float], bool], *, f32: bool = False
) -> None:
    """``value`` must be finite and satisfy ``ok``; for an f32 field its f32 rounding must too,
    so Python (which keeps the f64 of a centralized run) and the program (which stores the f32 of
    a Solana run) accept exactly the same values."""
    stored = as_f32(value) if f32 else value
    rule(
        math.isfinite(value) and math.isfinite(stored) and ok(value) and ok(stored),
        f"{path} ({value!r}) must be {what}",
    )


def at_least_0(x: float) -> bool:
    return x >= 0


def above_0(x: float) -> bool:
    return x > 0


def unit(x: float) -> bool:
    return 0 <= x <= 1


def beta(x: float) -> bool:
    return 0 <= x < 1


_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[A-Za-z0-9:.%_-]*:[A-Za-z0-9:.%_-]*\]")


def server_address_ok(address: str) -> bool:
    """``host:port`` (IPv6 in brackets), port 1-65535: what the client's data connection parses,
    restricted to characters a host name or address can have."""
    host, sep, port = address.rpartition(":")
    return (
        bool(sep)
        and _HOST.fullmatch(host) is not None
        and port.isascii()
        and port.isdigit()
        and len(port.lstrip("0")) <= 5  # (int() of thousands of digits raises)
        and 0 < int(port.lstrip("0") or "0") < 65536
    )


def http_url_ok(url: str) -> bool:
    """``http://`` or ``https://``, a non-empty host part, no spaces or control characters."""
    for scheme in ("http://", "https://"):
        if url.startswith(scheme):
            rest = url[len(scheme) :]
            host = re.split(r"[/?#]", rest, maxsplit=1)[0]
            return bool(host) and not any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in url)
    return False

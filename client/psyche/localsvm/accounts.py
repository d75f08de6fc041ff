"""Accounts as a validator's RPC returns them (``UiAccount``), in every binary encoding.

``base64+zstd`` is produced without a compressor: a zstd frame made of *raw* blocks is a valid
frame that any zstd decoder reads, only not smaller (no zstd module is pinned in this project).
``jsonParsed`` falls back to base64, as a validator does for an account it has no parser for.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import base58
from solders.account import Account

__all__ = [
    "ENCODINGS",
    "MAX_BASE58_BYTES",
    "U64_MAX",
    "Encoding",
    "EncodingError",
    "ui_account",
    "ui_data",
    "zstd_frame",
]

U64_MAX = 2**64 - 1
MAX_BASE58_BYTES = 128
Encoding = Literal["binary", "base58", "base64", "base64+zstd", "jsonParsed"]
ENCODINGS: tuple[Encoding, ...] = ("binary", "base58", "base64", "base64+zstd", "jsonParsed")

_ZSTD_MAGIC = (0xFD2FB528).to_bytes(4, "little")
# Frame header descriptor: 8-byte content size, single segment, no checksum, no dictionary.
_ZSTD_DESCRIPTOR = bytes([0b1110_0000])
_ZSTD_MAX_BLOCK = 128 * 1024


class EncodingError(ValueError):
    """The data cannot be returned in the asked encoding (a validator's -32600)."""


def zstd_frame(data: bytes) -> bytes:
    """``data`` as one zstd frame of raw (stored) blocks."""
    out = bytearray(_ZSTD_MAGIC + _ZSTD_DESCRIPTOR + len(data).to_bytes(8, "little"))
    chunks = [data[i : i + _ZSTD_MAX_BLOCK] for i in range(0, len(data), _ZSTD_MAX_BLOCK)] or [b""]
    for n, chunk in enumerate(chunks):
        last = 1 if n == len(chunks) - 1 else 0
        out += ((len(chunk) << 3) | last).to_bytes(3, "little")  # block type 0 = raw
        out += chunk
    return bytes(out)


def ui_data(
    data: bytes,
    encoding: Encoding,
    data_slice: tuple[int, int] | None = None,
    *,
    limit_base58: bool = True,
) -> str | list[str]:
    if data_slice is not None:
        offset, length = data_slice
        data = data[offset : offset + length]
    if encoding in ("binary", "base58"):
        if limit_base58 and len(data) > MAX_BASE58_BYTES:
            raise EncodingError(
                f"Encoded binary (base 58) data should be less than {MAX_BASE58_BYTES} bytes, "
                "please use Base64 encoding."
            )
        text = base58.b58encode(data).decode()
        # "binary" is the legacy default: a bare base58 string, not a [data, encoding] pair.
        return text if encoding == "binary" else [text, "base58"]
    if encoding == "base64+zstd":
        return [base64.b64encode(zstd_frame(data)).decode(), "base64+zstd"]
    return [base64.b64encode(data).decode(), "base64"]


def ui_account(
    account: Account,
    encoding: Encoding,
    data_slice: tuple[int, int] | None = None,
    *,
    limit_base58: bool = True,
) -> dict[str, Any]:
    data = bytes(account.data)
    # Every account a 2.x validator stores rent-exempt carries rent epoch u64::MAX; LiteSVM keeps
    # 0 there.
    rent_epoch = account.rent_epoch or U64_MAX
    return {
        "data": ui_data(data, encoding, data_slice, limit_base58=limit_base58),
        "executable": account.executable,
        "lamports": account.lamports,
        "owner": str(account.owner),
        "rentEpoch": rent_epoch,
        "space": len(data),
    }

"""JSON-RPC 2.0 framing shared by the HTTP and websocket fronts: strict decoding of untrusted
bodies, batches, notifications (requests without ``id``) and the error objects.

A malformed request always gets an error object (-32700 parse error, also for invalid UTF-8
and nesting too deep to decode, -32600 invalid request, -32601 unknown method, -32602 invalid
params), never an exception out of :func:`dispatch`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "Handler",
    "RpcFault",
    "convert",
    "dispatch",
    "encode",
    "invalid_params",
    "positional",
]

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MAX_BATCH = 1000

Handler = Callable[[list[Any]], Any]
T = TypeVar("T")
_MISSING = object()

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class RpcFault(Exception):
    """A JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: Any = _MISSING) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not _MISSING:
            out["data"] = self.data
        return out


def invalid_params(message: str) -> RpcFault:
    return RpcFault(INVALID_PARAMS, message)


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def positional(params: list[Any], required: int, total: int) -> list[Any]:
    """``params`` padded with None to ``total``; too few or too many is -32602."""
    if not required <= len(params) <= total:
        expected = f"{required}" if required == total else f"{required} to {total}"
        raise invalid_params(
            f"Invalid params: invalid length {len(params)}, expected {expected} elements"
        )
    return [*params, *([None] * (total - len(params)))]


def convert(value: Any, typ: type[T]) -> T:
    """``value`` as ``typ`` (msgspec, strict: no str→int, no float→int); errors are -32602."""
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError as e:
        raise invalid_params(f"Invalid params: {e}") from None


def _error(id_: Any, fault: RpcFault) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": fault.to_obj(), "id": id_}


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, str | int) and not isinstance(value, bool))


def _call(obj: Any, methods: Mapping[str, Handler]) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        return _error(None, RpcFault(INVALID_REQUEST, "Invalid request"))
    id_ = obj.get("id", _MISSING)
    notification = id_ is _MISSING
    reply_id = None if notification or not _valid_id(id_) else id_
    method, params = obj.get("method"), obj.get("params", [])
    if (
        obj.get("jsonrpc") != "2.0"
        or not isinstance(method, str)
        or not (notification or _valid_id(id_))
    ):
        return _error(reply_id, RpcFault(INVALID_REQUEST, "Invalid request"))
    handler = methods.get(method)
    if handler is None:
        fault = RpcFault(METHOD_NOT_FOUND, "Method not found")
        return None if notification else _error(reply_id, fault)
    if params is None:
        params = []
    if not isinstance(params, list):
        # Every Solana method takes positional parameters.
        fault = invalid_params("Invalid params: expected a sequence of parameters")
        return None if notification else _error(reply_id, fault)
    try:
        result = handler(params)
    except RpcFault as e:
        return None if notification else _error(reply_id, e)
    except Exception:
        log.exception("%s failed", method)
        fault = RpcFault(INTERNAL_ERROR, "Internal error")
        return None if notification else _error(reply_id, fault)
    return None if notification else {"jsonrpc": "2.0", "result": result, "id": reply_id}


def _encoded(reply: dict[str, Any]) -> bytes:
    try:
        return encode(reply)
    except (TypeError, ValueError, OverflowError):
        # A result the encoder refuses is that request's error only.
        log.exception("result not encodable")
        return encode(_error(reply.get("id"), RpcFault(INTERNAL_ERROR, "Internal error")))


def dispatch(body: bytes | str, methods: Mapping[str, Handler]) -> bytes | None:
    """The response to one request or batch; None when there is nothing to answer."""
    try:
        obj = _decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        # msgspec raises UnicodeDecodeError for invalid UTF-8 inside a string and
        # RecursionError for deep nesting (a validator's serde_json stops at 128 levels): both
        # are a body that is not JSON, not a fault of ours.
        return encode(_error(None, RpcFault(PARSE_ERROR, "Parse error")))
    if isinstance(obj, list):
        if not obj or len(obj) > MAX_BATCH:
            return encode(_error(None, RpcFault(INVALID_REQUEST, "Invalid request")))
        replies = [_encoded(r) for r in (_call(o, methods) for o in obj) if r is not None]
        return b"[" + b",".join(replies) + b"]" if replies else None
    reply = _call(obj, methods)
    return _encoded(reply) if reply is not None else None

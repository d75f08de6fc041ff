"""Comparing two chains' answers to the same RPC call, field by field: the shape (keys, JSON
types) everywhere, values where the case says they are deterministic, error codes and messages
for refusals. Pure functions; ``tests/unit/test_rpc_diff.py`` checks them without a chain."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "object"


def shape_diff(local: Any, real: Any, path: str = "$") -> list[str]:
    """Where ``local``'s shape differs from ``real``'s: missing or extra keys, other JSON types.
    Lists are compared by their first elements (an empty list matches any list)."""
    lt, rt = json_type(local), json_type(real)
    if lt != rt:
        return [f"{path}: {lt} here, {rt} on the validator"]
    if lt == "object":
        out = [f"{path}.{k}: missing here" for k in sorted(set(real) - set(local))]
        out += [f"{path}.{k}: not on the validator" for k in sorted(set(local) - set(real))]
        for k in sorted(set(local) & set(real)):
            out += shape_diff(local[k], real[k], f"{path}.{k}")
        return out
    if lt == "list" and local and real:
        return shape_diff(local[0], real[0], f"{path}[0]")
    return []


def pick(value: Any, field: str) -> Any:
    """``value`` at a dotted path (``a.b.0.c``); ``None`` where it is missing."""
    for part in field.split(".") if field else []:
        if isinstance(value, list):
            idx = int(part)
            value = value[idx] if idx < len(value) else None
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def value_diff(local: Any, real: Any, fields: Sequence[str]) -> list[str]:
    """The ``fields`` (dotted paths; ``""`` is the whole answer) whose values differ."""
    return [
        f"$.{f or ''}: {pick(local, f)!r} here, {pick(real, f)!r} on the validator"
        for f in fields
        if pick(local, f) != pick(real, f)
    ]


def error_diff(local: dict[str, Any], real: dict[str, Any]) -> list[str]:
    """Refusals: both must be errors with the same code; the message is compared too."""
    le, re_ = local.get("error"), real.get("error")
    if le is None or re_ is None:
        return [f"error: {le!r} here, {re_!r} on the validator"]
    out = []
    if le.get("code") != re_.get("code"):
        out.append(f"error.code: {le.get('code')} here, {re_.get('code')} on the validator")
    if le.get("message") != re_.get("message"):
        out.append(f"error.message: {le.get('message')!r} here, {re_.get('message')!r} there")
    return out

"""Borsh writers compiled from IDL types (the encoding half of :mod:`psyche.solana.idl`).

Instruction arguments and, for tests and the RPC test double, whole accounts are encoded here;
value shapes are the ones :class:`~psyche.solana.idl.IdlCodec` decodes to.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from psyche.solana.errors import ChainError

__all__ = ["IdlError", "Writer", "WriterMixin"]

Writer = Callable[[Any, bytearray], None]

_PRIMS: dict[str, str] = {
    "u8": "B",
    "i8": "b",
    "u16": "H",
    "i16": "h",
    "u32": "I",
    "i32": "i",
    "u64": "Q",
    "i64": "q",
    "f32": "f",
    "f64": "d",
}


class IdlError(ChainError, ValueError):
    """The IDL is malformed, or a value/byte string does not fit the IDL type."""


def _defined_name(tp: Mapping[str, Any]) -> str:
    d = tp["defined"]
    return d if isinstance(d, str) else str(d["name"])


def _ftype(f: Any) -> Any:
    return f["type"] if isinstance(f, dict) and "name" in f and "type" in f else f


def _is_newtype(fields: Any) -> bool:
    return (
        isinstance(fields, list)
        and len(fields) == 1
        and not (isinstance(fields[0], dict) and "name" in fields[0])
    )


class WriterMixin:
    """Needs ``writer(tp)`` (cached) and ``_typedef(name)`` from the class it is mixed into."""

    def writer(self, tp: Any) -> Writer:
        raise NotImplementedError

    def _typedef(self, name: str) -> dict[str, Any]:
        raise NotImplementedError

    def _compile_writer(self, tp: Any) -> Writer:
        if isinstance(tp, str):
            return _prim_writer(tp)
        if "array" in tp:
            inner, n = tp["array"]
            n = int(n)
            el = self.writer(inner)

            def write_array(x: Any, out: bytearray) -> None:
                if len(x) != n:
                    raise IdlError(f"array needs {n} elements, got {len(x)}")
                if inner == "u8":
                    out += bytes(x)
                    return
                for e in x:
                    el(e, out)

            return write_array
        if "vec" in tp:
            inner = tp["vec"]
            el = self.writer(inner)

            def write_vec(x: Any, out: bytearray) -> None:
                out += struct.pack("<I", len(x))
                if inner == "u8":
                    out += bytes(x)
                    return
                for e in x:
                    el(e, out)

            return write_vec
        if "option" in tp:
            el = self.writer(tp["option"])

            def write_option(x: Any, out: bytearray) -> None:
                if x is None:
                    out.append(0)
                else:
                    out.append(1)
                    el(x, out)

            return write_option
        if "defined" in tp:
            name = _defined_name(tp)
            cell: list[Writer] = []

            def write_defined(x: Any, out: bytearray) -> None:
                if not cell:
                    cell.append(self._compile_typedef_writer(name))
                cell[0](x, out)

            return write_defined
        raise IdlError(f"unsupported IDL type {tp!r}")

    def _compile_typedef_writer(self, name: str) -> Writer:
        td = self._typedef(name)
        if td["kind"] == "type":
            return self.writer(td["alias"])
        if td["kind"] == "struct":
            return self._fields_writer(name, td.get("fields", []))
        if td["kind"] == "enum":
            variants = {
                vt["name"]: (
                    i,
                    self._fields_writer(name, vt["fields"]) if vt.get("fields") else None,
                )
                for i, vt in enumerate(td["variants"])
            }
            single = {vt["name"] for vt in td["variants"] if _is_newtype(vt.get("fields"))}

            def write_enum(x: Any, out: bytearray) -> None:
                if isinstance(x, str):
                    vname, payload = x, None
                elif isinstance(x, Mapping) and len(x) == 1:
                    ((vname, payload),) = x.items()
                else:
                    raise IdlError(f"{name}: expected a variant name or {{name: value}}, got {x!r}")
                if vname not in variants:
                    raise IdlError(f"{name}: unknown variant {vname!r}")
                tag, fw = variants[vname]
                out.append(tag)
                if fw is not None:
                    fw([payload] if vname in single else payload, out)

            return write_enum
        raise IdlError(f"{name}: unsupported type kind {td['kind']!r}")

    def _fields_writer(self, owner: str, fields: list[Any]) -> Writer:
        named = bool(fields) and isinstance(fields[0], dict) and "name" in fields[0]
        writers = [(f["name"] if named else None, self.writer(_ftype(f))) for f in fields]

        def write_fields(x: Any, out: bytearray) -> None:
            if named:
                for fname, w in writers:
                    if fname not in x:
                        raise IdlError(f"{owner}: missing field {fname!r}")
                    w(x[fname], out)
            else:
                for (_, w), e in zip(writers, x, strict=True):
                    w(e, out)

        return write_fields


def _prim_writer(tp: str) -> Writer:
    if tp in _PRIMS:
        s = struct.Struct("<" + _PRIMS[tp])

        def write_prim(x: Any, out: bytearray) -> None:
            try:
                out += s.pack(x)
            except struct.error as e:
                raise IdlError(f"{tp}: {x!r}: {e}") from None

        return write_prim
    if tp == "bool":
        return lambda x, out: out.append(1 if x else 0)
    if tp == "pubkey":

        def write_pubkey(x: Any, out: bytearray) -> None:
            b = bytes(x)
            if len(b) != 32:
                raise IdlError(f"pubkey needs 32 bytes, got {len(b)}")
            out += b

        return write_pubkey
    if tp in ("u128", "i128"):
        signed = tp == "i128"
        return lambda x, out: out.extend(int(x).to_bytes(16, "little", signed=signed))
    if tp in ("string", "bytes"):

        def write_str(x: Any, out: bytearray) -> None:
            b = x.encode() if isinstance(x, str) else bytes(x)
            out += struct.pack("<I", len(b)) + b

        return write_str
    raise IdlError(f"unsupported primitive {tp!r}")

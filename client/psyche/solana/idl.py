"""An IDL-driven borsh codec: decode accounts and encode instructions from an Anchor IDL JSON.

Why not anchorpy's coder: it builds ``construct`` parsers that turn every ``[u8; N]`` into a list
of Python ints, and the ~170 KB zero-copy coordinator account is mostly such arrays (blooms,
identities, strings), so decoding it that way is slow (measured in
``tests/unit/solana/test_idl_codec.py``; figures in docs/solana.md). This module walks
the IDL's ``types`` once, compiles one small closure per type, and reads with ``struct`` on a
``memoryview``: ``u8`` arrays become ``bytes``, arrays of other primitives one ``unpack_from``.
It is still "from the IDL": no layout is written here by hand.

Value shapes (both directions): struct → ``dict`` in field order (a tuple struct → ``list``);
enum → the variant name for a unit variant, ``{"Variant": value}`` otherwise (a one-field tuple
variant carries that field's value, like serde's newtype; a struct variant a ``dict``); ``pubkey``
→ 32 ``bytes``; ``[u8; N]`` and ``bytes`` → ``bytes``; ``option`` → ``None`` or the value.

The zero-copy account is readable as borsh because the programs' Pod types have no implicit
padding, no Rust enums and no bools (docs/solana.md), so the bytemuck layout is the borsh one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psyche.solana.idl_writer import (
    _PRIMS,
    IdlError,
    Writer,
    WriterMixin,
    _defined_name,
    _ftype,
)

__all__ = ["IdlAccountMeta", "IdlCodec", "IdlError", "IdlInstruction"]

Reader = Callable[[memoryview, int], tuple[Any, int]]


@dataclass(frozen=True, slots=True)
class IdlAccountMeta:
    """One account an instruction takes, flattened out of nested account groups."""

    name: str
    writable: bool
    signer: bool
    address: str | None = None
    optional: bool = False


@dataclass(frozen=True, slots=True)
class IdlInstruction:
    name: str
    discriminator: bytes
    accounts: tuple[IdlAccountMeta, ...]
    args: tuple[tuple[str, Any], ...]


def _flatten(accounts: list[dict[str, Any]]) -> list[IdlAccountMeta]:
    out: list[IdlAccountMeta] = []
    for a in accounts:
        if "accounts" in a:
            out.extend(_flatten(a["accounts"]))
        else:
            out.append(
                IdlAccountMeta(
                    name=a["name"],
                    writable=bool(a.get("writable", False)),
                    signer=bool(a.get("signer", False)),
                    address=a.get("address"),
                    optional=bool(a.get("optional", False)),
                )
            )
    return out


class IdlCodec(WriterMixin):
    """Readers and writers compiled from one program's IDL."""

    def __init__(self, idl: Mapping[str, Any]) -> None:
        if "types" not in idl or "instructions" not in idl:
            raise IdlError("not an Anchor IDL (no 'types' or 'instructions')")
        self.idl = idl
        self.address: str = str(idl.get("address", ""))
        self.types: dict[str, dict[str, Any]] = {t["name"]: t for t in idl["types"]}
        self._readers: dict[str, Reader] = {}
        self._writers: dict[str, Writer] = {}
        self._sizes: dict[str, int | None] = {}
        self.instructions: dict[str, IdlInstruction] = {
            ix["name"]: IdlInstruction(
                name=ix["name"],
                discriminator=bytes(ix["discriminator"]),
                accounts=tuple(_flatten(ix.get("accounts", []))),
                args=tuple((a["name"], a["type"]) for a in ix.get("args", [])),
            )
            for ix in idl["instructions"]
        }
        self.account_discriminators: dict[str, bytes] = {
            a["name"]: bytes(a["discriminator"]) for a in idl.get("accounts", [])
        }
        self.errors: dict[int, str] = {e["code"]: e["name"] for e in idl.get("errors", [])}

    @classmethod
    def load(cls, path: str | Path) -> IdlCodec:
        try:
            return cls(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise IdlError(f"{path}: cannot load the IDL: {e}") from None

    # --- public API -----------------------------------------------------------------------------

    def decode(self, type_name: str, data: bytes | memoryview, offset: int = 0) -> Any:
        value, _ = self.reader({"defined": {"name": type_name}})(memoryview(data), offset)
        return value

    def encode(self, type_name: str, value: Any) -> bytes:
        out = bytearray()
        self.writer({"defined": {"name": type_name}})(value, out)
        return bytes(out)

    def decode_account(self, name: str, data: bytes) -> Any:
        """Check the 8-byte discriminator, then decode the account's type."""
        disc = self.account_discriminators.get(name)
        if disc is None:
            raise IdlError(f"the IDL has no account {name!r}")
        if bytes(data[: len(disc)]) != disc:
            raise IdlError(f"account data is not a {name} (discriminator mismatch)")
        return self.decode(name, data, len(disc))

    def encode_account(self, name: str, value: Any) -> bytes:
        return self.account_discriminators[name] + self.encode(name, value)

    def account_size(self, name: str) -> int:
        """Bytes of a fixed-size account, discriminator included."""
        size = self.size_of({"defined": {"name": name}})
        if size is None:
            raise IdlError(f"{name} has no fixed size")
        return len(self.account_discriminators[name]) + size

    def instruction_data(self, name: str, args: Mapping[str, Any]) -> bytes:
        ix = self.instruction(name)
        out = bytearray(ix.discriminator)
        for arg, tp in ix.args:
            if arg not in args:
                raise IdlError(f"{name}: missing argument {arg!r}")
            self.writer(tp)(args[arg], out)
        extra = set(args) - {a for a, _ in ix.args}
        if extra:
            raise IdlError(f"{name}: unknown argument(s) {sorted(extra)}")
        return bytes(out)

    def decode_instruction(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Inverse of :meth:`instruction_data` (used by tests and the RPC test double)."""
        view = memoryview(data)
        for ix in self.instructions.values():
            if bytes(view[: len(ix.discriminator)]) == ix.discriminator:
                off, args = len(ix.discriminator), {}
                for arg, tp in ix.args:
                    args[arg], off = self.reader(tp)(view, off)
                if off != len(data):
                    raise IdlError(f"{ix.name}: {len(data) - off} trailing byte(s)")
                return ix.name, args
        raise IdlError("no instruction of this IDL has that discriminator")

    def instruction(self, name: str) -> IdlInstruction:
        try:
            return self.instructions[name]
        except KeyError:
            raise IdlError(f"the IDL has no instruction {name!r}") from None

    def error_name(self, code: int) -> str | None:
        return self.errors.get(code)

    # --- compilation ----------------------------------------------------------------------------

    def _typedef(self, name: str) -> dict[str, Any]:
        try:
            return self.types[name]["type"]
        except KeyError:
            raise IdlError(f"the IDL has no type {name!r}") from None

    def size_of(self, tp: Any) -> int | None:
        """Fixed byte size of a type, or None if variable (vec, string, option, enum payloads)."""
        if isinstance(tp, str):
            if tp in _PRIMS:
                return struct.calcsize("<" + _PRIMS[tp])
            return {"bool": 1, "pubkey": 32, "u128": 16, "i128": 16}.get(tp)
        if "array" in tp:
            inner, n = tp["array"]
            s = self.size_of(inner)
            return None if s is None else s * int(n)
        if "defined" in tp:
            name = _defined_name(tp)
            if name not in self._sizes:
                self._sizes[name] = None
                td = self._typedef(name)
                if td["kind"] == "struct":
                    sizes = [self.size_of(_ftype(f)) for f in td.get("fields", [])]
                    self._sizes[name] = None if None in sizes else sum(s or 0 for s in sizes)
                elif td["kind"] == "type":
                    self._sizes[name] = self.size_of(td["alias"])
            return self._sizes[name]
        return None

    def reader(self, tp: Any) -> Reader:
        key = json.dumps(tp, sort_keys=True)
        r = self._readers.get(key)
        if r is None:
            r = self._compile_reader(tp)
            self._readers[key] = r
        return r

    def writer(self, tp: Any) -> Writer:
        key = json.dumps(tp, sort_keys=True)
        w = self._writers.get(key)
        if w is None:
            w = self._compile_writer(tp)
            self._writers[key] = w
        return w

    def _compile_reader(self, tp: Any) -> Reader:
        if isinstance(tp, str):
            return _prim_reader(tp)
        if "array" in tp:
            inner, n = tp["array"]
            n = int(n)
            if inner == "u8":
                return lambda v, o: (bytes(v[o : o + n]), o + n)
            if isinstance(inner, str) and inner in _PRIMS:
                s = struct.Struct(f"<{n}{_PRIMS[inner]}")
                return lambda v, o: (list(s.unpack_from(v, o)), o + s.size)
            el = self.reader(inner)

            def read_array(v: memoryview, o: int) -> tuple[Any, int]:
                out = []
                for _ in range(n):
                    x, o = el(v, o)
                    out.append(x)
                return out, o

            return read_array
        if "vec" in tp:
            inner = tp["vec"]
            el = self.reader(inner)
            is_u8 = inner == "u8"

            def read_vec(v: memoryview, o: int) -> tuple[Any, int]:
                (n,) = struct.unpack_from("<I", v, o)
                o += 4
                if is_u8:
                    return bytes(v[o : o + n]), o + n
                out = []
                for _ in range(n):
                    x, o = el(v, o)
                    out.append(x)
                return out, o

            return read_vec
        if "option" in tp or "coption" in tp:
            inner_r = self.reader(tp.get("option", tp.get("coption")))
            tag_size = 1 if "option" in tp else 4

            def read_option(v: memoryview, o: int) -> tuple[Any, int]:
                tag = v[o] if tag_size == 1 else struct.unpack_from("<I", v, o)[0]
                o += tag_size
                if tag == 0:
                    return None, o
                if tag != 1:
                    raise IdlError(f"invalid option tag {tag}")
                return inner_r(v, o)

            return read_option
        if "defined" in tp:
            return self._defined_reader(_defined_name(tp))
        raise IdlError(f"unsupported IDL type {tp!r}")

    def _defined_reader(self, name: str) -> Reader:
        # Late-bound so recursive or not-yet-compiled types work.
        cell: list[Reader] = []

        def read(v: memoryview, o: int) -> tuple[Any, int]:
            if not cell:
                cell.append(self._compile_typedef_reader(name))
            return cell[0](v, o)

        return read

    def _compile_typedef_reader(self, name: str) -> Reader:
        td = self._typedef(name)
        if td["kind"] == "type":
            return self.reader(td["alias"])
        if td["kind"] == "struct":
            return self._fields_reader(td.get("fields", []))
        if td["kind"] == "enum":
            variants = [
                (vt["name"], self._fields_reader(vt["fields"]) if vt.get("fields") else None)
                for vt in td["variants"]
            ]

            def read_enum(v: memoryview, o: int) -> tuple[Any, int]:
                tag = v[o]
                if tag >= len(variants):
                    raise IdlError(f"{name}: invalid variant tag {tag}")
                vname, fr = variants[tag]
                if fr is None:
                    return vname, o + 1
                val, o = fr(v, o + 1)
                if isinstance(val, list) and len(val) == 1:
                    val = val[0]
                return {vname: val}, o

            return read_enum
        raise IdlError(f"{name}: unsupported type kind {td['kind']!r}")

    def _fields_reader(self, fields: list[Any]) -> Reader:
        named = bool(fields) and isinstance(fields[0], dict) and "name" in fields[0]
        readers = [(f["name"] if named else None, self.reader(_ftype(f))) for f in fields]

        def read_fields(v: memoryview, o: int) -> tuple[Any, int]:
            if named:
                d: dict[str, Any] = {}
                for fname, r in readers:
                    d[fname], o = r(v, o)  # type: ignore[index]
                return d, o
            out = []
            for _, r in readers:
                x, o = r(v, o)
                out.append(x)
            return out, o

        return read_fields


def _prim_reader(tp: str) -> Reader:
    if tp in _PRIMS:
        s = struct.Struct("<" + _PRIMS[tp])
        return lambda v, o: (s.unpack_from(v, o)[0], o + s.size)
    if tp == "bool":
        return lambda v, o: (v[o] != 0, o + 1)
    if tp == "pubkey":
        return lambda v, o: (bytes(v[o : o + 32]), o + 32)
    if tp in ("u128", "i128"):
        signed = tp == "i128"
        return lambda v, o: (int.from_bytes(v[o : o + 16], "little", signed=signed), o + 16)
    if tp in ("string", "bytes"):
        as_str = tp == "string"

        def read_str(v: memoryview, o: int) -> tuple[Any, int]:
            (n,) = struct.unpack_from("<I", v, o)
            raw = bytes(v[o + 4 : o + 4 + n])
            if len(raw) != n:
                raise IdlError("string runs past the end of the data")
            return (raw.decode() if as_str else raw), o + 4 + n

        return read_str
    raise IdlError(f"unsupported primitive {tp!r}")

"""Conversion between typed dataclasses and plain JSON/TOML objects, in serde's default shapes.

The reference's config files and our shared test vectors use serde's *externally tagged* enum form:
a unit variant is the bare string ``"Ephemeral"``, a newtype variant is ``{"Hub": {...}}`` and a
struct variant is ``{"Http": {"location": ..., ...}}`` (in TOML: ``[model.LLM.checkpoint.Hub]``).
msgspec and pydantic only support internally tagged unions, so this small reflective converter is
written by hand. It is strict: unknown keys, missing keys, wrong types and out-of-range integers
raise :class:`ConfigError` naming the dotted path of the offending key.

Integer widths are declared with ``Annotated[int, IntRange(...)]`` (aliases ``U8`` … ``U64``) and
byte-bounded strings with ``Annotated[str, MaxBytes(n)]`` (the on-chain FixedString sizes).
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeVar, Union, get_args, get_origin


class ConfigError(ValueError):
    """A run-config value is malformed or breaks a rule; the message names the key and the rule."""


@dataclass(frozen=True, slots=True)
class IntRange:
    lo: int
    hi: int
    name: str


@dataclass(frozen=True, slots=True)
class MaxBytes:
    n: int


U8 = Annotated[int, IntRange(0, 2**8 - 1, "u8")]
U16 = Annotated[int, IntRange(0, 2**16 - 1, "u16")]
U32 = Annotated[int, IntRange(0, 2**32 - 1, "u32")]
U64 = Annotated[int, IntRange(0, 2**64 - 1, "u64")]


class Tagged:
    """Base of an externally tagged enum. Variants are dataclass subclasses of the enum's base
    class with a ``TAG``; a ``NEWTYPE`` variant wraps exactly one field and serializes as it."""

    TAG: ClassVar[str] = ""
    NEWTYPE: ClassVar[bool] = False

    @classmethod
    def variants(cls) -> dict[str, type[Tagged]]:
        out: dict[str, type[Tagged]] = {}
        stack = list(cls.__subclasses__())
        while stack:
            sub = stack.pop()
            # dataclass(slots=True) replaces the class it decorates; the discarded original stays
            # in __subclasses__, so keep only the class its module actually exports.
            if sub.TAG and getattr(sys.modules.get(sub.__module__), sub.__qualname__, None) is sub:
                out[sub.TAG] = sub
            stack.extend(sub.__subclasses__())
        return out


T = TypeVar("T")

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    return _HINTS[cls]


def to_obj(value: Any) -> Any:
    """Typed value -> JSON-able object (dicts keep dataclass field order; None stays None)."""
    if isinstance(value, Tagged):
        fields = dataclasses.fields(value)  # type: ignore[arg-type]
        if not fields:
            return value.TAG
        if value.NEWTYPE:
            return {value.TAG: to_obj(getattr(value, fields[0].name))}
        return {value.TAG: {f.name: to_obj(getattr(value, f.name)) for f in fields}}
    if isinstance(value, enum.Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_obj(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [to_obj(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_obj(v) for k, v in value.items()}
    return value


def _describe(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def from_obj(tp: Any, obj: Any, path: str = "$") -> Any:
    """Plain object -> value of type ``tp``; raises ConfigError naming ``path`` on any mismatch."""
    meta: tuple[Any, ...] = ()
    if get_origin(tp) is Annotated:
        tp, *rest = get_args(tp)
        meta = tuple(rest)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _optional_from_obj(tp, meta, obj, path)
    if tp is Any:
        return obj
    if isinstance(tp, type) and tp in _SCALARS:
        return _SCALARS[tp](obj, meta, path)
    if origin in (list, tuple):
        return _array_from_obj(tp, obj, path)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(obj, str) or obj not in tp.__members__:
            allowed = ", ".join(tp.__members__)
            raise ConfigError(f"{path}: {_describe(obj)} is not one of: {allowed}")
        return tp.__members__[obj]
    if isinstance(tp, type) and issubclass(tp, Tagged):
        return _tagged_from_obj(tp, obj, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _struct_from_obj(tp, obj, path)
    raise ConfigError(f"{path}: cannot convert to {tp!r}")  # pragma: no cover - programming error


def _optional_from_obj(tp: Any, meta: tuple[Any, ...], obj: Any, path: str) -> Any:
    """``X | None`` (the only union supported): ``None``, or ``obj`` as an ``X`` (with the
    annotation's ``meta``)."""
    args = get_args(tp)
    if obj is None and type(None) in args:
        return None
    non_none = [a for a in args if a is not type(None)]
    if len(non_none) == 1:
        return from_obj(non_none[0] if not meta else Annotated[non_none[0], *meta], obj, path)
    raise ConfigError(f"{path}: unsupported union type")


def _bool_from_obj(obj: Any, meta: tuple[Any, ...], path: str) -> bool:
    if not isinstance(obj, bool):
        raise ConfigError(f"{path}: expected true or false, got {_describe(obj)}")
    return obj


def _int_from_obj(obj: Any, meta: tuple[Any, ...], path: str) -> int:
    """An integer (not a bool) within every :class:`IntRange` of ``meta``."""
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise ConfigError(f"{path}: expected an integer, got {_describe(obj)}")
    for m in meta:
        if isinstance(m, IntRange) and not m.lo <= obj <= m.hi:
            raise ConfigError(f"{path}: {obj} is out of range for {m.name} ({m.lo}..{m.hi})")
    return obj


def _float_from_obj(obj: Any, meta: tuple[Any, ...], path: str) -> float:
    """A number (an integer too, if a float can hold it)."""
    if isinstance(obj, bool) or not isinstance(obj, int | float):
        raise ConfigError(f"{path}: expected a number, got {_describe(obj)}")
    try:
        return float(obj)
    except OverflowError:
        raise ConfigError(f"{path}: integer too large for a float") from None


def _str_from_obj(obj: Any, meta: tuple[Any, ...], path: str) -> str:
    """A string within every :class:`MaxBytes` of ``meta`` (UTF-8)."""
    if not isinstance(obj, str):
        raise ConfigError(f"{path}: expected a string, got {_describe(obj)}")
    for m in meta:
        if isinstance(m, MaxBytes) and len(obj.encode()) > m.n:
            raise ConfigError(f"{path}: {obj!r} is longer than {m.n} bytes")
    return obj


def _bytes_from_obj(obj: Any, meta: tuple[Any, ...], path: str) -> bytes:
    """Bytes, written as a hex string."""
    if not isinstance(obj, str):
        raise ConfigError(f"{path}: expected a hex string, got {_describe(obj)}")
    try:
        return bytes.fromhex(obj)
    except ValueError:
        raise ConfigError(f"{path}: {_describe(obj)} is not valid hex") from None


_SCALARS: dict[type, Callable[[Any, tuple[Any, ...], str], Any]] = {
    bool: _bool_from_obj,
    int: _int_from_obj,
    float: _float_from_obj,
    str: _str_from_obj,
    bytes: _bytes_from_obj,
}
"""The scalar types' converters: ``(obj, the annotation's metadata, path) -> value``."""


def _array_from_obj(tp: Any, obj: Any, path: str) -> list[Any] | tuple[Any, ...]:
    """``list[X]``, ``tuple[X, ...]`` or a fixed-length ``tuple[X, Y, …]`` from an array."""
    origin = get_origin(tp)
    if not isinstance(obj, list | tuple):
        raise ConfigError(f"{path}: expected an array, got {_describe(obj)}")
    args = get_args(tp)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(obj) != len(args):
            raise ConfigError(f"{path}: expected {len(args)} elements, got {len(obj)}")
        return tuple(
            from_obj(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, obj, strict=True))
        )
    elem = args[0] if args else Any
    items = [from_obj(elem, v, f"{path}[{i}]") for i, v in enumerate(obj)]
    return tuple(items) if origin is tuple else items


def _struct_from_obj(cls: type[T], obj: Any, path: str) -> T:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: expected a table, got {_describe(obj)}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in obj if k not in fields]
    if unknown:
        raise ConfigError(
            f"{path}.{unknown[0]}: unknown key (expected one of: {', '.join(fields)})"
        )
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name in obj:
            kwargs[name] = from_obj(hints[name], obj[name], f"{path}.{name}")
        elif (
            f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
            and not _is_optional(hints[name])
        ):
            raise ConfigError(f"{path}.{name}: missing key")
        elif _is_optional(hints[name]) and f.default is dataclasses.MISSING:
            kwargs[name] = None
    return cls(**kwargs)


def _is_optional(tp: Any) -> bool:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp)


def _tagged_from_obj(base: type[Tagged], obj: Any, path: str) -> Any:
    variants = base.variants()
    names = ", ".join(variants)
    if isinstance(obj, str):
        tag, payload, has_payload = obj, None, False
    elif isinstance(obj, dict) and len(obj) == 1:
        ((tag, payload),) = obj.items()
        has_payload = True
    else:
        raise ConfigError(f"{path}: expected one of {names} (a string or a one-key table)")
    cls = variants.get(tag)
    if cls is None:
        raise ConfigError(f"{path}: unknown variant {tag!r} (expected one of: {names})")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    sub = f"{path}.{tag}"
    if not fields:
        if has_payload and payload not in (None, {}):
            raise ConfigError(f"{sub}: variant takes no value")
        return cls()
    if not has_payload:
        raise ConfigError(f"{path}: variant {tag!r} needs a value")
    if cls.NEWTYPE:
        name = fields[0].name
        return cls(**{name: from_obj(_hints(cls)[name], payload, sub)})
    return _struct_from_obj(cls, payload, sub)

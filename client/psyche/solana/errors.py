"""The chain layer's own error type."""

from __future__ import annotations

__all__ = ["ChainError"]


class ChainError(Exception):
    """Something the chain client refused or could not read: a value the IDL cannot encode, an
    account whose bytes break the program's rules.

    Subclasses also derive from the built-in type their callers already catch (``ValueError``),
    so catching ``ChainError`` is an addition, never a change, to what a caller handles.
    """

"""The chain layer's own error type."""

from __future__ import annotations

__all__ = ["ChainError"]


class ChainError(Exception):
    """Something the chain client refused or could not do: a value the IDL cannot encode, an
    account whose bytes break the program's rules, an RPC endpoint that did not answer, a
    transaction the program rejected, a command the program would refuse.

    The chain layer never raises the Backend seam's ``BackendError`` (it does not import
    ``psyche.backends``): its callers (the CLI, the explorer, the testnets) catch ``ChainError``,
    and the Solana backend turns one into a ``BackendError`` with the same message where it
    crosses the seam. A subclass the user can fix carries an ``exit_code`` for the CLI.

    Subclasses for malformed values also derive from the built-in type their callers already
    catch (``ValueError``), so catching ``ChainError`` there is an addition, never a change, to
    what a caller handles.
    """

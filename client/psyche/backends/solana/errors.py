"""Why a Solana client stops, and how the chain layer's errors cross the Backend seam.

The exceptions :class:`~psyche.backends.solana.backend.SolanaBackend` ends a client with, each
with its exit code (docs/solana.md, "Python side"; the README's table of exit codes), and
:func:`backend_error`: a :class:`~psyche.solana.errors.ChainError` as a ``BackendError``.
"""

from __future__ import annotations

from psyche.backends.base import BackendError, BackendProtocolError
from psyche.solana.errors import ChainError
from psyche.solana.snapshot import AccountLayoutError

__all__ = [
    "EXIT_LEFT_RUN",
    "EXIT_NOT_AUTHORIZED",
    "EXIT_VERSION_MISMATCH",
    "ClientVersionMismatchError",
    "JoinNotAuthorizedError",
    "LeftRunError",
    "backend_error",
]

EXIT_VERSION_MISMATCH = 10
EXIT_LEFT_RUN = 3
EXIT_NOT_AUTHORIZED = 2
"""A configuration the user must change (psyche.cli.exit_codes.EXIT_CONFIG): never restarted."""


class ClientVersionMismatchError(BackendError):
    """This client's version is not the one the run requires."""

    exit_code = EXIT_VERSION_MISMATCH


class JoinNotAuthorizedError(BackendError):
    """``join_run`` was refused for want of an authorization: no retry can change that, only the
    join authority (creating it) or the grantee (delegating to this wallet)."""

    exit_code = EXIT_NOT_AUTHORIZED


class LeftRunError(BackendError):
    """An exit condition: halted run, not selected, or unhealthy after joining.

    See docs/solana.md, "Python side".
    """

    exit_code = EXIT_LEFT_RUN


def backend_error(error: ChainError) -> BackendError:
    """``error``, raised by the chain layer (:mod:`psyche.solana`), as the Backend seam reports it:
    the same message, as a ``BackendProtocolError`` when the account's bytes are unreadable. Only
    ``BackendError`` leaves a backend (docs/architecture.md, "Layers")."""
    if isinstance(error, AccountLayoutError):
        return BackendProtocolError(str(error))
    return BackendError(str(error))

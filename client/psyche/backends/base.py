"""The Backend seam: everything the client daemon needs from a coordinator host.

See docs/architecture.md, "Seams".

The daemon never talks to a server or a chain directly; it watches coordinator states and sends
the few messages a client may send. Two implementations exist: the centralized TCP backend
(:mod:`psyche.backends.centralized.backend`) and the Solana backend. Keeping the seam this narrow
(one watch method, four sends) is what lets the daemon run unchanged against either, and lets
tests drive it with a hand-written fake.

Semantics every implementation keeps:

* ``wait_for_new_state`` returns each state at most once and never an older one than the last
  returned; states arrive in the host's order, so the daemon sees every phase change the host
  published (keying on a missed state desynchronised the reference client: docs/protocol.md,
  "Known flaws of the reference", flaw 15).
* ``send_*`` are fire-and-forget: they return once the message is handed to the transport. A
  host that rejects a message answers asynchronously (the centralized backend logs it and offers
  :meth:`~psyche.backends.centralized.backend.CentralizedBackend.next_rejection`); the coordinator
  state a client then sees is the only authority on what was accepted.
* Failures raise :class:`BackendError` subclasses; nothing else escapes a backend.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import Witness, WitnessMetadata
from psyche.protocol.committee import CommitteeProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint

__all__ = [
    "Backend",
    "BackendClosedError",
    "BackendError",
    "BackendProtocolError",
    "HealthCheckEntries",
    "JoinRejectedError",
]

HealthCheckEntries = list[tuple[NodeIdentity, CommitteeProof]]


class BackendError(Exception):
    """Base of every error a backend raises."""


class BackendClosedError(BackendError):
    """The backend was closed, or gave up reaching its host."""


class BackendProtocolError(BackendError):
    """The peer sent something that breaks the protocol (malformed, oversize, out of order)."""


class JoinRejectedError(BackendError):
    """The host refused to let this client join; ``reason`` is the host's own explanation."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"join rejected by the server: {reason}")
        self.reason = reason


@runtime_checkable
class Backend(Protocol):
    """What the daemon sees of a coordinator host."""

    async def wait_for_new_state(self) -> Coordinator:
        """The next coordinator state newer than the last one returned (blocks until one)."""
        ...

    async def send_witness(self, witness: Witness, metadata: WitnessMetadata) -> None:
        """Attest this round's results (only elected witnesses are accepted)."""
        ...

    async def send_warmup_witness(self, witness: Witness) -> None:
        """Report that the model is loaded; enough of these start training before warmup ends."""
        ...

    async def send_health_check(self, checks: HealthCheckEntries) -> None:
        """Accuse trainers the previous round's witnesses did not see."""
        ...

    async def send_checkpoint(self, index: int, checkpoint: Checkpoint) -> None:
        """Report a stored checkpoint (elected checkpointers only, in Cooldown)."""
        ...

    async def close(self) -> None:
        """Release the connection; later calls raise :class:`BackendClosedError`."""
        ...

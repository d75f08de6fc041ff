"""What the Solana backend reads from and sends to a run, independent of the byte layout.

The backend's logic (nonce gating, joining, tick prediction, sends) is written against two small
protocols so it can be tested before and apart from the IDL: :class:`CoordinatorCodec` turns the
coordinator account's bytes into a :class:`RunSnapshot`, and :class:`ClientInstructions` builds the
instructions a client sends. :mod:`psyche.solana.layout` implements both from the
committed IDL; tests may inject others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from psyche.coordinator import Coordinator, Witness, WitnessMetadata
from psyche.protocol.committee import CommitteeProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.solana.errors import ChainError

__all__ = [
    "AccountLayoutError",
    "ClientInstructions",
    "CoordinatorCodec",
    "RegisteredClient",
    "RunSnapshot",
]


class AccountLayoutError(ChainError):
    """The coordinator account's bytes are not a coordinator account we can read (size,
    discriminator, version or a value out of range). The Solana backend reports it across the
    Backend seam as a ``BackendProtocolError``."""


@dataclass(frozen=True, slots=True)
class RegisteredClient:
    """A wallet registered with the run (``clients_state.clients`` on chain)."""

    id: NodeIdentity
    active: int
    """The ``next_active`` value at this client's last ``join_run``."""
    earned: int = 0
    slashed: int = 0


@dataclass(slots=True)
class RunSnapshot:
    """One decoded coordinator account."""

    nonce: int
    coordinator: Coordinator
    clients: Sequence[RegisteredClient] = ()
    next_active: int = 0
    client_version: str = ""
    extra: dict[str, object] = field(default_factory=dict)
    """Layout-specific fields (metadata, epoch rates) for ``json-dump-run``."""

    def pending(self) -> list[NodeIdentity]:
        """The WaitingForMembers candidates: registered clients that joined for this epoch, in
        registration order (what the program passes to ``tick``)."""
        return [c.id for c in self.clients if c.active == self.next_active]

    def registered(self, signer: bytes) -> RegisteredClient | None:
        return next((c for c in self.clients if c.id.signer == signer), None)


class CoordinatorCodec(Protocol):
    """Decodes the coordinator account."""

    def decode_account(self, data: bytes) -> RunSnapshot: ...


class ClientInstructions(Protocol):
    """The instructions a training client sends, bound to one run's accounts."""

    def join_run(
        self, user: Pubkey, client_id: NodeIdentity, authorization: Pubkey
    ) -> Instruction: ...

    def tick(self, user: Pubkey) -> Instruction: ...

    def witness(self, user: Pubkey, witness: Witness, metadata: WitnessMetadata) -> Instruction: ...

    def warmup_witness(self, user: Pubkey, witness: Witness) -> Instruction: ...

    def health_check(
        self, user: Pubkey, checks: Sequence[tuple[NodeIdentity, CommitteeProof]]
    ) -> list[Instruction]: ...

    def checkpoint(self, user: Pubkey, index: int, checkpoint: Checkpoint) -> Instruction: ...

    def set_peer_addrs(self, user: Pubkey, addrs: Sequence[str]) -> Instruction: ...

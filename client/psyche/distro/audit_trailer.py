"""The audit trailer of a SparseLoCo result in a run that verifies (issue 39 item 2).

A SparseLoCo trainer commits to its round's chain of inner states
(:mod:`psyche.training.sparseloco_audit`) by appending their hashes to its payload, so the
result's hash, which its signed announcement and the witnesses' blooms carry, covers them: the
trainer cannot change its chain once a verifier has drawn a link. Layout (fixed size for a run,
so the download bound stays exact):

    magic b"PSLA" | states u8 | (links + 1) × 32-byte state hashes | error_before 32 |
    error_after 32 | moments_after 32 | probe (``psyche.distro.audit_probe``: inner step 0 at
    a few positions)

S_0's hash is of its moments alone (its weights are the round's public start weights), so a
trainer's next result must name ``moments_after`` as its first state hash, as it names
``error_after`` as its ``error_before`` (protocol version 7).

``links`` is the run's ``inner_steps``; ``states`` is how many state hashes are used (a batch of
fewer samples than ``inner_steps`` takes fewer inner steps, at least one: 2 ≤ states ≤ links + 1);
unused slots are zero, and must be (canonical form: one byte string per chain).
"""

from __future__ import annotations

from dataclasses import dataclass

from psyche.distro.payload import PayloadError

__all__ = ["MAGIC", "AuditCommitments", "decode_trailer", "encode_trailer", "trailer_bytes"]

MAGIC = b"PSLA"
_HASH = 32


def trailer_bytes(inner_steps: int, probe: int) -> int:
    """The trailer's exact size in a run of ``inner_steps`` whose probe has ``probe`` bytes
    (``audit_probe.probe_bytes``)."""
    return len(MAGIC) + 1 + (inner_steps + 1) * _HASH + 3 * _HASH + probe


@dataclass(frozen=True, slots=True)
class AuditCommitments:
    """What a SparseLoCo result commits to: the BLAKE3 of each inner state S_0 … S_n (before
    every inner step and after the last; S_0's of its moments alone), of the error buffers before
    and after the round and of the moments after it (S_n's optimizer half), and its probe of
    inner step 0 (``psyche.distro.audit_probe``, raw bytes)."""

    states: tuple[bytes, ...]
    error_before: bytes
    error_after: bytes
    moments_after: bytes
    probe: bytes = b""

    @property
    def links(self) -> int:
        """The inner steps n the chain commits to (states S_0 … S_n)."""
        return len(self.states) - 1


def encode_trailer(c: AuditCommitments, inner_steps: int) -> bytes:
    if not 2 <= len(c.states) <= inner_steps + 1:
        raise PayloadError(f"{len(c.states)} state hashes for {inner_steps} inner steps")
    ends = (c.error_before, c.error_after, c.moments_after)
    if any(len(h) != _HASH for h in (*c.states, *ends)):
        raise PayloadError("every commitment is a 32-byte hash")
    pad = bytes(_HASH * (inner_steps + 1 - len(c.states)))
    hashes = b"".join(c.states) + pad + b"".join(ends)
    return MAGIC + bytes([len(c.states)]) + hashes + c.probe


def decode_trailer(data: bytes, inner_steps: int, probe: int) -> AuditCommitments:
    """The commitments of a trailer of exactly :func:`trailer_bytes` bytes; ``PayloadError`` on
    anything but the canonical form."""
    size = trailer_bytes(inner_steps, probe)
    if len(data) != size:
        raise PayloadError(f"audit trailer has {len(data)} bytes, expected {size}")
    if data[: len(MAGIC)] != MAGIC:
        raise PayloadError("the result has no audit trailer, and this run verifies results")
    n = data[len(MAGIC)]
    if not 2 <= n <= inner_steps + 1:
        raise PayloadError(f"audit trailer names {n} states for {inner_steps} inner steps")
    at = len(MAGIC) + 1
    hashes = [data[at + i * _HASH : at + (i + 1) * _HASH] for i in range(inner_steps + 4)]
    if any(h != bytes(_HASH) for h in hashes[n : inner_steps + 1]):
        raise PayloadError("audit trailer: unused state slots must be zero")
    probe_at = at + (inner_steps + 4) * _HASH
    before, after, moments = hashes[-3:]
    return AuditCommitments(tuple(hashes[:n]), before, after, moments, data[probe_at:])

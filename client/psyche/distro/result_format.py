"""What the round engine needs to know about a run's result format, whichever optimizer made it.

A client downloads, checks and applies its peers' results without caring whether they are DisTrO
payloads or SparseLoCo ones; it needs only: the exact size bound to download against, a strict
decoder, the content fingerprint the copy check compares (what a result says, without its header,
so a replayed or relabelled copy has its original's fingerprint), the near-duplicate test, and
the keys the copy check's sketch is made of (``psyche.distro.copy_index``).
:class:`DistroFormat` and :class:`SparseLoCoFormat` are the two answers (docs/distro.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from psyche.distro import sparseloco_overlap
from psyche.distro.audit_probe import probe_bytes
from psyche.distro.audit_trailer import decode_trailer, trailer_bytes
from psyche.distro.compress import DistroResult
from psyche.distro.copy_index import CopyKeys, content_fingerprint, distro_keys
from psyche.distro.overlap import near_duplicate, signed_overlap
from psyche.distro.payload import Payload, PayloadError, PayloadSpec, decode_payload
from psyche.distro.sparseloco_payload import SparseLoCoPayload, SparseLoCoSettings
from psyche.distro.sparseloco_payload import decode_payload as decode_sparseloco
from psyche.distro.sparseloco_payload import max_payload_bytes as sparseloco_bytes

__all__ = [
    "DistroFormat",
    "ResultFormat",
    "SparseLoCoFormat",
    "distro_fingerprint",
    "sent_fingerprint",
]


class ResultFormat(Protocol):
    """A run's result wire format, as the round engine uses it."""

    @property
    def max_bytes(self) -> int:
        """No valid result is longer: the download bound, known before the run."""
        ...

    def decode(self, data: bytes) -> Any:
        """The decoded result; ``PayloadError`` on anything but a canonical one."""
        ...

    def fingerprint(self, decoded: Any) -> bytes:
        """SHA-256 of what the result says, its header (step, interval, nonce) left out."""
        ...

    def near_duplicate(self, a: Any, b: Any, ref: Any | None = None) -> bool:
        """Whether ``a`` is refused as a copy of ``b`` with a few entries changed; given ``ref``
        (another result of ``a``'s round), only if ``a`` is near ``b`` rather than near the
        round's results alike (``psyche.distro.overlap.CLOSER``)."""
        ...

    def overlap(self, a: Any, b: Any) -> float:
        """The share of ``a``'s chosen entries that ``b`` chose with the same sign."""
        ...

    def copy_keys(self, decoded: Any) -> CopyKeys | None:
        """The keys ``near_duplicate`` compares, for the copy check's sketch; None when
        ``near_duplicate`` is never true (only exact copies are refused)."""
        ...


def distro_fingerprint(payload: Payload) -> bytes:
    """Every tensor's indices (as int64), then every tensor's value signs (one byte each), in
    the payload's tensor order (docs/protocol.md, "Threat model and result verification")."""
    # One concatenation per kind and two hash updates: per-tensor updates (42 on the tiny
    # model) were a third of the hashing's cost; a run's fixed layout makes either order
    # unambiguous (issue 38).
    if not payload.results:
        return hashlib.sha256().digest()
    idx = torch.cat([r.idx.reshape(-1) for r in payload.results]).to(torch.int64)
    vals = torch.cat([r.val.reshape(-1) for r in payload.results]).float()
    return content_fingerprint(idx.numpy(), torch.signbit(vals).numpy())


def sent_fingerprint(payload: Payload) -> bytes:
    """`distro_fingerprint` of `payload` as a peer decodes it from the v2 wire: indices ascending
    within each tile, values following (`Distro.generate` orders them by magnitude), so a
    trainer can name its own previous result by what every peer holds."""
    ordered = []
    for r in payload.results:
        order = r.idx.argsort(dim=-1)
        ordered.append(
            DistroResult(r.idx.gather(-1, order), r.val.gather(-1, order), r.xshape, r.totalk)
        )
    return distro_fingerprint(dataclasses.replace(payload, results=tuple(ordered)))


@dataclass(frozen=True, slots=True)
class DistroFormat:
    """DisTrO payloads (``psyche.distro.payload``) of the layout ``spec``."""

    spec: PayloadSpec

    @property
    def max_bytes(self) -> int:
        return self.spec.max_bytes

    def decode(self, data: bytes) -> Payload:
        return decode_payload(data, self.spec)

    def fingerprint(self, decoded: Payload) -> bytes:
        return distro_fingerprint(decoded)

    def near_duplicate(self, a: Payload, b: Payload, ref: Payload | None = None) -> bool:
        return near_duplicate(a, b, ref)

    def overlap(self, a: Payload, b: Payload) -> float:
        return signed_overlap(a, b)

    def copy_keys(self, decoded: Payload) -> CopyKeys:
        return distro_keys(decoded)


@dataclass(frozen=True, slots=True)
class SparseLoCoFormat:
    """SparseLoCo payloads (``psyche.distro.sparseloco_payload``) for parameters of ``shapes``
    (canonical order). Every valid payload has exactly ``max_bytes`` bytes."""

    shapes: tuple[tuple[int, ...], ...]
    settings: SparseLoCoSettings
    audit_steps: int = 0
    """In a run that verifies, the run's ``inner_steps``: every result then ends in an audit
    trailer of that many links (``psyche.distro.audit_trailer``); 0: no trailer."""

    @classmethod
    def of(
        cls, shapes: Sequence[Sequence[int]], settings: SparseLoCoSettings, audit_steps: int = 0
    ) -> SparseLoCoFormat:
        return cls(tuple(tuple(int(d) for d in s) for s in shapes), settings, audit_steps)

    @property
    def payload_bytes(self) -> int:
        """The payload's size without its audit trailer."""
        return sparseloco_bytes(self.shapes, self.settings)

    @property
    def probe_bytes(self) -> int:
        """The audit trailer's probe of inner step 0 (``psyche.distro.audit_probe``)."""
        return probe_bytes(self.shapes)

    @property
    def max_bytes(self) -> int:
        trailer = trailer_bytes(self.audit_steps, self.probe_bytes) if self.audit_steps else 0
        return self.payload_bytes + trailer

    def decode(self, data: bytes) -> SparseLoCoPayload:
        if not self.audit_steps:
            return decode_sparseloco(data, self.shapes, self.settings)
        if len(data) != self.max_bytes:
            raise PayloadError(
                f"result has {len(data)} bytes, expected exactly {self.max_bytes} "
                "(payload and audit trailer)"
            )
        cut = self.payload_bytes
        payload = decode_sparseloco(data[:cut], self.shapes, self.settings)
        audit = decode_trailer(data[cut:], self.audit_steps, self.probe_bytes)
        return dataclasses.replace(payload, audit=audit)

    def fingerprint(self, decoded: SparseLoCoPayload) -> bytes:
        # Indices, signs and which level each entry uses, but not the scales: as for DisTrO,
        # a copy whose values were nudged keeps its original's fingerprint, and two honest
        # results never share every tensor's support and signs.
        h = hashlib.sha256()
        for t in decoded.tensors:
            for part in (t.indices, t.signs, t.mags):
                for arr in part:
                    h.update(arr.astype("<i8", copy=False).tobytes())
        return h.digest()

    def near_duplicate(
        self, a: SparseLoCoPayload, b: SparseLoCoPayload, ref: SparseLoCoPayload | None = None
    ) -> bool:
        # DisTrO's rule on the kept entries (psyche.distro.sparseloco_overlap).
        return sparseloco_overlap.near_duplicate(a, b, self.shapes, self.settings, ref)

    def overlap(self, a: SparseLoCoPayload, b: SparseLoCoPayload) -> float:
        return sparseloco_overlap.signed_overlap(a, b, self.shapes, self.settings)

    def copy_keys(self, decoded: SparseLoCoPayload) -> CopyKeys:
        return sparseloco_overlap.copy_keys(decoded, self.shapes, self.settings)

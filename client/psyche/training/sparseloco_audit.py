"""Auditing a SparseLoCo round one inner step at a time (issue 39 item 2; the core: the wire
format is ``psyche.distro.audit_trailer``, the verifier ``psyche.daemon.sparseloco_verifying``;
docs/protocol.md, "SparseLoCo: the inner-step audit").

A SparseLoCo result is H inner AdamW steps from the trainer's private moments, so nobody can
recompute it from public data, and a public loss test cannot tell a free rider from an honest
trainer (bench/README.md, "does a loss test on public data tell?"). What makes it checkable is a
**chain of commitments**: before each inner step j and after the last, the trainer hashes its
inner state S_j — weights, both AdamW moments and the step count, in canonical order
(:func:`encode_state`) — and the round's result carries the H + 1 hashes. S_0's weights are the
round's public start weights; S_H's weights are what the payload was encoded from. A verifier
picks one link j from a seed nobody controls, fetches S_j and S_{j+1} (hash-checked against
the commitments), takes inner step j itself on the j-th inner batch of the trainer's assigned
samples (:func:`replay_link`), and compares its S'_{j+1} with the committed S_{j+1}.

A trainer that skips samples in any step must commit, for that step, either a state its own
shortcut produced (the replay then lands far from it) or the honest next state (which needs the
honest gradient, i.e. the work). So every cheating link is caught when it is drawn: a free rider
that cheats in every step is caught by one audit, one that cheats in c of H steps with
probability c/H per audit. An honest replay on another thread count or kernel set differs only by
rounding, which one step does not amplify much; :data:`TOLERANCE` is calibrated by
``bench/sparseloco_audit.py`` (the honest error is measured across thread counts, the cheaters'
beside it).

Cost to the verifier: one inner step (1/H of the trainer's compute for the round) and two
states, each three model-sized tensors' worth of bytes; to the trainer: H + 1 hashes of that
size per round and the states kept until the round's audits are over.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import blake3
import numpy as np
import torch

from psyche.distro.audit_probe import Probe
from psyche.distro.payload import PayloadError
from psyche.distro.sparseloco import SparseLoCoState, decode_payload, encode_round
from psyche.distro.sparseloco_payload import SparseLoCoSettings
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import audit_files
from psyche.training.audit_compare import TOLERANCE, LinkVerdict, compare_states
from psyche.training.sparseloco_probe import Sampled, probe_of, sample_at

__all__ = [
    "ERROR_MAGIC",
    "MOMENTS_MAGIC",
    "STATE_MAGIC",
    "TOLERANCE",
    "AuditError",
    "AuditTrail",
    "Audited",
    "LinkVerdict",
    "capture_state",
    "decode_error",
    "decode_state",
    "encode_error",
    "encode_moments",
    "encode_state",
    "inner_batches",
    "link_for",
    "load_state",
    "moments_hash",
    "replay_encode",
    "replay_link",
    "state_hash",
    "state_size",
]

STATE_MAGIC = b"psyche-sparseloco-inner-state-v2\0\0\0\0"
"""The first bytes of a state blob (:func:`encode_state`); 36, so the values are 4-byte aligned."""
ERROR_MAGIC = b"psyche-sparseloco-error-buffers-v2\0\0"
"""The first bytes of an error-buffers blob (:func:`encode_error`)."""
MOMENTS_MAGIC = b"psyche-sparseloco-inner-moments-v1\0\0"
"""The first bytes of a moments blob (:func:`encode_moments`): S_0's, whose weights are the
round's public start weights, and the preimage of the commitment to the moments after a round."""


class AuditError(ValueError):
    """A state blob that is malformed or does not match its commitment: the trainer's fault."""


def inner_batches(batch: torch.Tensor, inner_steps: int) -> list[torch.Tensor]:
    """The round's inner batches, exactly as :meth:`SparseLoCoTrainer.train_round` splits them."""
    return [p for p in torch.tensor_split(batch, inner_steps) if p.shape[0] > 0]


def link_for(seed: bytes, links: int) -> int:
    """The link a verifier replays, from a seed fixed after the commitments (e.g. the round's
    random seed with the trainer's and verifier's ids): uniform over ``links``."""
    if links < 1:
        raise ValueError(f"need at least one link, got {links}")
    return int.from_bytes(hashlib.sha256(b"sparseloco-audit" + seed).digest()[:8], "big") % links


def capture_state(
    params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer, *, copy: bool = True
) -> dict[str, torch.Tensor]:
    """The inner state in canonical order: ``w.i`` weights, ``m.i``/``v.i`` AdamW moments and
    ``t.i`` step counts (zeros for a parameter AdamW has not stepped yet: the same state).
    ``copy=False`` may return the live CPU float32 tensors themselves, for a caller that
    serializes them before the next step (a third of what recording a state cost)."""
    out: dict[str, torch.Tensor] = {}
    for i, p in enumerate(params):
        st = optimizer.state.get(p, {})
        w = p.detach().to("cpu", torch.float32, copy=copy).contiguous()
        out[f"w.{i}"] = w
        out[f"m.{i}"] = _tensor_or_zeros(st.get("exp_avg"), w, copy)
        out[f"v.{i}"] = _tensor_or_zeros(st.get("exp_avg_sq"), w, copy)
        step = st.get("step")
        out[f"t.{i}"] = torch.tensor(float(step) if step is not None else 0.0, dtype=torch.float32)
    return out


def _tensor_or_zeros(t: torch.Tensor | None, like: torch.Tensor, copy: bool) -> torch.Tensor:
    if t is None:
        return torch.zeros_like(like)
    return t.detach().to("cpu", torch.float32, copy=copy).contiguous()


def encode_state(state: dict[str, torch.Tensor]) -> bytes:
    """Canonical bytes of a captured state: :data:`STATE_MAGIC`, then per parameter i the
    little-endian float32 values of ``w.i``, ``m.i``, ``v.i`` and ``t.i``."""
    return b"".join(_pieces(STATE_MAGIC, _state_order(state)))


def _state_order(state: dict[str, torch.Tensor], keys: str = "wmvt") -> list[torch.Tensor]:
    n = sum(1 for k in state if k.startswith("t."))
    return [state[f"{k}.{i}"] for i in range(n) for k in keys]


def encode_moments(state: dict[str, torch.Tensor]) -> bytes:
    """Canonical bytes of a state's optimizer half: :data:`MOMENTS_MAGIC`, then per parameter i
    the little-endian float32 values of ``m.i``, ``v.i`` and ``t.i`` (no weights)."""
    return b"".join(_moment_pieces(state))


def moments_hash(state: dict[str, torch.Tensor]) -> bytes:
    """The commitment to a state's moments (:func:`encode_moments`): S_0's hash, and the one a
    result commits to after its round, which its trainer's next result must start from."""
    hasher = _COMMITMENT()
    for piece in _moment_pieces(state):
        hasher.update(piece)
    return hasher.digest()


def _moment_pieces(state: dict[str, torch.Tensor]) -> list[bytes | memoryview]:
    return _pieces(MOMENTS_MAGIC, _state_order(state, "mvt"))


def _pieces(magic: bytes, tensors: Sequence[torch.Tensor]) -> list[bytes | memoryview]:
    """A blob's bytes as views of the tensors' own memory (on a CPU), joined or streamed.
    Raw values, not safetensors: its encoder took longer than the SHA-256 of its output
    (12.9 against 10.1 ms per 14 MB state, most of what recording cost), and both ends know
    every shape from the model, so a header would only repeat it."""
    cpu = (t.detach().to("cpu", torch.float32).contiguous() for t in tensors)  # no-op on CPU
    values: list[bytes | memoryview] = [magic]
    values += [memoryview(t.numpy().astype("<f4", copy=False).data).cast("B") for t in cpu]
    return values


def state_hash(data: bytes) -> bytes:
    """The commitment to a blob: its BLAKE3 (one thread), also its P2P id. A trainer hashes
    H + 1 states and two error buffers a round; SHA-256 took ~10 ms per tiny-model state here,
    BLAKE3 ~2.5 (``bench/audit_record.py``)."""
    return _COMMITMENT(data).digest()


_COMMITMENT = blake3.blake3
"""The hash every commitment is (:func:`state_hash`, and ``audit_files.spool`` as it writes)."""


def _load_committed(
    data: bytes, commitment: bytes | None, what: str, magic: bytes, sizes: Sequence[int]
) -> list[torch.Tensor]:
    """``data``'s flat float32 tensors of ``sizes`` values, once its hash is the
    ``commitment`` (when one is given) and its length is exactly theirs."""
    if commitment is not None and state_hash(data) != commitment:
        raise AuditError(f"{what}: the bytes do not match the commitment")
    expected = len(magic) + 4 * sum(sizes)
    if not data.startswith(magic) or len(data) != expected:
        name = magic.rstrip(b"\0").decode()
        raise AuditError(f"{what}: not a {name} blob of {expected} bytes")
    values = np.frombuffer(data, dtype="<f4", offset=len(magic))
    # numpy's isfinite: torch's took 12.7 ms on a tiny state (one thread), numpy's 0.8.
    if not bool(np.isfinite(values).all()):
        raise AuditError(f"{what}: not finite")
    flat = torch.from_numpy(values.astype(np.float32))  # a writable copy, in native order
    return list(flat.split(list(sizes)))


def state_size(shapes: Sequence[Sequence[int]]) -> int:
    """An honest state blob's exact size for parameters of ``shapes`` (no error blob is
    larger): the magic, then three float32 tensors and a float32 count per parameter."""
    return len(STATE_MAGIC) + 4 * sum(_state_sizes(shapes))


def _state_sizes(shapes: Sequence[Sequence[int]], keys: str = "wmvt") -> list[int]:
    """Values per tensor in a state's canonical order: w, m, v and the step count, per
    parameter (or those of ``keys``)."""
    sizes: list[int] = []
    for shape in shapes:
        n = math.prod(shape)
        sizes += [1 if k == "t" else n for k in keys]
    return sizes


def decode_state(
    data: bytes,
    shapes: Sequence[tuple[int, ...]],
    commitment: bytes | None = None,
    *,
    start: Sequence[torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """A peer's state blob, checked against its commitment and strictly against ``shapes``.
    With ``start`` (the round's public start weights) it is S_0: a moments blob
    (:func:`encode_moments`) whose weights are ``start``'s."""
    if start is None:
        sizes, magic, what, keys = _state_sizes(shapes), STATE_MAGIC, "the state", "wmv"
    else:
        sizes, magic, what, keys = _state_sizes(shapes, "mvt"), MOMENTS_MAGIC, "S_0", "mv"
    parts = iter(_load_committed(data, commitment, what, magic, sizes))
    state: dict[str, torch.Tensor] = {}
    for i, shape in enumerate(shapes):
        if start is not None:
            state[f"w.{i}"] = start[i].detach().to("cpu", torch.float32, copy=True).view(shape)
        for k in keys:
            state[f"{k}.{i}"] = next(parts).view(shape)
        state[f"t.{i}"] = next(parts).view(())
    return state


def encode_error(error: Sequence[torch.Tensor]) -> bytes:
    """Canonical bytes of the error-feedback buffers: :data:`ERROR_MAGIC`, then each ``e.i``'s
    little-endian float32 values in order."""
    return b"".join(_pieces(ERROR_MAGIC, error))


def decode_error(
    data: bytes, numels: Sequence[int], commitment: bytes | None = None
) -> list[torch.Tensor]:
    """A peer's error buffers, checked against the commitment and strictly against ``numels``."""
    return _load_committed(data, commitment, "the error buffers", ERROR_MAGIC, numels)


@dataclass
class AuditTrail:
    """What a trainer records during a round: the H + 1 inner-state hashes and the error
    buffers' hashes before and after the round, which it commits to, and the blobs themselves
    while ``keep`` (a verifier fetches two or three of them).

    Kept blobs are held in memory (``states``, ``errors``), or with a ``spool`` directory
    written there as they are hashed, one file each (``files``, by hash): a round's chain is
    (H + 1) × 12 + 8 bytes per parameter, which a client serving it from its P2P blob
    directory then holds once instead of also in its heap, and the publish writes nothing.
    Whoever holds the trail owns its files until it hands them on (:meth:`discard`)."""

    keep: bool = True
    spool: Path | None = None
    hashes: list[bytes] = field(default_factory=list)
    states: list[bytes] = field(default_factory=list)
    error_hashes: list[bytes] = field(default_factory=list)
    errors: list[bytes] = field(default_factory=list)
    files: dict[bytes, Path] = field(default_factory=dict)
    """The kept blobs' files by their hash (with a ``spool``)."""
    pool: Path | None = None
    """Withdrawn chains' files (``Transport.recycle_dir``), written over instead of new files
    with a ``spool`` (``psyche.training.audit_files``), and where this trail's go when discarded."""
    probe_at: Sequence[np.ndarray] | None = None
    """The positions of inner step 0's probe (``audit_probe.probe_positions``), or None for no
    probe: the first two states recorded are also sampled there (:meth:`probe`)."""
    probed: list[list[Sampled]] = field(default_factory=list)
    moments_after: bytes = b""
    """:func:`moments_hash` of the last state: where the trainer's next round's S_0 must start."""
    cpu_s: float = 0.0
    """CPU seconds the recording took on the calling thread: what auditing costs the trainer
    (``bench/sparseloco_audit_wire.py`` reads it; two whole rounds' difference is noisier)."""

    def record(
        self,
        params: Sequence[torch.Tensor],
        optimizer: torch.optim.Optimizer,
        *,
        last: bool = False,
    ) -> None:
        """The state before the next inner step, or with ``last`` after the last one. S_0 is
        kept as its moments alone (its weights are the round's public start weights); after the
        last step the moments' own hash is noted too (:attr:`moments_after`)."""
        t0 = time.thread_time()
        if self.probe_at is not None and len(self.hashes) < 2:
            self.probed.append(sample_at(params, optimizer, self.probe_at))
        captured = capture_state(params, optimizer, copy=False)
        if not self.hashes:
            pieces = _moment_pieces(captured)
        else:
            pieces = _pieces(STATE_MAGIC, _state_order(captured))
        self.hashes.append(self._keep(pieces, self.states))
        if last:
            self.moments_after = moments_hash(captured)
        self.cpu_s += time.thread_time() - t0

    def record_error(self, error: Sequence[torch.Tensor]) -> None:
        t0 = time.thread_time()
        self.error_hashes.append(self._keep(_pieces(ERROR_MAGIC, error), self.errors))
        self.cpu_s += time.thread_time() - t0

    def _keep(self, pieces: list[bytes | memoryview], held: list[bytes]) -> bytes:
        if not self.keep:
            return state_hash(b"".join(pieces))
        if self.spool is None:
            data = b"".join(pieces)
            held.append(data)
            return state_hash(data)
        digest, path = audit_files.spool(self.spool, pieces, _COMMITMENT(), self.pool)
        if digest in self.files:  # the same bytes twice: one file serves both
            audit_files.recycle(path, self.pool)
        else:
            self.files[digest] = path
        return digest

    def probe(self) -> Probe:
        """Inner step 0 at the probed positions (after at least one inner step was recorded)."""
        return probe_of(self.probed[0], self.probed[1])

    def kept(self) -> list[tuple[bytes, bytes | Path]]:
        """Every kept blob with its hash: its bytes, or its file with a ``spool``."""
        if self.spool is not None:
            return list(self.files.items())
        hashes, blobs = (*self.hashes, *self.error_hashes), (*self.states, *self.errors)
        return list(zip(hashes, blobs, strict=True))

    def read(self, blob_hash: bytes) -> bytes:
        """A kept blob's bytes by its hash (KeyError if none)."""
        blob = dict(self.kept())[blob_hash]
        return blob if isinstance(blob, bytes) else blob.read_bytes()

    def discard(self) -> None:
        """Give up the files this trail still owns (a chain that will not be served): into the
        ``pool``, or deleted without one."""
        for path in self.files.values():
            audit_files.recycle(path, self.pool)
        self.files.clear()

    def close(self) -> None:
        """The chain is recorded: delete what it did not reuse of the ``pool``."""
        audit_files.trim(self.pool)

    @property
    def links(self) -> int:
        """H inner-step links and the encode link (:func:`replay_encode`)."""
        return len(self.hashes)


class Audited(Protocol):
    """What a link's replay needs of the verifier's trainer (a SparseLoCoTrainer)."""

    @property
    def params(self) -> Sequence[torch.Tensor]: ...
    @property
    def shapes(self) -> Sequence[tuple[int, ...]]: ...
    @property
    def settings(self) -> SparseLoCoSettings: ...
    @property
    def config(self) -> SparseLoCoOptimizer: ...

    def replay_inner_step(
        self, before: dict[str, torch.Tensor], part: torch.Tensor, lr: float
    ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor | None]]: ...


def replay_link(
    trainer: Audited,
    link: int,
    before: dict[str, torch.Tensor],
    after: dict[str, torch.Tensor],
    part: torch.Tensor,
    lr: float,
) -> LinkVerdict:
    """Take inner step ``link`` from the committed ``before`` on ``part`` (the link's inner batch)
    at the round's ``lr`` with the verifier's own ``trainer`` (whose weights and own inner state
    are put back exactly), and measure how far the committed ``after`` is from the result."""
    replayed, grads = trainer.replay_inner_step(before, part, lr)
    dtype = trainer.params[0].dtype
    c = trainer.config
    return compare_states(link, before, replayed, after, grads, c.betas, dtype, c.clip_grad_norm)


def load_state(
    params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer, state: dict[str, torch.Tensor]
) -> None:
    """Put a decoded state into ``params`` and a fresh ``optimizer`` (AdamW)."""
    with torch.no_grad():
        for i, p in enumerate(params):
            p.copy_(state[f"w.{i}"].to(p.device, p.dtype))
            step = float(state[f"t.{i}"])
            if step == 0.0:
                continue  # never stepped: AdamW's fresh state, which it builds itself
            optimizer.state[p] = {
                "step": torch.tensor(step, dtype=torch.float32),
                "exp_avg": state[f"m.{i}"].to(p.device, p.dtype).clone(),
                "exp_avg_sq": state[f"v.{i}"].to(p.device, p.dtype).clone(),
            }


def replay_encode(
    trainer: Audited,
    error_before: Sequence[torch.Tensor],
    last: dict[str, torch.Tensor],
    payload: bytes,
    error_after: Sequence[torch.Tensor],
) -> bool:
    """The encode link: from the committed error buffers before the round, the round's public
    start weights (the verifier's own) and the committed last state's weights, the payload and
    the error buffers after it must come out **exactly** (``encode_round`` is elementwise IEEE
    arithmetic and a top-k: the same bits on every thread count and kernel set)."""
    try:
        claimed = decode_payload(payload, trainer.shapes, trainer.settings)
    except PayloadError:
        return False
    state = SparseLoCoState(trainer.shapes, trainer.settings)
    state.error = [e.clone() for e in error_before]
    start = [p.detach().to("cpu") for p in trainer.params]
    end = [last[f"w.{i}"] for i in range(len(start))]
    try:
        again = encode_round(state, start, end, step=claimed.step, nonce=claimed.trainer_nonce)
    except PayloadError:
        return False
    return again == payload and all(
        torch.equal(a, b) for a, b in zip(state.error, error_after, strict=True)
    )

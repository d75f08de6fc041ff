"""The defence of `bench/byzantine.py --optimizer sparseloco --verify VP`: the copy check and the
inner-step audit (docs/protocol.md, "SparseLoCo: the inner-step audit"), as the product applies
them, on the bench's SparseLoCo clients (`bench/byzantine_sparseloco.py`).

- **Commitments.** Every client records its round's chain as the product's trainer does
  (`psyche.training.sparseloco_audit.AuditTrail`: the inner state S_j before each inner step and
  after the last, the error buffers before and after the encode, hashed, blobs kept). Attackers
  commit to what they did: a free rider's chain is its real cheap chain (its states from the
  samples it trained on), a sign-flipper's, copier's or replayer's its honest chain (the payload
  is then not that chain's encoding), `reset`'s its honest work from zeroed error buffers.
- **Copy check**, on arrival (every honest client, the product's `SparseLoCoFormat`): a result
  whose fingerprint is that of a result held from this round or the previous one, or that
  `near_duplicate`s one, is refused (as is one that does not decode strictly): left out, no
  point, and the trainer ejected from the next round on (the next round's health check).
- **Continuity on arrival** (every honest client, `psyche.daemon.chain_check`): a result whose
  committed error buffers before the round are not those its trainer's result of the previous
  round, as it arrived, committed to after it is refused the same way.
- **Audit**, after the round's results are in and before its apply (the bench applies a round
  at its end; the product two rounds on, with the verdict in time for it): the protocol's
  sampling (`sampled_trainers`, a seed per round) picks ⌈K·VP/100⌉ results; three verifiers (the
  first three not-ejected clients of a seed shuffle) audit each, nobody itself, an attacker
  votes match. An honest verifier does what `psyche.daemon.sparseloco_verifying` does: the
  continuity check (the trainer's error buffers before the round must be those after its
  previous round, when that result was applied), then, for one inner step j drawn from the
  round's seed, the slot and the trainer (the same for every verifier), the hash-checked states
  (`decode_state`/`decode_error`), S_0 = its moments on the round's start weights when j = 0, the
  encode link exact (`replay_encode`) and inner step j replayed within `TOLERANCE`
  (`replay_link`, with the product's `SparseLoCoTrainer` as the verifier's trainer, on the
  trainer's real samples split by `inner_batches`, at step j's LR: the bench's inner steps follow
  the cosine per step, the product's use the round's). A majority (≥ 2 votes) rejects: the
  result is left out of its apply, no point, and the trainer sends nothing from the next round on.

Recorded in the run's `RunResult`: `ejected_at` (the round, 1-based, from which it sends
nothing: caught in round r of 0…R−1 → r + 1), `points` (applied results), `honest_votes` and
`false_positives` (honest verifiers' audits of honest results, and mismatch votes among them;
an honest result refused by the copy check counts as one too), `verify_fwd_bwd_s` (the honest
verifiers' whole audits: decoding and hashing the states, both replays), `record_s` (the
trainers' chain recording), and `audit_findings` (per audit, the first check that failed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

VERIFIERS = 3


def optimizer_config(h: int, outer_lr: float) -> Any:
    """The bench's SparseLoCo as the run config's optimizer (what the verifier's trainer uses)."""
    from psyche.protocol.optimizers import SparseLoCoOptimizer

    return SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8, clip_grad_norm=1.0, inner_steps=h,
        outer_lr=outer_lr, outer_momentum=0.0, topk_chunk=4096, topk=32, value_bits=2,
        error_decay=0.95,
    )  # fmt: skip


@dataclass(slots=True)
class Sent:
    """One client's result of a round: what it sent (decoded, strictly), its bytes and its
    committed chain (None when the run does not verify)."""

    payload: Any
    wire: bytes
    trail: Any


class Defence:
    """The copy check and the audit of one SparseLoCo run (module docstring)."""

    def __init__(self, cfg: Any, ws: Any, args: Any, vp: int, attackers: set[int], out: Any,
                 data: Any) -> None:  # fmt: skip
        import torch

        import distro_vs_adamw as base
        from psyche.distro.result_format import SparseLoCoFormat
        from psyche.training.sparseloco_trainer import SparseLoCoTrainer

        self.cfg, self.args, self.vp, self.attackers, self.out = cfg, args, vp, attackers, out
        self.data, self.h = data, args.inner_steps
        self.assign: Any = None
        """The run's `byzantine_data.Assignment` (who trained which samples), set by the run."""
        self.schedule = cfg.schedule(args.lr_inner)
        # The product's trainer seeds torch and asks for deterministic kernels on construction;
        # put both back so that the clients train exactly as in the undefended runs.
        det, warn = (
            torch.are_deterministic_algorithms_enabled(),
            (torch.is_deterministic_algorithms_warn_only_enabled()),
        )
        rng = torch.get_rng_state()
        # One micro-batch however large a client's slice (the bench's trainers run each inner
        # batch in one forward, so the replay repeats it exactly, float order included).
        self.verifier = SparseLoCoTrainer(base.load(ws), optimizer_config(self.h, args.outer_lr),
                                          micro_batch_size=cfg.global_batch)  # fmt: skip
        torch.use_deterministic_algorithms(det, warn_only=warn)
        torch.set_rng_state(rng)
        self.fmt = SparseLoCoFormat.of(self.verifier.shapes, self.verifier.settings)
        self.numels = [int(p.numel()) for p in self.verifier.params]
        self.ejected: set[int] = set()
        self.after: dict[int, tuple[bytes, bytes]] = {}
        """A trainer's committed error-buffer hash after its last applied result."""
        self.held: dict[int, list[tuple[bytes, Any]]] = {}
        """Per round, the (fingerprint, payload) of every result accepted."""
        self.arrived_after: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        """(round, trainer): the error-buffer and moments hashes after its result as it arrived
        (held or refused)."""

    def record(self, trail: Any, params: Any, inner: Any, *, last: bool = False) -> None:
        t = time.perf_counter()
        trail.record(params, inner, last=last)
        self.out.record_s += time.perf_counter() - t

    def record_error(self, trail: Any, error: Any) -> None:
        t = time.perf_counter()
        trail.record_error(error)
        self.out.record_s += time.perf_counter() - t

    def arrive(self, rnd: int, i: int, payload: Any, trail: Any = None) -> Sent | None:
        """Client `i`'s result as every honest client receives it: strictly decoded,
        copy-checked and, with its committed chain `trail`, checked for continuity against its
        previous round's result as `psyche.daemon.chain_check` does; None (refused, the trainer
        ejected next round) otherwise."""
        from psyche.distro.payload import PayloadError
        from psyche.distro.sparseloco_payload import encode_payload

        try:
            wire = encode_payload(payload, self.fmt.shapes, self.fmt.settings)
            decoded = self.fmt.decode(wire)
        except PayloadError:
            self._refused(rnd, i, "malformed")
            return None
        before = self.arrived_after.get((rnd - 1, i))
        if trail is not None:
            # Noted held or refused, as `chain_check` notes every result that decodes.
            self.arrived_after[(rnd, i)] = (trail.error_hashes[1], trail.moments_after)
            self.arrived_after.pop((rnd - 2, i), None)
        if trail is not None and before not in (None, (trail.error_hashes[0], trail.hashes[0])):
            self._refused(rnd, i, "continuity")
            return None
        fp = self.fmt.fingerprint(decoded)
        recent = self.held.get(rnd, []) + self.held.get(rnd - 1, [])
        if any(fp == f or self.fmt.near_duplicate(decoded, p) for f, p in recent):
            self._refused(rnd, i, "copy")
            return None
        self.held.setdefault(rnd, []).append((fp, decoded))
        self.held.pop(rnd - 2, None)
        return Sent(decoded, wire, None)

    def _refused(self, rnd: int, i: int, why: str) -> None:
        who = "attacker" if i in self.attackers else "honest"
        self._found(who, f"refused ({why})")
        if i not in self.attackers:
            self.out.false_positives += 1
        if i not in self.ejected:
            self.ejected.add(i)
            self.out.ejected_at[i] = rnd + 1

    def _found(self, who: str, what: str) -> None:
        key = f"{who}: {what}"
        self.out.audit_findings[key] = self.out.audit_findings.get(key, 0) + 1

    def judge(self, rnd: int, start: list[Any], sent: dict[int, Sent]) -> set[int]:
        """Audit round `rnd`'s sampled results (the verifier's weights set to `start`, the
        round's start weights); the trainers rejected, each then ejected."""
        import torch

        from psyche.coordinator.verification import sampled_trainers
        from psyche.protocol.commitment import sha256
        from psyche.protocol.shuffle import compute_shuffled_index

        if not self.vp:
            return set()
        k = self.cfg.clients
        tag = b"-%d" % self.args.seed if self.args.seed else b""
        seed = sha256(b"byzantine-sparseloco-%d" % rnd + tag)
        vseed = sha256(b"byzantine-sparseloco-verifiers-%d" % rnd + tag)
        order = sorted(range(k), key=lambda i: compute_shuffled_index(i, k, vseed))
        verifiers = [i for i in order if i not in self.ejected][:VERIFIERS]
        with torch.no_grad():
            for p, s in zip(self.verifier.params, start, strict=True):
                p.copy_(s)
        rejected = set()
        for slot, trainer in enumerate(sampled_trainers(k, int.from_bytes(seed[:8], "little"),
                                                        self.vp)):  # fmt: skip
            if trainer not in sent:
                continue  # ejected, or refused on arrival: not held, nothing to audit
            voters = [v for v in verifiers if v != trainer]
            honest = [v for v in voters if v not in self.attackers]
            bad = trainer in self.attackers
            against = 0
            for v in honest:  # each honest verifier audits on its own (the same link)
                t = time.perf_counter()
                ok, what, err = self.audit(rnd, seed, slot, trainer, sent[trainer])
                self.out.verify_fwd_bwd_s += time.perf_counter() - t
                self._found("attacker" if bad else "honest", what)
                against += 0 if ok else 1
                if err is not None:
                    (self.out.attacker_scores if bad else self.out.honest_scores).append(err)
                self.out.votes.append(
                    (rnd, trainer, v, bad, round(-1.0 if err is None else err, 6))
                )
                if not bad:
                    self.out.honest_votes += 1
                    self.out.false_positives += 0 if ok else 1
            if against >= len(verifiers) // 2 + 1 and against >= min(2, len(voters)):
                rejected.add(trainer)
                if trainer not in self.ejected:
                    self.ejected.add(trainer)
                    self.out.ejected_at[trainer] = rnd + 1
        return rejected

    def audit(self, rnd: int, seed: bytes, slot: int, trainer: int, s: Sent
              ) -> tuple[bool, str, float | None]:  # fmt: skip
        """One honest verifier's audit of `trainer`'s result (`psyche.daemon.sparseloco_verifying`
        `judge_sparseloco`'s continuity check and `audit_link`, on the bench's data and per-step
        LR): (match, the first check that failed or "pass", the inner-step link's error)."""
        from psyche.training import lr_for_step
        from psyche.training import sparseloco_audit as sa

        trail = s.trail
        prev = self.after.get(trainer)
        if prev is not None and prev != (trail.error_hashes[0], trail.hashes[0]):
            return False, "continuity", None
        n = len(trail.hashes) - 1
        link = sa.link_for(seed + slot.to_bytes(2, "little") + trainer.to_bytes(2, "little"), n)
        shapes = list(self.verifier.shapes)
        t = time.perf_counter()
        try:
            start = self.verifier.params if link == 0 else None
            before = sa.decode_state(trail.states[link], shapes, trail.hashes[link], start=start)
            after = sa.decode_state(trail.states[link + 1], shapes, trail.hashes[link + 1])
            last = after if link + 1 == n else sa.decode_state(trail.states[n], shapes,
                                                               trail.hashes[n])  # fmt: skip
            if sa.moments_hash(last) != trail.moments_after:
                return False, "moments after", None
            e0, e1 = (sa.decode_error(d, self.numels, c)
                      for d, c in zip(trail.errors, trail.error_hashes, strict=True))  # fmt: skip
        except sa.AuditError:
            return False, "bad blob", None
        t = self._spent("states: hash and decode", t)
        encoded = sa.replay_encode(self.verifier, e0, last, s.wire, e1)
        t = self._spent("encode link", t)
        if not encoded:
            return False, "encode link", None
        # The bench's inner steps each have their own slice (a retry makes one larger than
        # the others), so the replayed step reads its own rather than an even split.
        steps = range(rnd * self.h, (rnd + 1) * self.h)
        parts = [self.data.get_samples(self.assign.of_step(st)[trainer]) for st in steps]
        if len(parts) != n:
            return False, "inner step count", None
        lr = lr_for_step(self.schedule, rnd * self.h + link)
        v = sa.replay_link(self.verifier, link, before, after, parts[link], lr)
        self._spent("inner step", t)
        err = max(v.weight_error, v.moment_error)
        return v.ok, "pass" if v.ok else "inner step", err

    def _spent(self, what: str, since: float) -> float:
        now = time.perf_counter()
        self.out.audit_seconds[what] = self.out.audit_seconds.get(what, 0.0) + now - since
        return now

    def applied(self, kept: dict[int, Sent]) -> None:
        """The round's applied results: their error buffers after are the next round's check."""
        for i, s in kept.items():
            if s.trail is not None:
                self.after[i] = (s.trail.error_hashes[1], s.trail.moments_after)

"""The DisTrO arm of `bench/byzantine.py` (the default `--optimizer`): one run of K clients, some
attacking, under the defence of `--verify VP` (the method is in byzantine.py's docstring).

One `DistroAttackRun` holds a run's state (the clients, what each step sent, the held results
for the copy check, who is ejected) and takes its steps; `run` is the whole of it. Split out of
byzantine.py (713 lines, a 330-line function of closures), the arithmetic unchanged.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import torch

import byzantine_attacks as cheap  # beside this file, not a package
import byzantine_commit as bc
import byzantine_data as bd
import distro_vs_adamw as base
from psyche.coordinator.verification import sampled_trainers
from psyche.daemon.commit_check import MISMATCH
from psyche.daemon.rounds import result_fingerprint
from psyche.data.local import LocalDataProvider
from psyche.distro import (
    Distro,
    DistroResult,
    Payload,
    aggregate,
    decode_payload,
    decode_sign,
    encode_payload,
    sign_values,
)
from psyche.distro.agreement import opposed
from psyche.distro.overlap import near_duplicate, repeated_tensors, signed_overlap
from psyche.distro.sample_commit import MATCH_THRESHOLD
from psyche.distro.similarity import THRESHOLD, Score, score, verdict_on
from psyche.protocol.commitment import sha256
from psyche.protocol.shuffle import compute_shuffled_index
from psyche.training import lr_for_step, prev_lr_for_step

__all__ = ["PUSHED", "DistroAttackRun", "run", "sum_apply"]

PUSHED = "model.embed_tokens.weight"
"""The matrix the `push` attack replaces."""


def run(cfg: Any, ws: Any, args: argparse.Namespace, attack: str, out: Any) -> Any:
    """The whole run; its figures in ``out`` (byzantine.py's `RunResult`), returned."""
    return DistroAttackRun(cfg, ws, args, attack, out).run()


class DistroAttackRun:
    """One run's clients and bookkeeping (see the module docstring)."""

    def __init__(self, cfg: Any, ws: Any, args: argparse.Namespace, attack: str, out: Any) -> None:
        self.cfg, self.ws, self.args, self.attack, self.out = cfg, ws, args, attack, out
        self.vp, self.aggregation = out.verify, out.aggregation
        k = self.k = cfg.clients
        self.attackers = set(range(k - args.attackers, k)) if attack != "none" else set()
        self.data = LocalDataProvider(ws.data_dir, cfg.seq_len)
        dcfg = base.distro_config(cfg)
        self.clients = []
        for _ in range(k):
            model = base.load(ws)
            distro = Distro(model.named_parameters(), dcfg, commitments=args.commitments)
            self.clients.append(base.Client(model, distro))
        self.verifier_model = base.load(ws)
        self.committing = {i: bc.committing_trainer(c, cfg.seed)
                           for i, c in enumerate(self.clients) if args.commitments}  # fmt: skip
        for t in self.committing.values():
            t.verifiable_lookahead = not args.private_lookahead
        self.commit = (
            bc.CommitVerifier(self.verifier_model, dcfg, cfg.seed) if args.commitments else None
        )
        self.trainers = {i: self.committing.get(i) or cheap.trainer_for(self.clients[i],
                                                                        cfg.batch_per_client,
                                                                        cfg.seed)
                         for i in self.attackers if attack in cheap.TRAINER_ATTACKS}  # fmt: skip
        self.spec = self.clients[0].distro.payload_spec
        self.names = self.clients[0].distro.names
        self.schedule = cfg.schedule(cfg.lr_distro)
        self.gen = torch.Generator().manual_seed(cfg.seed + 7)
        self.pending: dict[int, list[tuple[int, Payload]]] = {}
        self.rejected: dict[int, set[int]] = {}
        self.ejected: set[int] = set()
        # `--fixed-slices`: every client keeps its slice of the global batch, an ejected one's
        # untrained (the benches before the protocol's reassignment was modelled).
        self.assign = bd.Assignment(k, cfg.global_batch, set() if args.fixed_slices else
                                    self.ejected, retries=not args.fixed_slices)  # fmt: skip
        self.last_sent: dict[int, Payload] = {}
        self.pushed: Payload | None = None
        self.seen: dict[int, set[bytes]] = {}
        self.held: dict[int, list[tuple[int, Payload]]] = {}
        self.step_tokens: dict[int, dict[int, torch.Tensor]] = {}
        self.step_pre: dict[int, list[torch.Tensor]] = {}
        self.vparams = [p for _, p in sorted(self.verifier_model.named_parameters())]

    # --- the run ---------------------------------------------------------------------------

    def run(self) -> Any:
        for step in range(self.cfg.steps):
            self.step(step)
        for s in sorted(self.pending):  # drain: the last steps land before the final evaluation
            keep = [(i, p) for i, p in self.pending[s] if i not in self.rejected.get(s, ())]
            for i, _ in keep:
                self.out.points[i] = self.out.points.get(i, 0) + 1
            self.apply(self.agreeing(s, keep), lr_for_step(self.schedule, s + 2))
        base._check_agreement(self.clients)
        self.out.retried_samples = self.assign.retried
        self.out.final_val = base.evaluate(self.clients[0].model, self.ws.val)
        return self.out

    def step(self, step: int) -> None:
        """Apply step − 2's results, train and send this step's, judge step − 1's."""
        lr, prev_lr = lr_for_step(self.schedule, step), prev_lr_for_step(self.schedule, step)
        applied_now: list[Payload] = []
        if step - 2 in self.pending:
            keep = [(i, p) for i, p in self.pending.pop(step - 2)
                    if i not in self.rejected.get(step - 2, ())]  # fmt: skip
            for i, _ in keep:
                self.out.points[i] = self.out.points.get(i, 0) + 1
            applied_now = self.agreeing(step - 2, keep)
            self.apply(applied_now, lr)
        pre = [p.detach().clone() for _, p in sorted(self.clients[0].model.named_parameters())]
        sent: list[tuple[int, Payload]] = []
        slices = self.assign.of_step(step)
        tokens = {i: self.data.get_samples(b) for i, b in slices.items()}
        for i, batch in slices.items():
            wire = self.train(i, tokens[i], batch, step, lr, prev_lr)
            if i in self.ejected:
                continue
            if i in self.attackers and i not in self.trainers:
                wire = self.attacked(i, wire, sent, applied_now)
            self.send(step, i, wire, sent, lr > 0 and prev_lr > 0)
        self.pending[step] = sent
        if self.vp and step >= 1 and step - 1 in self.pending:
            self.verify_round(step)
        self.step_tokens[step], self.step_pre[step] = tokens, pre
        self.step_tokens.pop(step - 2, None)
        self.step_pre.pop(step - 2, None)
        self.held.pop(step - 2, None)

    def train(
        self, i: int, toks: torch.Tensor, batch: Any, step: int, lr: float, prev_lr: float
    ) -> Payload:
        """Client ``i``'s result of ``step`` as it leaves the client (before any tampering)."""
        c = self.clients[i]
        if i in self.attackers and self.attack == "garbage":
            toks = torch.randint(0, 256, toks.shape, generator=self.gen)
        t = time.perf_counter()
        if i in self.trainers:  # a cheaper-work attacker: the real Trainer on less or worse data
            _, wire = cheap.train_cheaply(self.attack, self.trainers[i], c, toks, batch, step, lr,
                                          prev_lr)  # fmt: skip
            wire = bc.faked_commitments(wire, toks.shape[0])
        elif self.committing:  # a client of a verifying run: the Trainer, committing
            _, wire = cheap.train_cheaply("none", self.committing[i], c, toks, batch, step, lr,
                                          prev_lr)  # fmt: skip
        else:
            c.model.zero_grad(set_to_none=True)
            c.distro.lookahead(prev_lr)
            base.forward_backward(c.model, toks, 1.0)
            payload = c.distro.generate(
                lr, prev_lr, c.prev_self, step=step, batch_start=batch.start,
                batch_end=batch.end, trainer_nonce=c.nonce,
            )  # fmt: skip
            c.prev_self, c.nonce = payload, c.nonce + 1
            wire = decode_payload(encode_payload(payload, 2), self.spec)
        self.out.train_fwd_bwd_s += time.perf_counter() - t
        return wire

    def attacked(
        self, i: int, wire: Payload, sent: list[tuple[int, Payload]], applied_now: list[Payload]
    ) -> Payload:
        """What attacker ``i`` sends instead of its honest ``wire`` (the result-level attacks)."""
        attack = self.attack
        if attack == "flip":
            return flipped(wire)
        if attack == "random":
            return self.random_like(wire)
        if attack == "cancel" and applied_now:
            return flipped(applied_now[0])
        if attack == "replay" and i in self.last_sent:
            return self.last_sent[i]
        if attack in cheap.COPIES:
            source = cheap.copied_from(i, self.k, len(self.attackers))
            return cheap.perturbed_copy(attack, wire, sent, source, self.gen)
        if attack == "push":
            if self.pushed is None:
                self.pushed = self.random_like(wire)
            n = self.names.index(PUSHED)
            res = list(wire.results)
            res[n] = self.pushed.results[n]
            return Payload(wire.step, wire.batch_start, wire.batch_end, wire.trainer_nonce,
                           wire.quantized, tuple(res))  # fmt: skip
        return wire

    def random_like(self, p: Payload) -> Payload:
        res = []
        for r in p.results:
            keys = torch.rand((*r.idx.shape[:-1], r.totalk), generator=self.gen)
            idx = keys.argsort(dim=-1)[..., : r.k]
            val = torch.where(torch.rand(r.val.shape, generator=self.gen) < 0.5, 1.0, -1.0)
            res.append(DistroResult(idx, val, r.xshape, r.totalk))
        return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, tuple(res))

    def agreeing(self, step: int, keep: list[tuple[int, Payload]]) -> list[Payload]:
        """The payloads of ``keep`` the apply takes: those the product's agreement filter does
        not leave out (``psyche.distro.agreement``; their trainers keep their points, as in the
        protocol), with or without ``--verify``; all of them with ``--no-agreement``."""
        if self.args.no_agreement:
            return [p for _, p in keep]
        out = set(opposed([p for _, p in keep]))
        for n in sorted(out):
            i = keep[n][0]
            self.out.left_out.append((step, i, i in self.attackers))
        return [p for n, (_, p) in enumerate(keep) if n not in out]

    def apply(self, payloads: list[Payload], lr: float) -> None:
        if self.aggregation == "mean":
            for c in self.clients:
                c.distro.apply(payloads, lr)
            return
        for c in self.clients:  # sum: every payload's ±1 added; the sign decides, as in apply
            sum_apply(c.distro, payloads, lr)

    # --- the copy check --------------------------------------------------------------------

    def send(
        self, step: int, i: int, wire: Payload, sent: list[tuple[int, Payload]], both_lr: bool
    ) -> None:
        """Client `i` sends `wire` in `step`: the near-duplicate calibration over honest pairs,
        then the copy check (with `--verify`), which refuses and ejects a copy."""
        out, held = self.out, self.held
        lr = lr_for_step(self.schedule, step)
        self.last_sent[i] = wire
        sent.append((i, wire))
        if both_lr:  # near-duplicate calibration over honest pairs
            for j, other in held.get(step, []) + held.get(step - 1, []):
                if i in self.attackers or j in self.attackers:
                    continue
                out.honest_pairs += 1
                ov = signed_overlap(wire, other)
                own = j == i
                (out.honest_own_overlap if own else out.honest_overlap).append(ov)
                for n in repeated_tensors(wire, other):
                    name = self.names[n]
                    out.honest_repeats[name] = out.honest_repeats.get(name, 0) + 1
        if self.vp and lr > 0 and not self.args.score_only:  # the copy check (LR 0: alike)
            fp = result_fingerprint(wire)
            recent = held.get(step, []) + held.get(step - 1, [])
            if fp in self.seen.get(step, set()) | self.seen.get(step - 1, set()) or any(
                near_duplicate(wire, other) for _, other in recent
            ):
                # Refused and not attested by every honest witness: left out, and the
                # health check of the next round ejects the trainer.
                self.rejected.setdefault(step, set()).add(i)
                self.assign.lose(step, i)
                if i not in self.ejected:
                    self.ejected.add(i)
                    out.ejected_at[i] = step + 1
            self.seen.setdefault(step, set()).add(fp)
        held.setdefault(step, []).append((i, wire))

    # --- verification ----------------------------------------------------------------------

    def rows_of(self, judged: int, trainer: int, position: int, m: int) -> list[int]:
        """`m` samples of a trainer's batch from `position`: consecutive positions of one
        shuffle of the batch per (step, trainer), position p starting at p·`--verify-samples`
        (wrapping). A verifier escalates from its own position (distinct samples, as the
        daemon's `sub_batch`); its first sub-batch is position 0's, shared, unless
        `--own-sub-batch`."""
        b = len(self.step_tokens[judged][trainer])
        if m >= b:
            return list(range(b))
        key = sha256(b"sub-%d-%d" % (judged, trainer))
        order = torch.randperm(b, generator=torch.Generator().manual_seed(
            int.from_bytes(key[:8], "little")))  # fmt: skip
        start = position * (self.args.verify_samples or b)
        return [int(order[(start + i) % b]) for i in range(m)]

    def gradient_of(self, toks: Any, verifier: int) -> tuple[list[Any], float]:
        """The verifier's gradient of `toks` at its model's weights, on `--verify-threads`
        threads if its index is even, else on the trainers' `--threads` (so both thread counts
        judge every run's results), and the seconds its forward/backward took."""
        args = self.args
        self.verifier_model.zero_grad(set_to_none=True)
        torch.set_num_threads(
            (args.verify_threads or args.threads) if verifier % 2 == 0 else args.threads
        )
        t = time.perf_counter()
        base.forward_backward(self.verifier_model, toks, 1.0)
        dt = time.perf_counter() - t
        torch.set_num_threads(args.threads)
        grads = [p.grad.clone() for p in self.vparams]  # type: ignore[union-attr]
        self.verifier_model.zero_grad(set_to_none=True)
        return grads, dt

    def score_of(self, judged: int, trainer: int, payload: Payload, verifier: int,
                 rows: list[int], check: int | None = None
                 ) -> tuple[Score, float, float | None]:  # fmt: skip
        """One verifier's score of `payload` on the samples `rows` of the trainer's batch, the
        seconds its forward/backward took and, with `check` (a sample of the batch), the
        commitment agreement of that sample (None: no vote). With `--score-at-point` a result
        with commitments is scored at the trainer's lookahead point, and where `rows` is that
        one sample its gradient serves both checks."""
        commit = self.commit
        with torch.no_grad():
            for p, w in zip(self.vparams, self.step_pre[judged], strict=True):
                p.copy_(w)
        toks = self.step_tokens[judged][trainer]
        status, public = ("none", None)
        if commit is not None:
            status, public = commit.point(payload, self.held.get(judged - 1, []), trainer)
        agreement = MISMATCH if check is not None and status == "mismatch" else None
        prev_lr = prev_lr_for_step(self.schedule, judged)
        if status == "ok" and self.args.score_at_point:
            assert commit is not None
            with commit.at_point(public, prev_lr):
                grads, dt = self.gradient_of(toks[rows], verifier)
                if check is not None and rows == [check]:
                    agreement = commit.agreement(payload, grads, check, len(toks))
                    check = None
        else:
            grads, dt = self.gradient_of(toks[rows], verifier)
        if check is not None and status == "ok":
            assert commit is not None
            with commit.at_point(public, prev_lr):
                one, dt1 = self.gradient_of(toks[[check]], verifier)
            agreement, dt = commit.agreement(payload, one, check, len(toks)), dt + dt1
        return score(payload, grads, self.cfg.chunk), dt, agreement

    def verify_round(self, judging: int) -> None:
        """Round `judging` judges the results of `judging − 1` (docs/protocol.md)."""
        judged = judging - 1
        if lr_for_step(self.schedule, judged) == 0:
            return  # an LR of 0 leaves the residual as it was: nothing of this batch to check
        by_client = dict(self.pending[judged])
        # The protocol's seed is the round's: `--seed` varies it (seed 0 keeps the sampling of the
        # tables measured before it did).
        tag = b"-%d" % self.args.seed if self.args.seed else b""
        seed = int.from_bytes(sha256(b"byzantine-%d" % judging + tag)[:8], "little")
        vseed = sha256(b"byzantine-verifiers-%d" % judging + tag)
        k = self.k
        order = sorted(range(k), key=lambda i: compute_shuffled_index(i, k, vseed))
        verifiers = [i for i in order if i not in self.ejected][:3]
        for trainer in sampled_trainers(k, seed, self.vp):
            if trainer not in by_client:
                continue
            voters = [v for v in verifiers if v != trainer]
            honest = [v for v in voters if v not in self.attackers]
            if not honest:
                continue
            # Every verifier checks the commitment of the same sample (the daemon's
            # `SubBatch.committed`): the first of the slot's shuffle.
            committed = self.rows_of(judged, trainer, 0, 1)[0] if self.commit is not None else None
            against = sum(
                self.vote(judged, trainer, by_client[trainer], v, verifiers.index(v), committed)
                is False
                for v in honest  # each honest verifier recomputes and votes on its own
            )
            if (
                not self.args.score_only
                and against >= len(verifiers) // 2 + 1
                and against >= min(2, len(voters))
            ):
                self.rejected.setdefault(judged, set()).add(trainer)
                # Its result of the judging round is left out too (clients read the verdict
                # stored a round earlier), and it sends nothing from now on.
                self.rejected.setdefault(judging, set()).add(trainer)
                self.assign.lose(judged, trainer)
                self.assign.lose(judging, trainer)
                if trainer not in self.ejected:
                    self.ejected.add(trainer)
                    self.out.ejected_at[trainer] = judging

    def vote(self, judged: int, trainer: int, payload: Payload, v: int, position: int,
             committed: int | None) -> bool | None:  # fmt: skip
        """Honest verifier `v`'s vote on `trainer`'s result of step `judged`: match (True),
        mismatch (False) or none, recorded in the run's figures."""
        out, args = self.out, self.args
        bad = trainer in self.attackers
        m = args.verify_samples or len(self.step_tokens[judged][trainer])
        # The daemon's `sub_batch`: every verifier recomputes the same first sub-batch (holding
        # the committed sample) when a low score escalates; the escalation is its own.
        shared = args.escalate > m and not args.own_sub_batch
        rows = self.rows_of(judged, trainer, 0 if shared else position, m)
        sc, dt, agreement = self.score_of(judged, trainer, payload, v, rows, check=committed)
        out.verify_fwd_bwd_s += dt
        if agreement is not None:
            (out.attacker_agreement if bad else out.honest_agreement).append(agreement)
        failed = agreement is not None and agreement < MATCH_THRESHOLD
        if (not failed and args.escalate > m and sc.captured < THRESHOLD
                and args.measure == "captured"):  # fmt: skip
            # Too low to match on one sub-batch: more samples before any vote (the
            # daemon's escalation, psyche.daemon.verifying).
            out.escalations += 1
            first = sc.captured
            rows = self.rows_of(judged, trainer, position, args.escalate)
            sc, dt, _ = self.score_of(judged, trainer, payload, v, rows)
            out.verify_fwd_bwd_s += dt
            out.escalated.append((judged, trainer, v, bad, round(first, 5),
                                  round(sc.captured, 5)))  # fmt: skip
        # The daemon's vote: match, mismatch, or none in the gap between the two
        # thresholds (psyche.distro.similarity.verdict_on).
        vote = sc.passed if args.measure == "z" else verdict_on(sc.captured)
        vote = False if failed else vote  # a failed commitment is evidence enough
        value = sc.z if args.measure == "z" else sc.captured
        if vote is None:
            if bad:
                out.attacker_undecided += 1
            else:
                out.honest_undecided += 1
        (out.attacker_scores if bad else out.honest_scores).append(value)
        out.votes.append((judged, trainer, v, bad, round(value, 5)))
        (out.attacker_z if bad else out.honest_z).append(sc.z)
        (out.attacker_sign_z if bad else out.honest_sign_z).append(sc.sign_z)
        (out.attacker_captured if bad else out.honest_captured).append(sc.captured)
        per = out.attacker_tensor_z if bad else out.honest_tensor_z
        for name, tz in zip(self.names, sc.tensor_z, strict=True):
            per.setdefault(name, []).append(tz)
        if not bad:
            out.honest_votes += 1
            out.false_positives += 1 if vote is False else 0
            out.min_honest_score = min(out.min_honest_score, value)
        return vote


def flipped(p: Payload) -> Payload:
    res = tuple(DistroResult(r.idx, -r.val, r.xshape, r.totalk) for r in p.results)
    return Payload(p.step, p.batch_start, p.batch_end, p.trainer_nonce, p.quantized, res)


def sum_apply(distro: Any, payloads: Sequence[Any], lr: float) -> None:
    """`Distro.apply` with the peers' ±1 values summed instead of averaged over choosers."""
    if not payloads:
        return
    with torch.no_grad():
        for n, p in enumerate(distro._params):
            dense = None
            for payload in payloads:
                r = payload.results[n]
                one = DistroResult(r.idx, sign_values(r.val, torch.float32), r.xshape, r.totalk)
                d = aggregate([one], torch.float32, p.device, distinct=True)
                dense = d if dense is None else dense + d
            assert dense is not None
            p.sub_(decode_sign(dense).reshape(p.shape).to(p.dtype), alpha=lr)

"""The SparseLoCo arm of `bench/byzantine.py` (`--optimizer sparseloco`, issue 39 item 4): attacks
on the multi-step optimizer, undefended (`--verify 0`) or under the product's defence
(`--verify VP`: the copy check and the inner-step audit, `bench/byzantine_sparseloco_audit.py`).

Method: bench/optimizer_arms.py's `run_sparseloco` on byzantine.py's workspace and token stream.
K clients, each with its own inner AdamW (0.9, 0.95, LR `--lr-inner` on the run's cosine shape,
gradient clip 1.0) and error-feedback state; a round is H = `--inner-steps` global steps, each
client taking its slice of each as one inner step, then `encode_round` (chunk 4096, top-32, 2-bit
values, error decay 0.95), every client decodes the round's payloads and `outer_apply`s them
(outer LR 1, no momentum) to the round's start weights; weights checked identical at the end.
Attackers (the last `--attackers` clients) send, per round:

- `flip`: their honest payload with every sign flipped; `random`: every sign random;
- `replay`: their previous round's payload again (honest in the first round);
- `garbage`: an honest round on random tokens;
- `fr2`, `fr4`, `fr8`: every inner step on the first 1/2, 1/4, 1/8 of their slice;
- `repeat`: every inner step on the slice's first sample repeated to fill it;
- `copy`, `copy30`: an honest peer's payload of the round (as `byzantine_attacks.copied_from`)
  with 5 % / 30 % of its signs flipped;
- `reset`: honest work, but its error buffers zeroed at the start of every round.

`--verify 0`: every payload is applied (no audit, no copy check): the figure is the loss ratio to
the all-honest run, i.e. what a defence has to prevent. With `--verify VP` every client commits
to its round's chain and attackers commit to what they did (a free rider's real cheap chain; a
flipper's, copier's or replayer's honest chain, whose encoding its payload is not); a result
refused by the copy check or rejected by the audit is left out of its apply and earns no point,
and its trainer sends nothing from the next round on.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import byzantine_attacks as cheap
import byzantine_sparseloco_audit as sla

ATTACKS = ("none", "flip", "random", "replay", "garbage", *cheap.NEW_ATTACKS, "reset")


def flipped(payload: Any, share: float, gen: Any) -> Any:
    """`payload` with `share` of its signs flipped (1: all); entries of level 0 keep sign 0, as
    the canonical form requires, so the result is well-formed (it was not before the defended
    runs: a zero carrying a sign, refused on arrival; the values applied were the same)."""
    import numpy as np

    from psyche.distro.sparseloco_payload import SparseLoCoPayload, SparseTensor

    tensors = []
    for t in payload.tensors:
        signs = []
        for s, m, sc in zip(t.signs, t.mags, t.scales, strict=True):
            pick = np.ones(s.shape, dtype=bool) if share >= 1 else gen.random(s.shape) < share
            zero = (sc[:, :1] == 0) & (m == 0)  # level 0: lo (or the one scale) 0, not hi
            signs.append(np.where(pick & ~zero, 1 - s, s).astype(s.dtype))
        tensors.append(SparseTensor(t.indices, tuple(signs), t.mags, t.scales))
    return SparseLoCoPayload(payload.step, payload.trainer_nonce, tuple(tensors))


def inner_tokens(attack: str, tokens: Any, attacker: bool, gen: Any) -> Any:
    import torch

    if not attacker:
        return tokens
    if attack in cheap.TRAINER_ATTACKS:
        return cheap.cheap_batch(attack, tokens)
    if attack == "garbage":
        seed = int(gen.integers(1 << 31))
        return torch.randint(0, 256, tokens.shape, generator=torch.Generator().manual_seed(seed))
    return tokens


def tampered(attack: str, i: int, own: Any, decoded: dict[int, Any], last: dict[int, Any],
             k: int, attackers: int, gen: Any) -> Any:  # fmt: skip
    """What attacker `i` sends instead of its own decoded payload `own`."""
    if attack == "flip":
        return flipped(own, 1.0, gen)
    if attack == "random":
        return flipped(own, 0.5, gen)
    if attack == "replay":
        return last.get(i, own)
    if attack in cheap.COPIES:
        source = cheap.copied_from(i, k, attackers)
        return flipped(decoded[source], cheap.COPIES[attack], gen) if source in decoded else own
    return own


def run(cfg: Any, ws: Any, args: argparse.Namespace, attack: str, out: Any) -> Any:
    """One SparseLoCo run under `attack`, defended when `out.verify` > 0
    (`byzantine_sparseloco_audit.Defence`); fills and returns `out` (byzantine.RunResult)."""
    import numpy as np
    import torch

    import byzantine_data as bd
    import distro_vs_adamw as base
    from psyche.data.local import LocalDataProvider
    from psyche.distro import sparseloco as sl
    from psyche.training import model_hash

    k = cfg.clients
    attackers = set(range(k - args.attackers, k)) if attack != "none" else set()
    settings = sl.SparseLoCoSettings(
        topk_chunk=4096, topk=32, value_bits=2, error_decay=0.95, outer_momentum=0.0
    )
    data = LocalDataProvider(ws.data_dir, cfg.seq_len)
    models = [base.load(ws) for _ in range(k)]
    params = [[p for _, p in sorted(m.named_parameters())] for m in models]
    shapes = [tuple(p.shape) for p in params[0]]
    states = [sl.SparseLoCoState(shapes, settings) for _ in models]
    inner = [torch.optim.AdamW(ps, lr=args.lr_inner, betas=(0.9, 0.95), eps=1e-8,
                               weight_decay=0.0) for ps in params]  # fmt: skip
    defence = None
    if out.verify:
        defence = sla.Defence(cfg, ws, args, out.verify, attackers, out, data)
        if defence.verifier.settings != settings:
            raise AssertionError("the verifier's SparseLoCo settings are not the clients'")
    ejected = defence.ejected if defence is not None and not args.fixed_slices else set()
    assign = bd.Assignment(k, cfg.global_batch, ejected, retries=not args.fixed_slices)
    if defence is not None:
        defence.assign = assign
    ctx = _Clients(cfg, args, attack, attackers, data, models, params, states, inner, out,
                   defence, np.random.default_rng(cfg.seed + 7), assign)  # fmt: skip
    last: dict[int, Any] = {}
    for rnd in range(cfg.steps // args.inner_steps):
        start = [p.detach().clone() for p in params[0]]
        sent: dict[int, sla.Sent] = {}
        refused: set[int] = set()
        so_far: dict[int, Any] = {}
        for i in range(k):
            if defence is not None and i in defence.ejected:
                continue  # ejected: it sends nothing from the round after it was caught
            own, trail = ctx.train(i, rnd, start)
            payload = own
            if i in attackers:
                payload = tampered(attack, i, own, so_far, last, k, len(attackers), ctx.gen)
            last[i] = so_far[i] = payload
            got = sla.Sent(payload, b"", None) if defence is None else defence.arrive(
                rnd, i, payload, trail)  # fmt: skip
            if got is not None:
                got.trail = trail
                sent[i] = got
            else:
                refused.add(i)  # by the copy or continuity check
        rejected = defence.judge(rnd, start, sent) if defence is not None else set()
        for i in refused | rejected:  # their samples wait for a retry
            for step in range(rnd * args.inner_steps, (rnd + 1) * args.inner_steps):
                assign.lose(step, i)
        kept = {i: s for i, s in sent.items() if i not in rejected}
        for i in kept:
            out.points[i] = out.points.get(i, 0) + 1
        if defence is not None:
            defence.applied(kept)
        decoded = [kept[i].payload for i in sorted(kept)]
        for i in range(k):
            with torch.no_grad():
                for p, s in zip(params[i], start, strict=True):
                    p.copy_(s)
            sl.outer_apply(params[i], decoded, states[i], settings, args.outer_lr)
    out.retried_samples = assign.retried
    hashes = {model_hash(m) for m in models}
    if len(hashes) != 1:
        raise AssertionError(f"SparseLoCo clients diverged: {len(hashes)} weight hashes")
    out.final_val = base.evaluate(models[0], ws.val)
    return out


@dataclass
class _Clients:
    """The run's clients and what training a round needs."""

    cfg: Any
    args: argparse.Namespace
    attack: str
    attackers: set[int]
    data: Any
    models: list[Any]
    params: list[Any]
    states: list[Any]
    inner: list[Any]
    out: Any
    defence: sla.Defence | None
    gen: Any
    assign: Any

    def train(self, i: int, rnd: int, start: list[Any]) -> tuple[Any, Any]:
        """Client `i`'s round `rnd` from `start`: its own result (decoded) and, in a run that
        verifies, its committed chain (`AuditTrail`, blobs kept)."""
        import distro_vs_adamw as base
        from psyche.distro import clip_grad_norm_
        from psyche.distro import sparseloco as sl
        from psyche.training import lr_for_step
        from psyche.training.sparseloco_audit import AuditTrail

        h, d = self.args.inner_steps, self.defence
        bad = i in self.attackers
        if bad and self.attack == "reset":
            self.states[i].reset_error()  # honest work from zeroed error buffers
        trail = AuditTrail() if d is not None else None
        if d is not None:
            d.record_error(trail, self.states[i].error)
        model, params, inner = self.models[i], self.params[i], self.inner[i]
        schedule = self.cfg.schedule(self.args.lr_inner)
        for step in range(rnd * h, (rnd + 1) * h):
            toks = self.data.get_samples(self.assign.of_step(step)[i])
            toks = inner_tokens(self.attack, toks, bad, self.gen)
            if d is not None:
                d.record(trail, params, inner)
            model.zero_grad(set_to_none=True)
            t = time.perf_counter()
            base.forward_backward(model, toks, 1.0)
            self.out.train_fwd_bwd_s += time.perf_counter() - t
            clip_grad_norm_(params, 1.0)
            for g in inner.param_groups:
                g["lr"] = lr_for_step(schedule, step)
            inner.step()
        if d is not None:
            d.record(trail, params, inner, last=True)  # and the moments after the round
        wire = sl.encode_round(self.states[i], start, params, step=rnd, nonce=i)
        if d is not None:
            d.record_error(trail, self.states[i].error)
        return sl.decode_payload(
            wire, [tuple(p.shape) for p in params], self.states[i].settings
        ), trail

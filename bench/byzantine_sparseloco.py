"""The SparseLoCo arm of `bench/byzantine.py` (`--optimizer sparseloco`, issue 39 item 4): attacks
on the multi-step optimizer, undefended, since no SparseLoCo result is verified today.

Method: bench/optimizer_arms.py's `run_sparseloco` on byzantine.py's workspace and token stream.
K clients, each with its own inner AdamW (0.9, 0.95, LR `--lr-inner` on the run's cosine shape,
gradient clip 1.0) and error-feedback state; a round is H = `--inner-steps` global steps, each
client taking its slice of each as one inner step, then `encode_round` (chunk 4096, top-32, 2-bit
values, error decay 0.95), every client decodes the K payloads and `outer_apply`s them (outer LR
1, no momentum) to the round's start weights; weights checked identical at the end. Attackers
(the last `--attackers` clients) send, per round:

- `flip`: their honest payload with every sign flipped; `random`: every sign random;
- `replay`: their previous round's payload again (honest in the first round);
- `garbage`: an honest round on random tokens;
- `fr2`, `fr4`, `fr8`: every inner step on the first 1/2, 1/4, 1/8 of their slice;
- `repeat`: every inner step on the slice's first sample repeated to fill it;
- `copy`, `copy30`: an honest peer's payload of the round (as `byzantine_attacks.copied_from`)
  with 5 % / 30 % of its signs flipped.

Every payload is applied (no verification, no copy check): the figure is the loss ratio to the
all-honest run, i.e. what a defence would have to prevent.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import byzantine_attacks as cheap

ATTACKS = ("none", "flip", "random", "replay", "garbage", *cheap.NEW_ATTACKS)


def flipped(payload: Any, share: float, gen: Any) -> Any:
    """`payload` with `share` of its signs flipped (1: all; entries of level 0 stay 0)."""
    import numpy as np

    from psyche.distro.sparseloco_payload import SparseLoCoPayload, SparseTensor

    tensors = []
    for t in payload.tensors:
        signs = []
        for s in t.signs:
            pick = np.ones(s.shape, dtype=bool) if share >= 1 else gen.random(s.shape) < share
            signs.append(np.where(pick, 1 - s, s).astype(s.dtype))
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


def tampered(attack: str, i: int, own: Any, decoded: list[Any], last: dict[int, Any],
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
        return flipped(decoded[source], cheap.COPIES[attack], gen) if source < i else own
    return own


def run(cfg: Any, ws: Any, args: argparse.Namespace, attack: str, out: Any) -> Any:
    """One SparseLoCo run under `attack`; fills and returns `out` (byzantine.RunResult)."""
    import numpy as np
    import torch

    import distro_vs_adamw as base
    from psyche.data.local import LocalDataProvider
    from psyche.distro import clip_grad_norm_
    from psyche.distro import sparseloco as sl
    from psyche.training import lr_for_step, model_hash

    k, h = cfg.clients, args.inner_steps
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
    schedule = cfg.schedule(args.lr_inner)
    gen = np.random.default_rng(cfg.seed + 7)
    last: dict[int, Any] = {}
    for rnd in range(cfg.steps // h):
        start = [p.detach().clone() for p in params[0]]
        decoded: list[Any] = []
        for i, model in enumerate(models):
            for step in range(rnd * h, (rnd + 1) * h):
                toks = data.get_samples(base.step_slices(cfg, step)[i])
                toks = inner_tokens(attack, toks, i in attackers, gen)
                model.zero_grad(set_to_none=True)
                t = time.perf_counter()
                base.forward_backward(model, toks, 1.0)
                out.train_fwd_bwd_s += time.perf_counter() - t
                clip_grad_norm_(params[i], 1.0)
                for g in inner[i].param_groups:
                    g["lr"] = lr_for_step(schedule, step)
                inner[i].step()
            wire = sl.encode_round(states[i], start, params[i], step=rnd, nonce=i)
            own = sl.decode_payload(wire, shapes, settings)
            sent = own
            if i in attackers:
                sent = tampered(attack, i, own, decoded, last, k, len(attackers), gen)
            last[i] = sent
            decoded.append(sent)
            out.points[i] = out.points.get(i, 0) + 1
        for i in range(k):
            with torch.no_grad():
                for p, s in zip(params[i], start, strict=True):
                    p.copy_(s)
            sl.outer_apply(params[i], decoded, states[i], settings, args.outer_lr)
    hashes = {model_hash(m) for m in models}
    if len(hashes) != 1:
        raise AssertionError(f"SparseLoCo clients diverged: {len(hashes)} weight hashes")
    out.final_val = base.evaluate(models[0], ws.val)
    return out

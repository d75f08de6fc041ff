"""Cheaper-work attacks for `bench/byzantine.py` (issue 39 item 4): free riders, perturbed copies.

- `fr2`, `fr4`, `fr8`: a **free rider** that trains on the first 1/2, 1/4 or 1/8 of its batch
  and reports the whole batch. It trains through the real `Trainer.train_step` (lookahead,
  micro-batches, error feedback, top-k, 1-bit payload), as bench/free_rider.py's shadows do, so
  its result is its genuine update from a part of the work: the compute saved is the share of
  forward/backward it skipped.
- `repeat`: the right number of samples but the wrong data: its first sample repeated to fill the
  batch (no other sample fetched or read). The mean gradient of B copies of one sample is that
  sample's gradient, so this is `fr8`'s result up to float rounding when B = 8, computed at the
  full price here (an attacker would compute it once): the row checks that the cost of the
  forward/backward does not show, only what the result was computed from.
- `copy`: a copy of an honest peer's result of the same step (attacker `i` of `a` copies honest
  client `i − (K − a)`), with `COPY_FLIP` of its signs flipped and `COPY_SWAP` of its chosen
  indices replaced by indices it did not choose (random signs), so its fingerprint differs;
  `copy30`: the same with 30 % of the signs flipped, past `NEAR_DUPLICATE` (0.75 signed overlap),
  a copy the near-duplicate check is not meant to catch (psyche.distro.overlap: "a copy changed
  that much is a worse update that the recompute verification then judges").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FREE_RIDERS = {"fr2": 2, "fr4": 4, "fr8": 8}
"""Attack → the divisor of the batch its free rider trains on."""
COPIES = {"copy": 0.05, "copy30": 0.30}
"""Attack → the share of the copied result's signs it flips."""
COPY_SWAP = 0.02
"""Share of the copied result's chosen indices replaced by unchosen ones."""
TRAINER_ATTACKS = (*FREE_RIDERS, "repeat")
NEW_ATTACKS = (*TRAINER_ATTACKS, *COPIES)


def trainer_for(client: Any, batch: int, seed: int) -> Any:
    """The real `Trainer` over a bench client's model and `Distro` (one micro-batch)."""
    import torch

    from psyche.training.trainer import Trainer

    return Trainer(
        client.model, client.distro, micro_batch_size=batch, device=torch.device("cpu"), seed=seed
    )


def cheap_batch(attack: str, tokens: Any) -> Any:
    """What the attacker trains on instead of its batch `tokens` ([B, seq]); `none`: the batch
    itself (an honest client trained through the `Trainer`)."""
    if attack == "none":
        return tokens
    if attack in FREE_RIDERS:
        return tokens[: max(1, tokens.shape[0] // FREE_RIDERS[attack])]
    if attack == "repeat":
        return tokens[:1].expand(tokens.shape[0], -1).contiguous()
    raise ValueError(attack)


def train_cheaply(
    attack: str,
    trainer: Any,
    client: Any,
    tokens: Any,
    batch: Any,
    step: int,
    lr: float,
    prev_lr: float,
) -> tuple[Any, Any]:
    """One step of a cheating trainer through `Trainer.train_step`: (its own result, the result
    as sent: encoded and decoded as every peer sees it). Updates the client's previous result
    (error feedback reads it) and nonce as the honest path does."""
    from psyche.distro import decode_payload

    out = trainer.train_step(
        cheap_batch(attack, tokens), step=step, lr=lr, prev_lr=prev_lr,
        prev_self_results=client.prev_self, zero_optim=False, batch_id=(batch.start, batch.end),
    )  # fmt: skip
    client.prev_self, client.nonce = out.self_result, client.nonce + 1
    wire = decode_payload(out.payload, client.distro.payload_spec)
    return out.self_result, wire


def copied_from(attacker: int, clients: int, attackers: int) -> int:
    """The honest client whose result attacker `attacker` copies (the last `attackers` of
    `clients` attack)."""
    return (attacker - (clients - attackers)) % (clients - attackers)


def perturbed_copy(
    attack: str, own: Any, sent: Sequence[tuple[int, Any]], source: int, gen: Any
) -> Any:
    """`source`'s result of this step (from `sent`) with `COPIES[attack]` of its signs flipped and
    `COPY_SWAP` of its indices swapped for unchosen ones; `own` (the attacker's honest result)
    when the source sent nothing this step. The header is the attacker's own."""
    import torch

    from psyche.distro import DistroResult, Payload

    by = dict(sent)
    if source not in by:
        return own
    flip = COPIES[attack]
    res = []
    for r in by[source].results:
        val = torch.where(torch.rand(r.val.shape, generator=gen) < flip, -r.val, r.val)
        idx = r.idx
        if r.totalk >= 2 * r.k:
            keys = torch.rand((*r.idx.shape[:-1], r.totalk), generator=gen)
            keys.scatter_(-1, r.idx.long(), 2.0)  # chosen indices sort last
            fresh = keys.argsort(dim=-1)[..., : r.k].to(r.idx.dtype)
            swap = torch.rand(r.idx.shape, generator=gen) < COPY_SWAP
            idx = torch.where(swap, fresh, r.idx)
            sign = torch.where(torch.rand(r.val.shape, generator=gen) < 0.5, 1.0, -1.0)
            val = torch.where(swap, sign.to(val.dtype), val)
        res.append(DistroResult(idx, val, r.xshape, r.totalk))
    return Payload(own.step, own.batch_start, own.batch_end, own.trainer_nonce, own.quantized,
                   tuple(res))  # fmt: skip

"""A malicious trainer for the verification tests: a normal client process (any backend's
``train`` command) that trains honestly, keeps its honest DisTrO history, and sends another
result in its place, chosen by ``PSYCHE_ROGUE_ATTACK``:

- ``flip`` (default): its honest result with every sign flipped;
- ``random``: random well-formed coefficients and signs;
- ``replay``: its previous round's result bytes again (the first round's is honest).

It lives in the tests, not in the product: the daemon has no switch for misbehaving. Run it as
``python rogue_trainer.py <the client's usual arguments>`` (``psyche``'s, or with
``PSYCHE_ROGUE_CLI=solana`` ``psyche-solana-client``'s); it prints one ``rogue:`` line per
result it forged, which the tests read from the client's log.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from psyche.distro import DistroResult, Payload, decode_payload, encode_payload
from psyche.training.trainer import Trainer, TrainOutput

ATTACKS = ("flip", "random", "replay")

_honest_train_step = Trainer.train_step
_last: dict[int, bytes] = {}


def forged(attack: str, wire: Payload, gen: torch.Generator) -> Payload:
    """``wire`` (the honest result as sent) changed by ``attack`` (flip or random)."""
    results = []
    for r in wire.results:
        if attack == "flip":
            results.append(DistroResult(r.idx, -r.val, r.xshape, r.totalk))
            continue
        keys = torch.rand((*r.idx.shape[:-1], r.totalk), generator=gen)
        idx = keys.argsort(dim=-1)[..., : r.k].to(r.idx.dtype)
        val = torch.where(torch.rand(r.val.shape, generator=gen) < 0.5, 1.0, -1.0).to(r.val.dtype)
        results.append(DistroResult(idx, val, r.xshape, r.totalk))
    return Payload(
        wire.step,
        wire.batch_start,
        wire.batch_end,
        wire.trainer_nonce,
        wire.quantized,
        tuple(results),
        wire.commitments,  # its honest per-sample commitments: the score must catch the rest
    )


def _rogue_train_step(self: Trainer, batch: torch.Tensor, **kwargs: Any) -> TrainOutput:
    out = _honest_train_step(self, batch, **kwargs)
    attack = os.environ.get("PSYCHE_ROGUE_ATTACK", "flip")
    step = kwargs["step"]
    if attack == "replay":
        payload = _last.get(id(self), out.payload)
        _last[id(self)] = out.payload
    else:
        spec = self.distro.payload_spec  # type: ignore[attr-defined]
        wire = decode_payload(out.payload, spec)
        gen = torch.Generator().manual_seed(step)
        payload = encode_payload(forged(attack, wire, gen), self.distro.payload_version)
    print(f"rogue: {attack} result step={step}", flush=True)
    return TrainOutput(payload, out.self_result, out.loss, out.tokens, out.seconds)


if __name__ == "__main__":
    if os.environ.get("PSYCHE_ROGUE_ATTACK", "flip") not in ATTACKS:
        sys.exit(f"PSYCHE_ROGUE_ATTACK must be one of {', '.join(ATTACKS)}")
    Trainer.train_step = _rogue_train_step  # type: ignore[method-assign]
    if os.environ.get("PSYCHE_ROGUE_CLI") == "solana":
        from psyche.cli.solana import solana

        solana(sys.argv[1:], prog_name="psyche-solana-client")
    else:
        from psyche.cli.main import cli

        cli(sys.argv[1:], prog_name="psyche")

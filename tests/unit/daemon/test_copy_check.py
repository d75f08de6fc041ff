"""Copy checks on received results (docs/protocol.md, "Threat model and result verification"):
a result whose content repeats another result of this or the previous round is found, whatever
header it claims; honest results of different trainers and rounds never collide."""

from __future__ import annotations

import dataclasses

import torch

from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundLRs,
    RoundState,
    result_fingerprint,
)
from psyche.distro import Distro, DistroConfig, Payload, decode_payload, encode_payload
from psyche.distro.result_format import DistroFormat
from psyche.protocol.data_selection import BatchId
from psyche.training import init_model, llama_config

from ..training.helpers import TINY, batch_of
from .copy_helpers import copied, hold

LRS = RoundLRs(lr=1e-3, prev_lr=1e-3, zero_optim=False)
"""Any positive LRs: these tests do not depend on their value."""


CFG = DistroConfig(
    compression_decay=0.999, compression_topk=8, compression_chunk=64, quantize_1bit=True
)


def _honest_payloads(rounds: int, clients: int) -> tuple[list[list[Payload]], DistroFormat]:
    """Wire-decoded payloads of ``clients`` honest trainers over ``rounds`` rounds, and their
    format."""
    models = [init_model(llama_config(TINY), seed=0) for _ in range(clients)]
    distros = [Distro(m.named_parameters(), CFG) for m in models]
    spec = distros[0].payload_spec
    prev: list[Payload | None] = [None] * clients
    out = []
    for r in range(rounds):
        sent = []
        for i, (m, d) in enumerate(zip(models, distros, strict=True)):
            tokens = batch_of(100 * r + i)
            m(input_ids=tokens, labels=tokens, use_cache=False).loss.backward()
            p = d.generate(1e-3, 1e-3, prev[i], step=r)
            prev[i] = p
            sent.append(decode_payload(encode_payload(p, spec.version), spec))
        for d in distros:
            d.apply(sent, 1e-3)
        out.append(sent)
    return out, DistroFormat(spec)


def test_fingerprints_separate_honest_results_and_ignore_headers() -> None:
    torch.manual_seed(0)
    rounds, _ = _honest_payloads(rounds=3, clients=3)
    prints = [result_fingerprint(p) for sent in rounds for p in sent]
    assert len(set(prints)) == len(prints), "two honest results share a fingerprint"
    original = rounds[1][0]
    relabelled = dataclasses.replace(original, step=7, batch_start=40, batch_end=47)
    assert result_fingerprint(relabelled) == result_fingerprint(original)


def test_copied_from_finds_the_original_in_recent_rounds() -> None:
    torch.manual_seed(0)
    rounds, fmt = _honest_payloads(rounds=2, clients=2)
    states = []
    for r, sent in enumerate(rounds):
        st = RoundState(height=r, step=r + 1, trains=True, assignment={}, lrs=LRS)
        for i, p in enumerate(sent):
            b = BatchId(10 * r + 2 * i, 10 * r + 2 * i + 1)
            res = ReceivedResult(sim_identity(i), b, b"h" * 32, b"x", result_fingerprint(p))
            hold(st, res, p, fmt)
        states.append(st)
    # A trainer replaying its previous result, and one copying a peer's of this round.
    replay = result_fingerprint(rounds[0][1])
    copy = result_fingerprint(rounds[1][0])
    assert (found := copied(replay, states)) is not None and found.trainer == sim_identity(1)
    assert (found := copied(copy, states)) is not None and found.trainer == sim_identity(0)
    # Sharing some tensors with a result is not a copy: only the whole content counts.
    mixed = rounds[1][1].results[:1] + rounds[1][0].results[1:]
    fresh = result_fingerprint(dataclasses.replace(rounds[1][0], results=mixed))
    assert copied(fresh, states) is None

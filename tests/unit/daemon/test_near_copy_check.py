"""The copy check refuses a near-duplicate like an exact copy (psyche.daemon.rounds.copied_from
with the decoded payload; docs/protocol.md, "Threat model and result verification")."""

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
from psyche.distro import Distro, DistroConfig, DistroResult, Payload, encode_payload
from psyche.distro.payload import payload_hash
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


def test_near_duplicates_are_refused_and_honest_results_are_not() -> None:
    torch.manual_seed(0)
    models = [init_model(llama_config(TINY), seed=0) for _ in range(2)]
    distros = [Distro(m.named_parameters(), CFG) for m in models]
    spec = distros[0].payload_spec
    state = RoundState(height=1, step=2, trains=True, assignment={}, lrs=LRS)
    sent: list[Payload] = []
    for i, (m, d) in enumerate(zip(models, distros, strict=True)):
        tokens = batch_of(10 + i)
        m(input_ids=tokens, labels=tokens, use_cache=False).loss.backward()
        b = BatchId(4 * i, 4 * i + 3)
        p = d.generate(1e-3, 1e-3, None, step=state.step, batch_start=b.start, batch_end=b.end)
        data = encode_payload(p, spec.version)
        digest = payload_hash(state.step, b.start, b.end, data)
        fp = result_fingerprint(p)
        if i == 0:  # the first is held; the second arrives
            hold(state, ReceivedResult(sim_identity(i), b, digest, data, fp), p, DistroFormat(spec))
        sent.append(p)
    honest = sent[1]
    assert copied(result_fingerprint(honest), [state], honest, DistroFormat(spec)) is None
    # A copy of the held result with one sign flipped in every tensor: another fingerprint.
    res = []
    for r in sent[0].results:
        val = r.val.clone().reshape(-1)
        val[0] = -val[0]
        res.append(DistroResult(r.idx, val.reshape(r.val.shape), r.xshape, r.totalk))
    near = dataclasses.replace(sent[0], results=tuple(res), batch_start=4, batch_end=7)
    fp = result_fingerprint(near)
    assert fp != result_fingerprint(sent[0])
    assert copied(fp, [state]) is None  # the exact check alone misses it
    found = copied(fp, [state], near, DistroFormat(spec))
    assert found is not None and found.trainer == sim_identity(0)

"""The SparseLoCo chain's public half, checked on arrival (``psyche.daemon.chain_check``): a
result whose error buffers before its round are not those its trainer's previous result of the
epoch committed to after it is refused by every client that holds that previous result."""

from __future__ import annotations

import torch

from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon.chain_check import breaks_chain
from psyche.daemon.epoch import EpochView
from psyche.daemon.rounds import ReceivedResult, RoundState
from psyche.protocol.data_selection import BatchId
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import init_model, llama_config
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

from ..training.helpers import TINY, batch_of
from .test_rounds import LRS

ME, OTHER = sim_identity(0), sim_identity(1)
BATCHES = (BatchId(0, 5), BatchId(6, 11), BatchId(12, 17))
LR = 4e-3


def _trainer() -> SparseLoCoTrainer:
    cfg = SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, clip_grad_norm=1.0, inner_steps=2,
        outer_lr=0.7, outer_momentum=0.0, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
    )  # fmt: skip
    t = SparseLoCoTrainer(init_model(llama_config(TINY), seed=0), cfg, micro_batch_size=2)
    t.set_audit(True)
    return t


def _rounds(reset_at: int | None = None) -> list[bytes]:
    """Three rounds' results of one trainer (audit trailers in), its error buffers zeroed
    before round ``reset_at``."""
    t, out = _trainer(), []
    for r in range(3):
        if r == reset_at:
            t.state.reset_error()
        got = t.train_step(batch_of(r, samples=6), step=r + 1, lr=LR, prev_lr=LR,
                           prev_self_results=None, zero_optim=r == 0)  # fmt: skip
        out.append(got.payload)
    return out


def _held(view: EpochView, height: int, payload: bytes) -> ReceivedResult:
    state = view.rounds.setdefault(
        height, RoundState(height, height + 1, True, {BATCHES[height]: ME}, LRS)
    )
    res = ReceivedResult(ME, BATCHES[height], b"\0" * 32, payload, fingerprint=b"f")
    state.results[res.batch] = res
    return res


def test_a_chain_that_carries_over_passes_and_a_reset_one_breaks() -> None:
    fmt = _trainer().format
    honest, reset = _rounds(), _rounds(reset_at=2)
    assert honest[:2] == reset[:2]  # the same work until the reset
    for payloads, breaks_at in ((honest, None), (reset, 2)):
        view = EpochView(0)
        _held(view, 0, payloads[0])
        for h in (1, 2):
            full = _held(view, h, payloads[h])
            broken = breaks_chain(view, view.rounds[h], full, fmt.decode(payloads[h]), fmt)
            assert broken is (h == breaks_at), (h, breaks_at)


def test_nothing_is_refused_without_the_previous_result_held_here() -> None:
    """The epoch's first round, a previous result not (yet) downloaded, another trainer's batch,
    or a run that does not verify: nothing to compare, so nothing refused."""
    fmt = _trainer().format
    reset = _rounds(reset_at=1)
    first = EpochView(0)
    full = _held(first, 1, reset[1])
    assert not breaks_chain(first, first.rounds[1], full, fmt.decode(reset[1]), fmt)
    view = EpochView(0)
    prev = _held(view, 0, reset[0])
    full = _held(view, 1, reset[1])
    decoded = fmt.decode(reset[1])
    assert breaks_chain(view, view.rounds[1], full, decoded, fmt)
    view.rounds[0].results[prev.batch] = ReceivedResult(ME, prev.batch, b"\0" * 32)  # downloading
    assert not breaks_chain(view, view.rounds[1], full, decoded, fmt)
    other = ReceivedResult(OTHER, full.batch, b"\0" * 32, full.payload, fingerprint=b"f")
    assert not breaks_chain(view, view.rounds[1], other, decoded, fmt)
    plain = _trainer()
    plain.set_audit(False)
    assert not breaks_chain(view, view.rounds[1], full, torch.zeros(1), plain.format)

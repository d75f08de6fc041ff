"""The SparseLoCo chain's public half, checked on arrival (``psyche.daemon.chain_check``): a
result whose error buffers or inner moments before its round are not those its trainer's previous
result of the epoch committed to after it is refused by every client that received that previous
result."""

from __future__ import annotations

from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon.chain_check import breaks_chain
from psyche.daemon.epoch import EpochView
from psyche.daemon.rounds import ReceivedResult, RoundState
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity
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


def _arrive(view: EpochView, height: int, payload: bytes, who: NodeIdentity = ME) -> bool:
    """``payload`` of ``who`` arriving in round ``height``: whether it breaks its chain."""
    state = view.rounds.setdefault(
        height, RoundState(height, height + 1, True, {BATCHES[height]: who}, LRS)
    )
    res = ReceivedResult(who, BATCHES[height], b"\0" * 32, payload)
    return breaks_chain(view, state, res, FMT.decode(payload))


FMT = _trainer().format


def test_a_chain_that_carries_over_passes_and_a_reset_one_breaks() -> None:
    honest, reset = _rounds(), _rounds(reset_at=2)
    assert honest[:2] == reset[:2]  # the same work until the reset
    for payloads, breaks_at in ((honest, None), (reset, 2)):
        view = EpochView(0)
        assert [_arrive(view, h, payloads[h]) for h in range(3)] == [
            h == breaks_at for h in range(3)
        ]


def test_moments_that_do_not_carry_over_break_the_chain() -> None:
    """The inner AdamW moments a round starts from (S_0's, committed as its first state hash)
    must be those its trainer's previous result committed to after its round: restarting them
    mid-epoch, or choosing them (a trainer that swamps its gradient with moments of 1e8, or
    tilts its update), is refused on arrival like broken error buffers."""
    t, swapped = _trainer(), []
    for r in range(3):
        if r == 2:
            for st in t._inner.state.values():
                st["exp_avg"].mul_(1e8)  # chosen, not trained
        got = t.train_step(batch_of(r, samples=6), step=r + 1, lr=LR, prev_lr=LR,
                           prev_self_results=None, zero_optim=r == 0)  # fmt: skip
        swapped.append(got.payload)
    view = EpochView(0)
    assert [_arrive(view, h, swapped[h]) for h in range(3)] == [False, False, True]
    audits = [FMT.decode(p).audit for p in swapped]
    assert all(a is not None for a in audits)
    assert audits[1].states[0] == audits[0].moments_after  # type: ignore[union-attr]
    assert audits[1].error_before == audits[0].error_after  # type: ignore[union-attr]
    assert audits[2].error_before == audits[1].error_after  # type: ignore[union-attr]


def test_a_trainer_that_breaks_its_chain_every_round_is_refused_every_round() -> None:
    """A refused result's trailer still says where its trainer's buffers stand, so one that
    zeroes them every round breaks its chain every round, not every other one."""
    t, out = _trainer(), []
    for r in range(3):
        t.state.reset_error()
        got = t.train_step(batch_of(r, samples=6), step=r + 1, lr=LR, prev_lr=LR,
                           prev_self_results=None, zero_optim=r == 0)  # fmt: skip
        out.append(got.payload)
    view = EpochView(0)
    assert [_arrive(view, h, out[h]) for h in range(3)] == [False, True, True]


def test_nothing_is_refused_without_its_trainers_previous_result() -> None:
    """The epoch's first round, a previous result that has not arrived (yet), or another
    trainer's: nothing to compare, so nothing refused."""
    reset = _rounds(reset_at=1)
    assert not _arrive(EpochView(0), 1, reset[1])  # no previous round in this epoch
    view = EpochView(0)
    view.rounds[0] = RoundState(0, 1, True, {BATCHES[0]: ME}, LRS)  # nothing arrived
    assert not _arrive(view, 1, reset[1])
    view = EpochView(0)
    _arrive(view, 0, reset[0], OTHER)
    assert not _arrive(view, 1, reset[1])
    view = EpochView(0)
    _arrive(view, 0, reset[0])
    assert _arrive(view, 1, reset[1])


def test_a_run_that_does_not_verify_has_no_chain_to_check() -> None:
    plain = _trainer()
    plain.set_audit(False)
    view = EpochView(0)
    out = [
        plain.train_step(batch_of(r, samples=6), step=r + 1, lr=LR, prev_lr=LR,
                         prev_self_results=None, zero_optim=r == 0).payload
        for r in range(2)
    ]  # fmt: skip
    state = RoundState(1, 2, True, {BATCHES[1]: ME}, LRS)
    view.rounds[1] = state
    res = ReceivedResult(ME, BATCHES[1], b"\0" * 32, out[1])
    assert not breaks_chain(view, state, res, plain.format.decode(out[1]))

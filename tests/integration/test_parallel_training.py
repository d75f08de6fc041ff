"""Data and tensor parallelism inside one client, with real worker processes (CPU, gloo).

A process can join only one torch.distributed group at a time, so each parallel configuration
runs in its own freshly spawned process (never in pytest's), which plays the client: it builds a
plain DP=TP=1 `Trainer` and a `ParallelTrainer` from the same weights, drives both through the
same steps and saves what it measured; the tests assert on that. One session per configuration
keeps the worker start-ups (about 5 s of imports each on a 2-core machine) to a minimum.

Tolerances (fp32 on CPU), and why:

- gradients: per tensor, max |g_par − g_ref| ≤ 1e-5 · max |g_ref|. DP changes only the order in
  which micro-batch gradients are summed and TP the order of the row-wise layers' partial sums,
  so the gap is a few fp32 ulps (at most 1.2e-7 with DP=2 and 5e-7 with TP=2 are seen); 1e-5
  leaves a margin while a missing micro-batch or a wrong shard would be off by order 1.
- payloads: top-k indices and value signs equal, unquantized values within the same relative
  1e-5. A tie in magnitude at the top-k boundary could in principle pick a different index; with
  these fixed seeds none occurs, so the test asserts equality.
- weights after an apply of the same consensus payloads: bit-identical (`model_hash`), by
  construction, since apply runs once on the canonical copy.
- bf16 with `grad_accum_fp32`: the fp32 sums differ in the same way, and are rounded once to bf16,
  so gradients agree to within one bf16 ulp relative to the tensor (2^-7 = 7.8e-3).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest
import torch

from psyche.distro import Distro, DistroConfig, Payload, decode_payload
from psyche.distro.sample_commit import agreement
from psyche.training import (
    ParallelLayout,
    ParallelTrainer,
    Preset,
    Trainer,
    build_trainer,
    init_model,
    llama_config,
    model_hash,
)

SHAPE = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=32)
"""4 heads, MLP 128, vocab 264: everything divides by 2."""
CPU = torch.device("cpu")
MBS = 2
SAMPLES = 8  # 4 micro-batches: DP=2 sums 2+2, a different order from DP=1's 1+1+1+1
LR = 2e-3
GRAD_RTOL = 1e-5
BF16_RTOL = 2.0**-7
SESSION_TIMEOUT_S = 240.0
SPAWN = multiprocessing.get_context("spawn")
_KEEP: list[Trainer] = []


def _batch(seed: int) -> torch.Tensor:
    return torch.randint(3, 259, (SAMPLES, 32), generator=torch.Generator().manual_seed(seed))


def _distro(model: torch.nn.Module) -> Distro:
    config = DistroConfig(
        compression_decay=0.999,
        compression_topk=8,
        compression_chunk=64,
        quantize_1bit=True,
        clip_grad_norm=1.0,
    )
    return Distro(model.named_parameters(), config)


def _gap(ref: torch.Tensor, other: torch.Tensor) -> float:
    """Largest difference relative to the largest reference entry."""
    scale = float(ref.float().abs().max()) or 1.0
    return float((ref.float() - other.float()).abs().max()) / scale


def _pair(
    layout: ParallelLayout, dtype: torch.dtype = torch.float32, *, fp32_sums: bool = False
) -> tuple[Trainer, ParallelTrainer]:
    ref_model, par_model = (init_model(llama_config(SHAPE), 0, dtype) for _ in range(2))
    common: dict[str, Any] = {"micro_batch_size": MBS, "device": CPU, "grad_accum_fp32": fp32_sums}
    ref = Trainer(ref_model, _distro(ref_model), **common)
    return ref, ParallelTrainer(par_model, _distro(par_model), layout=layout, **common)


def _grad_gaps(ref: Trainer, par: Trainer, batch: torch.Tensor) -> dict[str, Any]:
    losses = (ref.accumulate_gradients(batch), par.accumulate_gradients(batch))
    theirs = dict(par.model.named_parameters())
    gaps = {}
    for name, p in ref.model.named_parameters():
        mine, other = p.grad, theirs[name].grad
        assert mine is not None and other is not None, name
        gaps[name] = _gap(mine, other)
    dtypes = {str(p.grad.dtype) for p in par.model.parameters() if p.grad is not None}
    for t in (ref, par):
        t.model.zero_grad(set_to_none=True)
    return {"gaps": gaps, "losses": losses, "grad_dtypes": dtypes}


def _commitments(ref: Trainer, par: Trainer, batch: torch.Tensor, step: int) -> dict[str, Any]:
    """Both trainers fingerprint each micro-batch of ``batch`` under the step's probe: the plain
    trainer's rows are what a verifier recomputes, the parallel one's what its client sends."""
    probe = ref.probe(step)
    for t in (ref, par):
        t.accumulate_gradients(batch, probe=probe)
        t.model.zero_grad(set_to_none=True)
    mine, theirs = ref.last_commitments, par.last_commitments
    assert mine is not None and theirs is not None
    rows = min(len(mine.values), len(theirs.values))
    return {
        "groups": (mine.group, theirs.group),
        "shapes": (tuple(mine.values.shape), tuple(theirs.values.shape)),
        "agreement": [agreement(theirs.values[i], mine.values[i]) for i in range(rows)],
        "gap": _gap(mine.values, theirs.values),
    }


def _payload_match(ref: Payload, par: Payload, ref_wire: Payload, par_wire: Payload) -> dict:
    idx = all(torch.equal(a.idx, b.idx) for a, b in zip(ref.results, par.results, strict=True))
    signs = all(
        torch.equal(a.val.sign(), b.val.sign())
        for a, b in zip(ref_wire.results, par_wire.results, strict=True)
    )
    vals = max(_gap(a.val, b.val) for a, b in zip(ref.results, par.results, strict=True))
    return {"idx_equal": idx, "signs_equal": signs, "val_gap": vals}


def _train_and_apply(ref: Trainer, par: Trainer, steps: range, prev: list[Any]) -> list[dict]:
    """Both clients train each step on the same batch, then both apply the consensus of their
    two payloads (as every client of a run applies the same set)."""
    report = []
    for step in steps:
        outs = [
            t.train_step(
                _batch(step),
                step=step,
                lr=LR,
                prev_lr=LR if prev[i] is not None else 0.0,
                prev_self_results=prev[i],
                zero_optim=prev[i] is None,
            )
            for i, t in enumerate((ref, par))
        ]
        spec = ref.distro.payload_spec  # type: ignore[attr-defined]
        wires = [decode_payload(o.payload, spec) for o in outs]
        match = _payload_match(outs[0].self_result, outs[1].self_result, *wires)
        for t in (ref, par):
            t.apply_step(wires, lr=LR)
        prev[:] = [o.self_result for o in outs]
        report.append({**match, "hashes": (model_hash(ref.model), model_hash(par.model))})
    return report


class _CancelAfter(threading.Event):
    """Reads as set from its `n`-th check on: a cancel arriving mid-step, deterministically."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.calls, self.n = 0, n

    def is_set(self) -> bool:
        self.calls += 1
        return self.calls > self.n


def _abandoned(
    par: Trainer, step: int, prev: Any, *, cancel: threading.Event | None = None, bad: bool = False
) -> dict[str, Any]:
    """A step that must not finish: what it raised, and whether the weights came back exactly.

    `bad` puts a token id outside the vocabulary in the last micro-batch, which only the worker
    trains: its embedding lookup fails there, and rank 0 must raise the worker's error."""
    batch = _batch(step)
    if bad:
        batch[-1, 5] = 10_000
    before = model_hash(par.model)
    kwargs = {"step": step, "lr": LR, "prev_lr": LR, "prev_self_results": prev}
    raised = _error(lambda: par.train_step(batch, **kwargs, zero_optim=False, cancel=cancel))
    return {"raised": raised, "restored": model_hash(par.model) == before}


def _dp_session() -> dict[str, Any]:
    """DP=2: gradients, payloads, several steps, cancellation, then bf16 + fp32 sums, close."""
    ref, par = _pair(ParallelLayout(2, 1))
    out: dict[str, Any] = {"grads": _grad_gaps(ref, par, _batch(0))}
    # 9 samples in micro-batches of 2: replicas train 3 and 2, the last one a single sample.
    odd = torch.cat([_batch(5), _batch(6)[:1]])
    out["commit"] = _commitments(ref, par, odd, step=5)
    prev: list[Any] = [None, None]
    out["steps"] = _train_and_apply(ref, par, range(1, 4), prev)
    out["cancel_before"] = _abandoned(par, 4, prev[1], cancel=_CancelAfter(0))
    out["cancel_mid"] = _abandoned(par, 4, prev[1], cancel=_CancelAfter(1))
    out["worker_failure"] = _abandoned(par, 4, prev[1], bad=True)
    out["one_micro_batch"] = _grad_gaps(ref, par, _batch(0)[:MBS])
    out["after_cancel"] = _train_and_apply(ref, par, range(4, 5), prev)
    pids = par.worker_pids
    par.close()
    par.close()
    out["closed"] = {
        "children": [p.name for p in multiprocessing.active_children()],
        "alive": [pid for pid in pids if _alive(pid)],
        "n_workers": len(pids),
        "train_after_close": _error(lambda: par.accumulate_gradients(_batch(0))),
    }
    # A second group in the same process (a client that reloads its model) with bf16 weights.
    ref16, par16 = _pair(ParallelLayout(2, 1), torch.bfloat16, fp32_sums=True)
    with par16:
        out["bf16"] = _grad_gaps(ref16, par16, _batch(0))
        out["bf16_commit"] = _commitments(ref16, par16, _batch(0), step=6)
    out["bf16"]["closed"] = par16.closed and not multiprocessing.active_children()
    return out


def _tp_session(dp: int, tp: int) -> dict[str, Any]:
    ref, par = _pair(ParallelLayout(dp, tp))
    out: dict[str, Any] = {"grads": _grad_gaps(ref, par, _batch(0))}
    out["steps"] = _train_and_apply(ref, par, range(1, 3), [None, None])
    out["eval"] = (ref.evaluate([_batch(9)]), par.evaluate([_batch(9)]))
    # 9 samples in micro-batches of 2: the short last one included.
    out["commit"] = _commitments(ref, par, torch.cat([_batch(5), _batch(6)[:1]]), step=5)
    out["pids"] = par.worker_pids
    # Left open (kept from the garbage collector): the tests see the workers stop when this
    # process exits or is killed.
    _KEEP.append(par)
    return out


def _error(fn: Callable[[], object]) -> str:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "nothing"


def _alive(pid: int) -> bool:
    """Running and not a zombie (an orphan may wait a while to be reaped by pid 1)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _child(
    fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], out: Path, linger: bool
) -> None:
    # One intra-op thread per rank: the ranks share the machine's cores, and the workers this
    # process spawns inherit the variable.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    try:
        result: dict[str, Any] = {"ok": fn(*args)}
    except BaseException:
        result = {"error": traceback.format_exc()}
    tmp = out.with_suffix(".tmp")
    torch.save(result, tmp)
    os.replace(tmp, out)  # the parent polls for `out`: it must appear complete
    if linger and "ok" in result:
        time.sleep(SESSION_TIMEOUT_S)


def _session(
    tmp: Path, fn: Callable[..., dict[str, Any]], *args: Any, linger: bool = False
) -> Iterator[tuple[dict[str, Any], BaseProcess]]:
    """Run `fn(*args)` as a fresh client process; yields its result and the process (still
    running when `linger`), which is killed afterwards in any case."""
    out = tmp / "result.pt"
    proc = SPAWN.Process(target=_child, args=(fn, args, out, linger), name=f"client-{fn.__name__}")
    proc.start()
    try:
        deadline = time.monotonic() + SESSION_TIMEOUT_S
        while not out.exists() and proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not out.exists():
            pytest.fail(f"{fn.__name__} produced no result (exit code {proc.exitcode})")
        result = torch.load(out, weights_only=False)
        if "error" in result:
            pytest.fail(f"{fn.__name__} failed:\n{result['error']}")
        if not linger:
            proc.join(SESSION_TIMEOUT_S)
        yield result["ok"], proc
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)


@pytest.fixture(scope="module")
def dp2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    for result, _ in _session(tmp_path_factory.mktemp("dp2"), _dp_session):
        yield result


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], BaseProcess]]:
    yield from _session(tmp_path_factory.mktemp("tp2"), _tp_session, 1, 2, linger=True)


def _assert_matches_plain_client(result: dict[str, Any]) -> None:
    gaps = result["grads"]["gaps"]
    assert len(gaps) == 2 + 9 * SHAPE.num_layers + 1  # every parameter got a gradient
    assert max(gaps.values()) <= GRAD_RTOL, max(gaps.items(), key=lambda kv: kv[1])
    ref_loss, par_loss = result["grads"]["losses"]
    assert par_loss == pytest.approx(ref_loss, rel=1e-6)
    hashes = [step["hashes"] for step in result["steps"]]
    for step in result["steps"]:
        assert step["idx_equal"] and step["signs_equal"], step
        assert step["val_gap"] <= GRAD_RTOL, step
    assert all(ref == par for ref, par in hashes), hashes
    assert len({ref for ref, _ in hashes}) == len(hashes)  # the weights did move every step


def test_dp2_matches_a_single_device_client(dp2: dict[str, Any]) -> None:
    _assert_matches_plain_client(dp2)
    assert len(dp2["steps"]) == 3
    # One micro-batch: rank 0 trains it, the other replica adds zeros, so the sums are exact.
    assert set(dp2["one_micro_batch"]["gaps"].values()) == {0.0}


def test_dp2_commits_to_each_micro_batch_as_a_single_device_client_does(
    dp2: dict[str, Any],
) -> None:
    """Per-sample commitments (a run that verifies): each replica fingerprints its own
    micro-batches and rank 0 sends them in batch order, so a verifier recomputing any
    micro-batch on one device agrees with the data-parallel client's row for it."""
    for key in ("commit", "bf16_commit"):
        c = dp2[key]
        assert c["groups"] == (MBS, MBS)
        assert c["shapes"][0] == c["shapes"][1], c
        assert min(c["agreement"]) >= 1 - 1e-6, c  # the verifier's line is 0.999
    assert dp2["commit"]["shapes"][0][0] == 5  # every micro-batch, the short last one included
    assert dp2["commit"]["gap"] <= GRAD_RTOL, dp2["commit"]


def test_a_cancelled_or_failed_step_restores_the_weights_and_the_next_step_works(
    dp2: dict[str, Any],
) -> None:
    for case in ("cancel_before", "cancel_mid"):
        assert dp2[case]["raised"].startswith("TrainingCancelled: "), dp2[case]
        assert dp2[case]["restored"], case
    failure = dp2["worker_failure"]
    assert failure["restored"], failure
    assert failure["raised"].startswith("RuntimeError: a parallel worker failed this step"), failure
    assert "rank 1:" in failure["raised"] and "IndexError" in failure["raised"], failure
    (after,) = dp2["after_cancel"]
    assert after["hashes"][0] == after["hashes"][1]
    assert after["idx_equal"] and after["signs_equal"] and after["val_gap"] <= GRAD_RTOL


def test_close_is_idempotent_and_leaves_no_processes(dp2: dict[str, Any]) -> None:
    closed = dp2["closed"]
    assert closed["n_workers"] == 1
    assert closed["children"] == [] and closed["alive"] == []
    assert closed["train_after_close"].startswith("RuntimeError: the parallel workers have been")


def test_bf16_gradients_are_summed_in_fp32_like_a_single_device_client(
    dp2: dict[str, Any],
) -> None:
    bf16 = dp2["bf16"]
    assert bf16["grad_dtypes"] == {"torch.bfloat16"}
    assert max(bf16["gaps"].values()) <= BF16_RTOL
    assert bf16["closed"]


def _assert_commits_as_a_single_device_client(c: dict[str, Any]) -> None:
    assert c["groups"] == (MBS, MBS)
    assert c["shapes"][0] == c["shapes"][1] and c["shapes"][0][0] == 5, c
    assert min(c["agreement"]) >= 1 - 1e-6, c  # the verifier's line is 0.999
    assert c["gap"] <= GRAD_RTOL, c


def test_tp2_commits_to_each_micro_batch_as_a_single_device_client_does(
    tp2: tuple[dict[str, Any], BaseProcess],
) -> None:
    """A TP rank holds slices of the sharded gradients: the group reads the probed coordinates
    in its slices and sums them (``sharded_probe``), so a verifier recomputing a micro-batch on
    one device agrees with the tensor-parallel client's row for it."""
    _assert_commits_as_a_single_device_client(tp2[0]["commit"])


def test_tp2_matches_a_single_device_client(tp2: tuple[dict[str, Any], BaseProcess]) -> None:
    result, _ = tp2
    _assert_matches_plain_client(result)
    ref_eval, par_eval = result["eval"]
    assert par_eval == ref_eval  # evaluate runs on the canonical model: the same computation


def test_workers_exit_when_the_client_is_killed(tp2: tuple[dict[str, Any], BaseProcess]) -> None:
    result, proc = tp2
    (pid,) = result["pids"]
    assert _alive(pid)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the worker outlived its client"


@pytest.mark.slow
def test_dp2_tp2_matches_a_single_device_client(tmp_path: Path) -> None:
    for result, proc in _session(tmp_path, _tp_session, 2, 2):
        _assert_matches_plain_client(result)
        _assert_commits_as_a_single_device_client(result["commit"])
        assert len(result["pids"]) == 3
        # The client returned without closing: the exit handler stopped the workers.
        assert proc.exitcode == 0
        assert not [pid for pid in result["pids"] if _alive(pid)]


def test_tp_that_does_not_divide_the_heads_is_refused_before_starting() -> None:
    model = init_model(llama_config(SHAPE), 0)
    with pytest.raises(ValueError, match="tensor parallelism 3 does not divide the model's 4"):
        build_trainer(model, _distro(model), micro_batch_size=MBS, device=CPU, tensor_parallelism=3)
    assert not multiprocessing.active_children()


def test_parallelism_on_mps_is_refused() -> None:
    model = init_model(llama_config(SHAPE), 0)
    with pytest.raises(ValueError, match="not supported on mps"):
        ParallelTrainer(
            model,
            _distro(model),
            micro_batch_size=MBS,
            device=torch.device("mps"),
            layout=ParallelLayout(2, 1),
        )


def test_one_device_gets_a_plain_trainer() -> None:
    model = init_model(llama_config(SHAPE), 0)
    trainer = build_trainer(model, _distro(model), micro_batch_size=MBS, device=CPU)
    assert type(trainer) is Trainer
    assert not multiprocessing.active_children()
    with pytest.raises(ValueError, match="DP=TP=1 needs no workers"):
        ParallelTrainer(
            model, _distro(model), micro_batch_size=MBS, device=CPU, layout=ParallelLayout()
        )

"""The three arms of bench/optimizers.py (AdamW, DisTrO, SparseLoCo), its figures and its report.

Shares the token stream, the schedule, forward/backward and evaluation with
bench/distro_vs_adamw.py (imported from it), so the arms differ in the optimizer alone.
"""

from __future__ import annotations

import argparse
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from distro_vs_adamw import (
    BenchConfig,
    Timer,
    distro_config,
    evaluate,
    forward_backward,
    step_slices,
)
from psyche.daemon.rounds import APPLY_LAG
from psyche.data.local import LocalDataProvider
from psyche.data.prepare import ByteTokenizer, prepare_corpus
from psyche.data.synth import synth_corpus
from psyche.distro import Distro, Payload, clip_grad_norm_, decode_payload, encode_payload
from psyche.distro import sparseloco as sl
from psyche.protocol.data_selection import BatchId
from psyche.protocol.lr_schedules import CosineLR, LearningRateSchedule
from psyche.training import (
    PRESETS,
    enable_determinism,
    load_model,
    lr_for_step,
    model_hash,
    prev_lr_for_step,
    write_model_dir,
)

BETAS = (0.9, 0.95)
TARGET_LOSS_OVER_DISTRO = 1.0
TARGET_LOSS_OVER_ADAMW = 1.05
TARGET_BYTES_RATIO = 4.0
TARGET_CODEC_FRACTION = 0.25
TARGET_APPLY = 1.5


@dataclass(slots=True)
class Arm:
    val_curve: dict[int, float] = field(default_factory=dict)
    fwd_bwd_s: float = 0.0
    codec_s: dict[str, float] = field(default_factory=dict)
    payload_bytes: list[int] = field(default_factory=list)
    final_hash: str = ""

    @property
    def final_val(self) -> float:
        return self.val_curve[max(self.val_curve)]


@dataclass(slots=True)
class Run:
    args: argparse.Namespace
    cfg: BenchConfig
    model_dir: Path
    data: LocalDataProvider
    val: torch.Tensor
    n_params: int
    initial_val: float
    shapes: list[tuple[int, ...]]


def setup(args: argparse.Namespace, root: Path, console: Console) -> Run:
    cfg = BenchConfig(
        steps=args.steps, clients=args.clients, batch_per_client=args.batch_per_client,
        seq_len=args.seq_len, val_samples=args.val_samples, seed=args.seed,
        lr_distro=args.lr_distro, lr_adamw=args.lr_adamw, lag=APPLY_LAG, evals=args.evals,
        timing_warmup=2, presets=(), final_lr_fraction=args.final_lr_fraction,
    )  # fmt: skip
    enable_determinism(args.seed)
    model_dir, text_dir, data_dir = root / "model", root / "text", root / "data"
    init = write_model_dir(model_dir, preset=PRESETS[args.preset], seed=args.seed)
    needed = (cfg.steps * cfg.global_batch + cfg.val_samples + args.codec_samples) * cfg.seq_len
    synth_corpus(text_dir, int(needed * 1.05) + 4 * cfg.seq_len, seed=args.seed)
    prepare_corpus([text_dir], ByteTokenizer(), data_dir, seq_len=cfg.seq_len, overwrite=True)
    shutil.rmtree(text_dir)
    data = LocalDataProvider(data_dir, cfg.seq_len)
    train = data.num_samples - cfg.val_samples
    if train < cfg.steps * cfg.global_batch + args.codec_samples:
        raise RuntimeError(f"corpus too small: {train} training samples")
    val = data.get_samples(BatchId(train, data.num_samples - 1))
    run = Run(args, cfg, model_dir, data, val, init.n_params, 0.0, [])
    model = load(run)
    run.initial_val = evaluate(model, val)
    run.shapes = [tuple(p.shape) for p in named(model)]
    console.print(
        f"{args.preset}: {init.n_params:,} parameters, {cfg.steps} steps × "
        f"{cfg.global_batch} samples of {cfg.seq_len} tokens; initial val {run.initial_val:.4f}"
    )
    return run


def load(run: Run) -> torch.nn.Module:
    model, _ = load_model(str(run.model_dir), device=torch.device("cpu"), dtype=torch.float32)
    return model


def named(model: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters in ascending name order (the protocol's canonical order)."""
    return [p for _, p in sorted(model.named_parameters())]


def agree(models: list[torch.nn.Module]) -> str:
    hashes = {model_hash(m) for m in models}
    if len(hashes) != 1:
        raise AssertionError(f"clients diverged: {len(hashes)} distinct weight hashes")
    return hashes.pop()


def _eval(run: Run, arm: Arm, step: int, model: torch.nn.Module, name: str, c: Console) -> None:
    arm.val_curve[step] = evaluate(model, run.val)
    c.print(f"  {name:10s} step {step:5d}/{run.cfg.steps}: val {arm.val_curve[step]:.4f}")


# --- arms ---------------------------------------------------------------------------------------


def run_adamw(run: Run, console: Console) -> Arm:
    cfg, arm, timer = run.cfg, Arm(), Timer()
    model = load(run)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr_adamw, betas=BETAS, eps=1e-8, weight_decay=0.0)
    schedule, evals = cfg.schedule(cfg.lr_adamw), set(cfg.eval_steps())
    for step in range(cfg.steps):
        timer.next_step()
        model.zero_grad(set_to_none=True)
        for batch in step_slices(cfg, step):
            t = time.perf_counter()
            forward_backward(model, run.data.get_samples(batch), 1.0 / cfg.clients)
            timer.add("fwd_bwd", t)
        clip_grad_norm_(params, 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_for_step(schedule, step)
        opt.step()
        if step + 1 in evals:
            _eval(run, arm, step + 1, model, "adamw", console)
    arm.fwd_bwd_s = timer.totals(cfg.timing_skip)["fwd_bwd"]
    return arm


def run_distro(run: Run, console: Console) -> Arm:
    cfg, arm, timer = run.cfg, Arm(), Timer()
    models = [load(run) for _ in range(cfg.clients)]
    distros = [Distro(m.named_parameters(), distro_config(cfg)) for m in models]
    spec = distros[0].payload_spec
    schedule, evals = cfg.schedule(cfg.lr_distro), set(cfg.eval_steps())
    prev: list[Payload | None] = [None] * cfg.clients
    pending: dict[int, list[bytes]] = {}

    def apply_all(wires: list[bytes], lr: float) -> None:
        for d in distros:
            t = time.perf_counter()
            decoded = [decode_payload(w, spec) for w in wires]
            timer.add("decode", t)
            t = time.perf_counter()
            d.apply(decoded, lr)
            timer.add("apply", t)

    for step in range(cfg.steps):
        timer.next_step()
        lr, prev_lr = lr_for_step(schedule, step), prev_lr_for_step(schedule, step)
        if step - APPLY_LAG in pending:
            apply_all(pending.pop(step - APPLY_LAG), lr)
        sent = []
        for i, batch in enumerate(step_slices(cfg, step)):
            models[i].zero_grad(set_to_none=True)
            t = time.perf_counter()
            distros[i].lookahead(prev_lr)
            timer.add("lookahead", t)
            t = time.perf_counter()
            forward_backward(models[i], run.data.get_samples(batch), 1.0)
            timer.add("fwd_bwd", t)
            t = time.perf_counter()
            made = distros[i].generate(
                lr, prev_lr, prev[i], step=step, batch_start=batch.start, batch_end=batch.end
            )
            prev[i] = made
            timer.add("generate", t)
            t = time.perf_counter()
            sent.append(encode_payload(made))
            timer.add("encode", t)
            arm.payload_bytes.append(len(sent[-1]))
        pending[step] = sent
        if step + 1 in evals:
            if step + 1 == cfg.steps:
                for s in sorted(pending):
                    apply_all(pending.pop(s), lr_for_step(schedule, min(s + APPLY_LAG, step)))
            agree(models)
            _eval(run, arm, step + 1, models[0], "distro", console)
    arm.final_hash = agree(models)
    totals = timer.totals(cfg.timing_skip)
    arm.fwd_bwd_s = totals.pop("fwd_bwd")
    arm.codec_s = totals
    return arm


def sparseloco_settings(args: argparse.Namespace) -> sl.SparseLoCoSettings:
    return sl.SparseLoCoSettings(
        topk_chunk=args.topk_chunk,
        topk=args.topk,
        value_bits=args.value_bits,
        error_decay=args.error_decay,
        outer_momentum=args.outer_momentum,
    )


def _error_scale(schedule: LearningRateSchedule, rnd: int, h: int) -> float:
    """`--error-lr-scale`: how far the inner LR fell from the previous round's start to this
    one's (what the error buffers hold was earned at the old rate); 1 while it rises, in the
    first round and from a zero LR."""
    before = lr_for_step(schedule, (rnd - 1) * h) if rnd else 0.0
    return min(1.0, lr_for_step(schedule, rnd * h) / before) if before > 0 else 1.0


def _outer_lr(args: argparse.Namespace, schedule: CosineLR, step: int) -> float:
    """`--outer-lr-final`: the outer LR follows the inner schedule's cosine from `--outer-lr`
    down to it (so the effective rate, inner × outer, anneals further); constant without it."""
    if args.outer_lr_final is None or step < schedule.warmup_steps:
        return float(args.outer_lr)
    base, final = schedule.base_lr, schedule.final_lr
    progress = min(1.0, max(0.0, (lr_for_step(schedule, step) - final) / (base - final)))
    return float(args.outer_lr_final + (args.outer_lr - args.outer_lr_final) * progress)


def run_sparseloco(run: Run, console: Console) -> Arm:
    cfg, args, arm, timer = run.cfg, run.args, Arm(), Timer()
    settings = sparseloco_settings(args)
    models = [load(run) for _ in range(cfg.clients)]
    params = [named(m) for m in models]
    shapes = [tuple(p.shape) for p in params[0]]
    states = [sl.SparseLoCoState(shapes, settings) for _ in models]
    inner = [
        torch.optim.AdamW(ps, lr=args.lr_inner, betas=BETAS, eps=1e-8, weight_decay=0.0)
        for ps in params
    ]
    schedule, evals = cfg.schedule(args.lr_inner), set(cfg.eval_steps())
    h = args.inner_steps
    for rnd in range(cfg.steps // h):
        timer.next_step()
        start = [p.detach().clone() for p in params[0]]  # identical on every client
        fall = _error_scale(schedule, rnd, h) if args.error_lr_scale else 1.0
        outer = _outer_lr(args, schedule, (rnd + 1) * h - 1)
        wires = []
        for i, model in enumerate(models):
            for step in range(rnd * h, (rnd + 1) * h):
                batch = step_slices(cfg, step)[i]
                model.zero_grad(set_to_none=True)
                t = time.perf_counter()
                forward_backward(model, run.data.get_samples(batch), 1.0)
                timer.add("fwd_bwd", t)
                clip_grad_norm_(params[i], 1.0)
                for g in inner[i].param_groups:
                    g["lr"] = lr_for_step(schedule, step)
                inner[i].step()
            if fall < 1.0:
                for e in states[i].error:
                    e.mul_(fall)
            t = time.perf_counter()
            wires.append(sl.encode_round(states[i], start, params[i], step=rnd, nonce=i))
            timer.add("encode", t)
            arm.payload_bytes.append(len(wires[-1]))
        for i in range(cfg.clients):
            t = time.perf_counter()
            decoded = [sl.decode_payload(w, shapes, settings) for w in wires]
            timer.add("decode", t)
            t = time.perf_counter()
            with torch.no_grad():
                for p, s in zip(params[i], start, strict=True):
                    p.copy_(s)
            sl.outer_apply(params[i], decoded, states[i], settings, outer)
            timer.add("apply", t)
        done = (rnd + 1) * h
        if any(rnd * h < e <= done for e in evals):
            agree(models)
            _eval(run, arm, done, models[0], "sparseloco", console)
    arm.final_hash = agree(models)
    totals = timer.totals(min(1, cfg.steps // h - 1))
    arm.fwd_bwd_s = totals.pop("fwd_bwd")
    arm.codec_s = totals
    return arm


def fwd_bwd_seconds(run: Run, samples: int, repeat: int = 3) -> float:
    """Median forward+backward seconds of `samples` training samples on the run's model."""
    model = load(run)
    tokens = run.data.get_samples(BatchId(0, samples - 1))
    times = []
    for _ in range(repeat + 1):
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        forward_backward(model, tokens, 1.0)
        times.append(time.perf_counter() - t)
    return sorted(times[1:])[len(times[1:]) // 2]


def apply_cost_figures(args: argparse.Namespace) -> dict[str, Any]:
    from apply_cost import apply_cost, preset_shapes

    return apply_cost(preset_shapes(args.preset), 64, 8, args.clients, args.apply_repeat)


# --- figures and report -------------------------------------------------------------------------


def figures(
    args: argparse.Namespace,
    run: Run,
    res: dict[str, Arm],
    fwd16: float,
    apply: dict[str, Any],
    wall: float,
) -> dict[str, Any]:
    cfg, k, h = run.cfg, run.cfg.clients, args.inner_steps
    tokens_client_step = cfg.batch_per_client * cfg.seq_len
    fig: dict[str, Any] = {
        "preset": args.preset,
        "n_params": run.n_params,
        "steps": cfg.steps,
        "clients": k,
        "batch_per_client": cfg.batch_per_client,
        "seq_len": cfg.seq_len,
        "tokens_total": cfg.steps * cfg.global_batch * cfg.seq_len,
        "initial_val_loss": run.initial_val,
        "val_curve": {n: {str(s): v for s, v in a.val_curve.items()} for n, a in res.items()},
        "final_val_loss": {n: a.final_val for n, a in res.items()},
        "apply_over_matmul_decode": apply["apply_over_matmul_decode"],
        "apply_cost": apply,
        "bf16_grad_bytes": 2 * run.n_params,
        "fwd_bwd_s_codec_samples": fwd16,
        "codec_samples": args.codec_samples,
        "wall_s": wall,
        "torch_threads": torch.get_num_threads(),
        "lr": {"adamw": args.lr_adamw, "distro": args.lr_distro, "sparseloco_inner": args.lr_inner},
        "final_lr_fraction": args.final_lr_fraction,
        "sparseloco": {
            "inner_steps": h,
            "topk_chunk": args.topk_chunk,
            "topk": args.topk,
            "value_bits": args.value_bits,
            "error_decay": args.error_decay,
            "outer_lr": args.outer_lr,
            "outer_momentum": args.outer_momentum,
            "error_lr_scale": args.error_lr_scale,
            "outer_lr_final": args.outer_lr_final,
        },
    }
    if "distro" in res:
        d = res["distro"]
        client_steps = cfg.timed_steps * k
        fig["distro_bytes_per_client_step"] = sum(d.payload_bytes) / len(d.payload_bytes)
        fig["distro_bytes_per_token"] = fig["distro_bytes_per_client_step"] / tokens_client_step
        fig["distro_codec_s_per_client_step"] = {p: s / client_steps for p, s in d.codec_s.items()}
        fig["distro_codec_fraction_of_fwd_bwd"] = sum(d.codec_s.values()) / d.fwd_bwd_s
        fig["distro_model_hash"] = d.final_hash
    if "sparseloco" in res:
        s = res["sparseloco"]
        rounds = cfg.steps // h
        client_rounds = (rounds - min(1, rounds - 1)) * k
        per_round = {p: t / client_rounds for p, t in s.codec_s.items()}
        codec = sum(per_round.values())
        size = s.payload_bytes[0]
        fig.update(
            sparseloco_bytes_per_client_round=size,
            sparseloco_max_payload_bytes=sl.max_payload_bytes(
                run.shapes, sparseloco_settings(args)
            ),
            sparseloco_bytes_per_token=size / (h * tokens_client_step),
            sparseloco_density=args.topk / args.topk_chunk,
            sparseloco_codec_s_per_client_round=per_round,
            sparseloco_fwd_bwd_s_per_client_round=s.fwd_bwd_s / client_rounds,
            codec_fraction_of_fwd_bwd=codec / fwd16,
            codec_fraction_of_round=codec / (s.fwd_bwd_s / client_rounds),
            sparseloco_model_hash=s.final_hash,
        )
    final = fig["final_val_loss"]
    if {"sparseloco", "adamw"} <= res.keys():
        fig["loss_ratio_multistep_over_adamw"] = final["sparseloco"] / final["adamw"]
    if {"sparseloco", "distro"} <= res.keys():
        fig["loss_ratio_multistep_over_distro"] = final["sparseloco"] / final["distro"]
        fig["bytes_per_token_distro_over_multistep"] = (
            fig["distro_bytes_per_token"] / fig["sparseloco_bytes_per_token"]
        )
    if {"distro", "adamw"} <= res.keys():
        fig["loss_ratio_distro_over_adamw"] = final["distro"] / final["adamw"]
    fig["targets"] = {
        "loss_ratio_multistep_over_distro_max": TARGET_LOSS_OVER_DISTRO,
        "loss_ratio_multistep_over_adamw_max": TARGET_LOSS_OVER_ADAMW,
        "bytes_per_token_distro_over_multistep_min": TARGET_BYTES_RATIO,
        "codec_fraction_of_fwd_bwd_max": TARGET_CODEC_FRACTION,
        "apply_over_matmul_decode_max": TARGET_APPLY,
    }
    return fig


def _verdict(ok: bool) -> str:
    return "[green]met[/green]" if ok else "[red]missed[/red]"


def report(fig: dict[str, Any], console: Console) -> None:
    t = Table(title=f"{fig['preset']}: {fig['clients']} clients, {fig['steps']} steps")
    for col in ("figure", "value", "target", ""):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for arm, loss in fig["final_val_loss"].items():
        t.add_row(f"final val loss, {arm}", f"{loss:.4f}", "", "")
    rows = (
        ("loss_ratio_multistep_over_distro", "≤", TARGET_LOSS_OVER_DISTRO),
        ("loss_ratio_multistep_over_adamw", "≤", TARGET_LOSS_OVER_ADAMW),
        ("bytes_per_token_distro_over_multistep", "≥", TARGET_BYTES_RATIO),
        ("codec_fraction_of_fwd_bwd", "≤", TARGET_CODEC_FRACTION),
        ("apply_over_matmul_decode", "≤", TARGET_APPLY),
    )
    for key, op, target in rows:
        if key in fig:
            v = fig[key]
            ok = v <= target if op == "≤" else v >= target
            t.add_row(key, f"{v:.4f}", f"{op} {target:g}", _verdict(ok))
    for key in ("distro_bytes_per_token", "sparseloco_bytes_per_token", "codec_fraction_of_round"):
        if key in fig:
            t.add_row(key, f"{fig[key]:.4f}", "", "")
    console.print(t)
    if "sparseloco_codec_s_per_client_round" in fig:
        parts = fig["sparseloco_codec_s_per_client_round"]
        console.print(
            "SparseLoCo per client and round: "
            + ", ".join(f"{p} {s * 1e3:.1f} ms" for p, s in parts.items())
            + f"; forward+backward of {fig['codec_samples']} samples "
            f"{fig['fwd_bwd_s_codec_samples'] * 1e3:.0f} ms; payload "
            f"{fig['sparseloco_bytes_per_client_round']:,} B "
            f"({fig['bf16_grad_bytes'] / fig['sparseloco_bytes_per_client_round']:.0f}× vs bf16)"
        )
    if math.isfinite(fig["wall_s"]):
        console.print(f"wall {fig['wall_s']:.0f} s, torch threads {fig['torch_threads']}")

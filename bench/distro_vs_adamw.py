"""DisTrO vs data-parallel AdamW on the tiny model: bytes on the wire, final loss, codec cost.

Method. One process builds the `tiny` Llama preset (`write_model_dir`, seed `--seed`) and a
synthetic corpus (`synth_corpus` → `prepare_corpus` with `ByteTokenizer`, 128-token samples) in
a temporary directory (or `--workdir`). The last `--val-samples` samples are held out for
validation and never trained on. Step `s` trains the global batch of samples
`[s·B, (s+1)·B)` with `B = clients × batch-per-client`, cut into one contiguous slice per client
by `get_batch_ids_for_round` (the protocol's own assignment). Both arms see exactly these tokens,
start from the same weights, use the same cosine LR shape (`CosineLR`: linear warmup over 10 % of
the steps from 0, cosine decay to base/10) and the same global gradient-norm clip (1.0):

(a) DisTrO: K clients, each with its own model copy and `Distro` optimizer (chunk 64, top-k 8,
    1-bit, residual decay 0.999). Each step every client runs forward/backward on its slice,
    `generate` (residual update, DCT, top-k) and `encode_payload` (the 1-bit wire bytes); then
    every client decodes all K byte strings itself with `decode_payload` and `apply`s them. The
    K models are checked to hold bit-identical weights (`model_hash`) at every evaluation and at
    the end; a mismatch aborts the run.
(b) AdamW (betas 0.9/0.95, eps 1e-8, no weight decay, like DisTrO here): one model; the gradient is
    the mean of the K slices' gradients (backward of each slice's loss / K), i.e. exactly what a
    K-way data-parallel all-reduce would produce.

Figures, all from this one run: the payload size in both wire formats (every payload is
encoded as v2, the default, and as v1, and every client decodes both, each timed; v1 payloads
all have exactly `PayloadSpec.max_bytes` bytes, v2 ones vary by a few header bytes) against
`2 × n_params` bytes of a bf16 gradient and against the entropy bound (log2 C(totalk, k) bits
per tile plus one per sign); the final validation loss of each arm and their ratio; and, per
client and step, DisTrO's codec time (lookahead + generate + encode + decode of K payloads +
apply, each timed with `time.perf_counter`) over its forward+backward time, for each format,
also in ns per parameter. `--apply-format` picks which decoded payloads are applied (v2 by
default); the two carry the same pairs, so the weights do not depend on it (bench/README.md
shows both runs' hashes). The issue's JSON keys describe v2; v1's figures are under `"v1"`.

Then, per preset (`--presets`, default tiny, small and medium), one client of the same
pipeline (lag 2, K payloads decoded and applied per step: its own, standing in for its peers')
gives both formats' sizes, the entropy bound and every codec part against forward+backward on
the same per-client batch (`profile_preset`, `--profile-steps` timed steps after 2 untimed).

Decisions and trade-offs:

- Not a round engine: this is a study of the optimizer alone (no coordinator, no network, no
  witnesses), so it drives `Distro` directly and can time each codec part, which the round
  engine (`psyche.daemon.engine`, driven by the client process and by `psyche demo`) does not
  expose. What it shares with the engine is the pipeline's arithmetic, from the same owners: the
  lag (`psyche.daemon.rounds.APPLY_LAG`) and the LRs (`lr_for_step`, `prev_lr_for_step`).
- Apply lag: `--lag 2` (`APPLY_LAG`) by default, the protocol's pipeline: at step `s` every
  client applies the payloads of step `s − 2` with step `s`'s LR, then takes its
  `lookahead(lr(s − 1))`, trains and calls `generate`; the last two steps' payloads are drained
  (applied) after the loop, before the final evaluation. The simpler `--lag 0` applies a step's
  payloads right after they are made (no lookahead then, since nothing is in flight) and isolates
  compression from staleness. Lag 2 is the default because it is what psyche runs and, on this
  setting, it was not worse (final val 1.68 vs 1.77 at lag 0, quick, LR 3e-3); AdamW stays
  synchronous in both cases, as data-parallel training would be.
- LRs: the best of a light sweep per arm on the quick setting (final val loss, seed 0). DisTrO
  (lag 0): 1e-3 → 2.35, 2e-3 → 1.79, 3e-3 → 1.77, 5e-3 → 1.93, 1e-2 → 2.15, 3e-2 → 2.49; lag 2:
  2e-3 → 1.75, 3e-3 → 1.68, 4e-3 → 1.95. AdamW: 1e-3 → 1.47, 2e-3 → 0.93, 3e-3 → 0.70,
  5e-3 → 0.75, 1e-2 → 1.70. Both use 3e-3 (`--lr-distro`, `--lr-adamw` override); nothing else
  differs between the arms.
- Compute runs in fp32 on the CPU (the repo's CPU dtype); payload values go on the wire as signs,
  so the wire size does not depend on it. The bf16 baseline is the 2 bytes per parameter of an
  uncompressed gradient exchange.
- Codec time is summed over clients and divided by their summed forward+backward time, i.e. the
  per-client overhead; the first `--timing-warmup` steps (default 5) are left out, since first
  touches of new memory and the DCT basis cache inflate them (`codec_fraction_all_steps` in the
  JSON keeps them). Each client decodes all K payloads, its own included (a client verifies
  what it downloads), so decode and apply grow with K. Codec work is proportional to the
  parameter count and forward+backward to the tokens, so the fraction falls as the per-client
  batch grows; `batch_per_client_for_codec_target` extrapolates where it would reach 25 %.
- The simulation is sequential: K clients' work adds up on one machine, so the wall time is K
  times a real client's, while the two timed quantities scale alike. On a shared machine small
  kernels suffer most from preemption (two OpenMP threads wait on each other), which inflates
  the codec fraction; the median per-step fraction is reported too.

Usage: `python bench/distro_vs_adamw.py --quick [--json out.json]` (100 steps, 84 s on two idle
cores); without `--quick`, 400 steps. See bench/README.md for measured figures and why targets
are missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from rich.console import Console
from rich.table import Table

from apply_cost import apply_cost, preset_shapes  # bench/, this script's directory
from psyche.daemon.rounds import APPLY_LAG
from psyche.data.local import LocalDataProvider
from psyche.data.prepare import ByteTokenizer, prepare_corpus
from psyche.data.synth import synth_corpus
from psyche.distro import (
    PAYLOAD_VERSION,
    Distro,
    DistroConfig,
    Payload,
    PayloadSpec,
    TensorSpec,
    clip_grad_norm_,
    decode_payload,
    encode_payload,
)
from psyche.distro.elias_fano import EliasFano
from psyche.protocol.data_selection import BatchId, get_batch_ids_for_round
from psyche.protocol.lr_schedules import CosineLR
from psyche.training import (
    PRESETS,
    enable_determinism,
    load_model,
    lr_for_step,
    model_hash,
    prev_lr_for_step,
    write_model_dir,
)

TARGET_COMPRESSION = 550.0
"""v2's target on tiny (issue 17; v1's was 450×); medium's is `TARGET_COMPRESSION_MEDIUM`."""
TARGET_COMPRESSION_MEDIUM = 650.0
TARGET_LOSS_RATIO = 1.05
TARGET_CODEC_FRACTION = 0.25

QUICK_STEPS = 100
DEFAULT_STEPS = 400
DEFAULT_LR_DISTRO = 3e-3
DEFAULT_LR_ADAMW = 3e-3
CODEC_PARTS = ("lookahead", "generate", "encode", "decode", "apply")
"""The codec's parts in the default format (v2); v1's encode and decode are timed beside them."""
V1_PARTS = ("lookahead", "generate", "encode_v1", "decode_v1", "apply")
FORMATS = (1, 2)
PRESET_NAMES = ("tiny", "small", "medium")


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    steps: int
    clients: int
    batch_per_client: int
    seq_len: int
    val_samples: int
    seed: int
    lr_distro: float
    lr_adamw: float
    lag: int
    evals: int
    timing_warmup: int
    apply_format: int = PAYLOAD_VERSION
    presets: tuple[str, ...] = PRESET_NAMES
    profile_steps: int = 4
    profile_warmup: int = 2
    chunk: int = 64
    topk: int = 8
    compression_decay: float = 0.999
    clip_grad_norm: float = 1.0
    weight_decay: float = 0.0
    warmup_fraction: float = 0.1
    final_lr_fraction: float = 0.1

    @property
    def global_batch(self) -> int:
        return self.clients * self.batch_per_client

    @property
    def timing_skip(self) -> int:
        """Leading steps left out of the timings (never all of them)."""
        return min(self.timing_warmup, self.steps - 1)

    @property
    def timed_steps(self) -> int:
        return self.steps - self.timing_skip

    def schedule(self, base_lr: float) -> CosineLR:
        return CosineLR(
            base_lr=base_lr,
            warmup_steps=max(1, round(self.steps * self.warmup_fraction)),
            warmup_init_lr=0.0,
            total_steps=self.steps,
            final_lr=base_lr * self.final_lr_fraction,
        )

    def eval_steps(self) -> list[int]:
        """Steps after which the validation loss is measured (always including the last)."""
        n = max(1, min(self.evals, self.steps))
        return sorted({round(self.steps * (i + 1) / n) for i in range(n)})


@dataclass(slots=True)
class Workspace:
    model_dir: Path
    data_dir: Path
    n_params: int
    init_hash: str
    train_samples: int
    val: torch.Tensor


@dataclass(slots=True)
class ArmResult:
    name: str
    train_losses: list[float] = field(default_factory=list)
    val_curve: dict[int, float] = field(default_factory=dict)
    fwd_bwd_s: float = 0.0
    optimizer_s: dict[str, float] = field(default_factory=dict)
    final_hash: str = ""
    payload_sizes: dict[int, list[int]] = field(default_factory=lambda: {v: [] for v in FORMATS})
    step_times: list[dict[str, float]] = field(default_factory=list)

    @property
    def final_val(self) -> float:
        return self.val_curve[max(self.val_curve)]

    @property
    def optimizer_total_s(self) -> float:
        return sum(self.optimizer_s.values())


# --- setup --------------------------------------------------------------------------------------


def prepare_workspace(cfg: BenchConfig, root: Path, console: Console) -> Workspace:
    """Write the model and the corpus under `root`; return what both arms need."""
    model_dir, text_dir, data_dir = root / "model", root / "text", root / "data"
    for d in (model_dir, text_dir):
        if d.exists():
            shutil.rmtree(d)  # only our own subdirectories; a stale corpus would leak in
    init = write_model_dir(model_dir, preset=PRESETS["tiny"], seed=cfg.seed)
    # Every trained sample is fresh (no repetition); 5 % spare covers the partial last file.
    needed = (cfg.steps * cfg.global_batch + cfg.val_samples) * cfg.seq_len
    synth_corpus(text_dir, int(needed * 1.05) + 4 * cfg.seq_len, seed=cfg.seed)
    prepare_corpus([text_dir], ByteTokenizer(), data_dir, seq_len=cfg.seq_len, overwrite=True)
    data = LocalDataProvider(data_dir, cfg.seq_len)
    train_samples = data.num_samples - cfg.val_samples
    if train_samples < cfg.steps * cfg.global_batch:
        raise RuntimeError(
            f"corpus has {train_samples} training samples, {cfg.steps * cfg.global_batch} needed"
        )
    val = data.get_samples(BatchId(train_samples, data.num_samples - 1))
    console.print(
        f"model: tiny, {init.n_params:,} parameters; corpus: {data.num_samples:,} samples of "
        f"{cfg.seq_len} tokens ({cfg.val_samples} held out); workdir {root}"
    )
    return Workspace(model_dir, data_dir, init.n_params, init.model_hash, train_samples, val)


def step_slices(cfg: BenchConfig, step: int) -> list[BatchId]:
    """The clients' slices of step `step`'s global batch (protocol assignment, in order)."""
    return get_batch_ids_for_round(step * cfg.global_batch, cfg.global_batch, cfg.clients)


def load(ws: Workspace) -> torch.nn.Module:
    model, _ = load_model(str(ws.model_dir), device=torch.device("cpu"), dtype=torch.float32)
    if model_hash(model) != ws.init_hash:
        raise RuntimeError("loaded weights differ from the ones written")
    return model


# --- shared pieces (identical for both arms) ------------------------------------------------------


def forward_backward(model: torch.nn.Module, tokens: torch.Tensor, scale: float) -> float:
    """Accumulate `scale ×` the gradient of the mean token loss of `tokens`; return the loss."""
    loss: torch.Tensor = model(input_ids=tokens, labels=tokens, use_cache=False).loss
    (loss * scale).backward()
    return float(loss.detach())


@torch.no_grad()
def evaluate(model: torch.nn.Module, val: torch.Tensor, micro: int = 16) -> float:
    """Mean token cross-entropy over the held-out samples (equal lengths, so a plain mean)."""
    model.eval()
    losses = [
        float(model(input_ids=chunk, labels=chunk, use_cache=False).loss)
        for chunk in val.split(micro)
    ]
    model.train()
    sizes = [chunk.shape[0] for chunk in val.split(micro)]
    return sum(loss * n for loss, n in zip(losses, sizes, strict=True)) / sum(sizes)


class Timer:
    """Sums `time.perf_counter` intervals per label and step."""

    def __init__(self) -> None:
        self.per_step: list[dict[str, float]] = []

    def next_step(self) -> None:
        self.per_step.append({})

    def add(self, label: str, started: float) -> None:
        row = self.per_step[-1]
        row[label] = row.get(label, 0.0) + time.perf_counter() - started

    def totals(self, skip: int) -> dict[str, float]:
        """Seconds per label over all steps but the first `skip` (fewer if the run is short)."""
        rows = self.per_step[min(skip, len(self.per_step) - 1) :]
        out: dict[str, float] = {}
        for row in rows:
            for label, s in row.items():
                out[label] = out.get(label, 0.0) + s
        return out


# --- arm (a): DisTrO ------------------------------------------------------------------------------


@dataclass(slots=True)
class Client:
    model: torch.nn.Module
    distro: Distro
    prev_self: Payload | None = None
    nonce: int = 0


def distro_config(cfg: BenchConfig) -> DistroConfig:
    return DistroConfig(
        compression_decay=cfg.compression_decay,
        compression_topk=cfg.topk,
        compression_chunk=cfg.chunk,
        quantize_1bit=True,
        clip_grad_norm=cfg.clip_grad_norm,
        weight_decay=cfg.weight_decay,
    )


def run_distro(
    cfg: BenchConfig, ws: Workspace, data: LocalDataProvider, console: Console
) -> tuple[ArmResult, dict[int, PayloadSpec]]:
    """Arm (a). Every payload is encoded in both formats and every client decodes both (each
    timed on its own); the `cfg.apply_format` decodes are applied. The two formats carry the
    same (index, value) pairs, so the choice changes no weight (bench/README.md shows both)."""
    dcfg = distro_config(cfg)
    clients = []
    for _ in range(cfg.clients):
        model = load(ws)
        clients.append(Client(model, Distro(model.named_parameters(), dcfg)))
    base = clients[0].distro.payload_spec
    specs = {v: dataclasses.replace(base, version=v) for v in FORMATS}
    schedule = cfg.schedule(cfg.lr_distro)
    evals = set(cfg.eval_steps())
    timer = Timer()
    result = ArmResult("distro")
    pending: dict[int, dict[int, list[bytes]]] = {}
    labels = {1: ("encode_v1", "decode_v1"), 2: ("encode", "decode")}

    def lr(step: int) -> float:
        return lr_for_step(schedule, step)

    def apply_all(payloads: dict[int, list[bytes]], step_lr: float) -> None:
        for c in clients:
            decoded: dict[int, list[Payload]] = {}
            for v in FORMATS:
                t = time.perf_counter()
                decoded[v] = [decode_payload(b, specs[v]) for b in payloads[v]]  # each client
                timer.add(labels[v][1], t)
            t = time.perf_counter()
            c.distro.apply(decoded[cfg.apply_format], step_lr)
            timer.add("apply", t)

    for step in range(cfg.steps):
        timer.next_step()
        if cfg.lag and step - cfg.lag in pending:
            apply_all(pending.pop(step - cfg.lag), lr(step))
        losses: list[float] = []
        sent: dict[int, list[bytes]] = {v: [] for v in FORMATS}
        for c, batch in zip(clients, step_slices(cfg, step), strict=True):
            tokens = data.get_samples(batch)
            c.model.zero_grad(set_to_none=True)
            prev_lr = prev_lr_for_step(schedule, step)
            if cfg.lag:
                t = time.perf_counter()
                c.distro.lookahead(prev_lr)
                timer.add("lookahead", t)
            t = time.perf_counter()
            losses.append(forward_backward(c.model, tokens, 1.0))
            timer.add("fwd_bwd", t)
            t = time.perf_counter()
            payload = c.distro.generate(
                lr(step),
                prev_lr,
                c.prev_self,
                step=step,
                batch_start=batch.start,
                batch_end=batch.end,
                trainer_nonce=c.nonce,
            )
            timer.add("generate", t)
            for v in FORMATS:
                t = time.perf_counter()
                wire = encode_payload(payload, v)
                timer.add(labels[v][0], t)
                result.payload_sizes[v].append(len(wire))
                sent[v].append(wire)
            c.prev_self, c.nonce = payload, c.nonce + 1
        result.train_losses.append(sum(losses) / len(losses))
        if cfg.lag:
            pending[step] = sent
        else:
            apply_all(sent, lr(step))
        if step + 1 in evals:
            if step + 1 == cfg.steps:  # drain: the last rounds' payloads land before the end
                for s in sorted(pending):
                    apply_all(pending.pop(s), lr(s + cfg.lag))
            _check_agreement(clients)
            result.val_curve[step + 1] = evaluate(clients[0].model, ws.val)
            console.print(
                f"  distro step {step + 1:4d}/{cfg.steps}: train {result.train_losses[-1]:.4f}"
                f"  val {result.val_curve[step + 1]:.4f}"
            )
    result.final_hash = _check_agreement(clients)
    totals = timer.totals(cfg.timing_skip)
    result.fwd_bwd_s = totals["fwd_bwd"]
    result.optimizer_s = {part: totals.get(part, 0.0) for part in (*CODEC_PARTS, *V1_PARTS)}
    result.step_times = timer.per_step
    return result, specs


def _check_agreement(clients: Sequence[Client]) -> str:
    hashes = {model_hash(c.model) for c in clients}
    if len(hashes) != 1:
        raise AssertionError(f"DisTrO clients diverged: {len(hashes)} distinct weight hashes")
    return hashes.pop()


# --- arm (b): AdamW -------------------------------------------------------------------------------


def run_adamw(
    cfg: BenchConfig, ws: Workspace, data: LocalDataProvider, console: Console
) -> ArmResult:
    model = load(ws)
    params = [p for p in model.parameters() if p.requires_grad]
    schedule = cfg.schedule(cfg.lr_adamw)
    opt = torch.optim.AdamW(
        params, lr=cfg.lr_adamw, betas=(0.9, 0.95), eps=1e-8, weight_decay=cfg.weight_decay
    )
    evals = set(cfg.eval_steps())
    timer = Timer()
    result = ArmResult("adamw")
    for step in range(cfg.steps):
        timer.next_step()
        model.zero_grad(set_to_none=True)
        losses = []
        for batch in step_slices(cfg, step):
            tokens = data.get_samples(batch)
            t = time.perf_counter()
            losses.append(forward_backward(model, tokens, 1.0 / cfg.clients))
            timer.add("fwd_bwd", t)
        t = time.perf_counter()
        clip_grad_norm_(params, cfg.clip_grad_norm)
        for group in opt.param_groups:
            group["lr"] = lr_for_step(schedule, step)
        opt.step()
        timer.add("step", t)
        result.train_losses.append(sum(losses) / len(losses))
        if step + 1 in evals:
            result.val_curve[step + 1] = evaluate(model, ws.val)
            console.print(
                f"  adamw  step {step + 1:4d}/{cfg.steps}: train {result.train_losses[-1]:.4f}"
                f"  val {result.val_curve[step + 1]:.4f}"
            )
    result.final_hash = model_hash(model)
    totals = timer.totals(cfg.timing_skip)
    result.fwd_bwd_s = totals["fwd_bwd"]
    result.optimizer_s = {"step": totals["step"]}
    result.step_times = timer.per_step
    return result


# --- codec profile per preset ------------------------------------------------------------------


PROFILE_PARTS = ("lookahead", "generate", "encode_v1", "encode", "decode_v1", "decode", "apply")


def profile_preset(
    name: str, cfg: BenchConfig, root: Path, data: LocalDataProvider, console: Console
) -> dict[str, Any]:
    """One client of `cfg.clients` on preset `name`: payload sizes in both formats, the entropy
    bound, and the codec's parts against forward+backward on `cfg.batch_per_client` samples.

    The client runs the real pipeline at lag 2 (apply of step s − 2, lookahead, forward and
    backward, generate, encode), and decodes and applies `cfg.clients` payloads per step: its
    own `cfg.clients` times, standing in for its peers' (same sizes, same work). The weights do
    not matter here, so a constant LR is used; the first `cfg.profile_warmup` steps are not timed.
    """
    model_dir = root / f"model-{name}"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    init = write_model_dir(model_dir, preset=PRESETS[name], seed=cfg.seed)
    model, _ = load_model(str(model_dir), device=torch.device("cpu"), dtype=torch.float32)
    distro = Distro(model.named_parameters(), distro_config(cfg))
    specs = {v: dataclasses.replace(distro.payload_spec, version=v) for v in FORMATS}
    labels = {1: ("encode_v1", "decode_v1"), 2: ("encode", "decode")}
    timer, sizes = Timer(), {v: 0 for v in FORMATS}
    pending: list[dict[int, bytes]] = []
    prev: Payload | None = None
    lr = cfg.lr_distro
    steps = cfg.profile_warmup + cfg.profile_steps
    for step in range(steps):
        timer.next_step()
        if len(pending) > APPLY_LAG - 1:
            wires = pending.pop(0)
            decoded: dict[int, list[Payload]] = {}
            for v in FORMATS:
                t = time.perf_counter()
                decoded[v] = [decode_payload(wires[v], specs[v]) for _ in range(cfg.clients)]
                timer.add(labels[v][1], t)
            t = time.perf_counter()
            distro.apply(decoded[PAYLOAD_VERSION], lr)
            timer.add("apply", t)
        t = time.perf_counter()
        distro.lookahead(lr)
        timer.add("lookahead", t)
        batch = BatchId(step * cfg.batch_per_client, (step + 1) * cfg.batch_per_client - 1)
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        forward_backward(model, data.get_samples(batch), 1.0)
        timer.add("fwd_bwd", t)
        t = time.perf_counter()
        prev = distro.generate(
            lr, lr, prev, step=step, batch_start=batch.start, batch_end=batch.end
        )
        timer.add("generate", t)
        wires = {}
        for v in FORMATS:
            t = time.perf_counter()
            wires[v] = encode_payload(prev, v)
            timer.add(labels[v][0], t)
            sizes[v] = max(sizes[v], len(wires[v]))
        pending.append(wires)
    rows = timer.per_step[cfg.profile_warmup :]
    seconds = {part: sum(r.get(part, 0.0) for r in rows) / len(rows) for part in PROFILE_PARTS}
    fwd_bwd = sum(r["fwd_bwd"] for r in rows) / len(rows)
    n = init.n_params
    bound = entropy_bound_bytes(specs[2])
    out: dict[str, Any] = {
        "n_params": n,
        "bf16_grad_bytes": 2 * n,
        "entropy_bound_bytes": bound,
        "entropy_bound_ratio_vs_bf16": 2 * n / bound,
        "fwd_bwd_ms": fwd_bwd * 1e3,
        "fwd_bwd_ns_per_param": fwd_bwd * 1e9 / n,
        "ms_per_part": {part: s * 1e3 for part, s in seconds.items()},
        "ns_per_param": {part: s * 1e9 / n for part, s in seconds.items()},
    }
    for v, (enc, dec) in labels.items():
        codec = sum(seconds[p] for p in ("lookahead", "generate", enc, dec, "apply"))
        out[f"v{v}"] = {
            "bytes_per_client_step": sizes[v],
            "max_bytes": specs[v].max_bytes,
            "compression_ratio_vs_bf16": 2 * n / sizes[v],
            "codec_fraction_of_fwd_bwd": codec / fwd_bwd,
        }
    ratio = {v: out[f"v{v}"]["compression_ratio_vs_bf16"] for v in FORMATS}
    console.print(
        f"  {name}: {n:,} params; v1 {sizes[1]:,} B ({ratio[1]:.1f}×),"
        f" v2 {sizes[2]:,} B ({ratio[2]:.1f}×), bound"
        f" {bound:,.0f} B ({out['entropy_bound_ratio_vs_bf16']:.1f}×); codec v2"
        f" {out['v2']['codec_fraction_of_fwd_bwd']:.1%} of forward+backward"
    )
    del model, distro
    return out


# --- report ---------------------------------------------------------------------------------------


def _group(t: TensorSpec) -> str:
    if len(t.shape) == 1:
        return "norms (1-D, 64-wide chunks)"
    if "embed" in t.name or "lm_head" in t.name:
        return "embeddings + lm_head (44×64 tiles)"
    return "MLP (64×64 tiles)" if "mlp" in t.name else "attention (64×64 tiles)"


def payload_breakdown(spec: PayloadSpec) -> dict[str, dict[str, float]]:
    """Wire bytes and parameters per tensor group, split into indices, signs and headers.

    v1 has per-tensor headers; v2 has none (its payload header is counted apart), and its
    bits are packed across tensors, so a group's bytes are its bits / 8.
    """
    groups: dict[str, dict[str, float]] = {}
    for t in spec.tensors:
        g = groups.setdefault(
            _group(t),
            {"tensors": 0, "params": 0, "indices": 0, "signs": 0, "headers": 0, "bytes": 0},
        )
        indices: float
        if spec.version == 1:
            indices, signs = t.index_bytes, t.value_bytes
            headers = t.wire_bytes - indices - signs
        else:
            tiles = t.n_values // t.k
            indices = tiles * EliasFano.for_tile(t.totalk, t.k).tile_bits / 8
            signs, headers = t.value_bytes, 0
        g["tensors"] += 1
        g["params"] += math.prod(t.shape)
        g["indices"] += indices
        g["signs"] += signs
        g["headers"] += headers
        g["bytes"] += indices + signs + headers
    return groups


def entropy_bound_bytes(spec: PayloadSpec) -> float:
    """What any coding of the same results needs at least: per tile log2(C(totalk, k)) bits for
    the index set and one bit per sign (1-bit mode; assumed here), no headers."""
    bits = 0.0
    for t in spec.tensors:
        tiles = t.n_values // t.k
        bits += tiles * (math.log2(math.comb(t.totalk, t.k)) + t.k)
    return bits / 8


def figures(
    cfg: BenchConfig,
    ws: Workspace,
    distro: ArmResult,
    adamw: ArmResult,
    specs: dict[int, PayloadSpec],
    profiles: dict[str, dict[str, Any]],
    initial_val: float,
    wall_s: float,
) -> dict[str, Any]:
    """The figures; the issue's keys describe the default format (v2), `v1` holds v1's."""
    for v in FORMATS:
        if max(distro.payload_sizes[v]) > specs[v].max_bytes:
            raise AssertionError(f"a v{v} payload exceeds the spec's {specs[v].max_bytes} bytes")
    if len(set(distro.payload_sizes[1])) != 1:
        raise AssertionError("v1 payload sizes vary, yet the format fixes them")
    # v2's header integers (batch start, nonce) grow with the run, so sizes vary by a few bytes.
    mean = {v: statistics.fmean(distro.payload_sizes[v]) for v in FORMATS}
    bf16 = 2 * ws.n_params
    client_steps = cfg.timed_steps * cfg.clients
    codec_s = {
        2: sum(distro.optimizer_s[p] for p in CODEC_PARTS),
        1: sum(distro.optimizer_s[p] for p in V1_PARTS),
    }
    codec_fraction = codec_s[2] / distro.fwd_bwd_s
    bound = entropy_bound_bytes(specs[2])
    out: dict[str, Any] = {
        "bytes_per_client_step": mean[2],
        "bf16_grad_bytes": bf16,
        "compression_ratio_vs_bf16": bf16 / mean[2],
        "loss_distro": distro.final_val,
        "loss_adamw": adamw.final_val,
        "loss_ratio_distro_over_adamw": distro.final_val / adamw.final_val,
        "codec_fraction_of_fwd_bwd": codec_fraction,
        "payload_format": PAYLOAD_VERSION,
        "apply_format": cfg.apply_format,
        "v1": {
            "bytes_per_client_step": mean[1],
            "compression_ratio_vs_bf16": bf16 / mean[1],
            "codec_fraction_of_fwd_bwd": codec_s[1] / distro.fwd_bwd_s,
            "codec_s_per_client_step": {
                p: distro.optimizer_s[p] / client_steps for p in ("encode_v1", "decode_v1")
            },
            "payload_breakdown": payload_breakdown(specs[1]),
        },
        "bytes_per_client_step_max": max(distro.payload_sizes[2]),
        "entropy_bound_bytes": bound,
        "entropy_bound_ratio_vs_bf16": bf16 / bound,
        "codec_ns_per_param": {
            p: s * 1e9 / (client_steps * ws.n_params) for p, s in distro.optimizer_s.items()
        },
        "presets": profiles,
        "steps": cfg.steps,
        "clients": cfg.clients,
        # Context (not required by the issue).
        "targets": {
            "compression_ratio_vs_bf16_min": TARGET_COMPRESSION,
            "loss_ratio_distro_over_adamw_max": TARGET_LOSS_RATIO,
            "codec_fraction_of_fwd_bwd_max": TARGET_CODEC_FRACTION,
        },
        "n_params": ws.n_params,
        "batch_per_client": cfg.batch_per_client,
        "seq_len": cfg.seq_len,
        "tokens_per_step": cfg.global_batch * cfg.seq_len,
        "val_samples": cfg.val_samples,
        "seed": cfg.seed,
        "lag": cfg.lag,
        "lr_distro": cfg.lr_distro,
        "lr_adamw": cfg.lr_adamw,
        "distro": {
            "chunk": cfg.chunk,
            "topk": cfg.topk,
            "quantize_1bit": True,
            "compression_decay": cfg.compression_decay,
        },
        "initial_val_loss": initial_val,
        "val_curve": {
            str(s): {"distro": distro.val_curve[s], "adamw": adamw.val_curve[s]}
            for s in sorted(distro.val_curve)
        },
        "final_train_loss": {"distro": distro.train_losses[-1], "adamw": adamw.train_losses[-1]},
        "fwd_bwd_s_per_client_step": distro.fwd_bwd_s / client_steps,
        "codec_s_per_client_step": {
            part: distro.optimizer_s[part] / client_steps for part in CODEC_PARTS
        },
        "timed_steps": cfg.timed_steps,
        "batch_per_client_for_codec_target": math.ceil(
            cfg.batch_per_client * codec_fraction / TARGET_CODEC_FRACTION
        ),
        "codec_fraction_all_steps": _fraction(distro.step_times, 0),
        "codec_fraction_median_step": _median_fraction(distro.step_times[cfg.timing_skip :]),
        "adamw_step_fraction_of_fwd_bwd": adamw.optimizer_total_s / adamw.fwd_bwd_s,
        "payload_breakdown": payload_breakdown(specs[2]),
        # Per step, summed over clients (all steps, warm-up included), for spotting preemption.
        "distro_fwd_bwd_ms_per_step": [round(r["fwd_bwd"] * 1e3, 2) for r in distro.step_times],
        "distro_codec_ms_per_step": [round(_codec_s(r) * 1e3, 2) for r in distro.step_times],
        "distro_model_hash": distro.final_hash,
        "torch_threads": torch.get_num_threads(),
        "wall_s": wall_s,
    }
    return out


def _codec_s(row: dict[str, float]) -> float:
    return sum(row.get(part, 0.0) for part in CODEC_PARTS)


def _fraction(rows: Sequence[dict[str, float]], skip: int) -> float:
    rows = rows[skip:]
    return sum(_codec_s(r) for r in rows) / sum(r["fwd_bwd"] for r in rows)


def _median_fraction(rows: Sequence[dict[str, float]]) -> float:
    return statistics.median(_codec_s(r) / r["fwd_bwd"] for r in rows)


def _verdict(ok: bool) -> str:
    return "[green]met[/green]" if ok else "[red]missed[/red]"


def print_report(fig: dict[str, Any], console: Console) -> None:
    comp, loss_ratio = fig["compression_ratio_vs_bf16"], fig["loss_ratio_distro_over_adamw"]
    codec = fig["codec_fraction_of_fwd_bwd"]
    v1 = fig["v1"]
    table = Table(title=f"DisTrO vs AdamW: {fig['clients']} clients, {fig['steps']} steps")
    for col in ("figure", "v2 (default)", "v1", "target", ""):
        table.add_column(col, justify="left" if col == "figure" else "right")
    table.add_row(
        "bytes each client sends per step",
        f"{fig['bytes_per_client_step']:,.1f}",
        f"{v1['bytes_per_client_step']:,.0f}",
        f"bound {fig['entropy_bound_bytes']:,.0f}",
        "",
    )
    table.add_row("bf16 full gradient bytes", f"{fig['bf16_grad_bytes']:,}", "", "", "")
    table.add_row(
        "compression vs bf16",
        f"{comp:.1f}×",
        f"{v1['compression_ratio_vs_bf16']:.1f}×",
        f"≥ {TARGET_COMPRESSION:.0f}× (bound {fig['entropy_bound_ratio_vs_bf16']:.0f}×)",
        _verdict(comp >= TARGET_COMPRESSION),
    )
    table.add_row(
        "codec / forward+backward (per client)",
        f"{codec:.1%}",
        f"{v1['codec_fraction_of_fwd_bwd']:.1%}",
        f"≤ {TARGET_CODEC_FRACTION:.0%}",
        _verdict(codec <= TARGET_CODEC_FRACTION),
    )
    table.add_row(
        f"final val loss, DisTrO (applying v{fig['apply_format']})", f"{fig['loss_distro']:.4f}"
    )
    table.add_row("final val loss, AdamW", f"{fig['loss_adamw']:.4f}")
    table.add_row(
        "loss ratio DisTrO / AdamW",
        f"{loss_ratio:.4f}",
        "",
        f"≤ {TARGET_LOSS_RATIO:.2f}",
        _verdict(loss_ratio <= TARGET_LOSS_RATIO),
    )
    table.add_row(
        "  median over steps; all steps",
        f"{fig['codec_fraction_median_step']:.1%}; {fig['codec_fraction_all_steps']:.1%}",
    )
    table.add_row(
        "  samples per client for ≤ 25 % (extrapolated)",
        f"{fig['batch_per_client_for_codec_target']} (now {fig['batch_per_client']})",
    )
    table.add_row(
        "AdamW step / forward+backward (context)", f"{fig['adamw_step_fraction_of_fwd_bwd']:.1%}"
    )
    console.print(table)

    parts = Table(title="Per client and step: ms (ns/param)")
    parts.add_column("forward+backward", justify="right")
    shown = ("lookahead", "generate", "encode", "encode_v1", "decode", "decode_v1", "apply")
    for part in shown:
        parts.add_column(part.replace("_v1", " v1"), justify="right")
    per_step = {**fig["codec_s_per_client_step"], **fig["v1"]["codec_s_per_client_step"]}
    ns = fig["codec_ns_per_param"]
    parts.add_row(
        f"{fig['fwd_bwd_s_per_client_step'] * 1e3:.1f}",
        *(f"{per_step[p] * 1e3:.1f} ({ns[p]:.2f})" for p in shown),
    )
    console.print(parts)

    for version, breakdown in ((2, fig["payload_breakdown"]), (1, fig["v1"]["payload_breakdown"])):
        wire = Table(title=f"Payload v{version} bytes by tensor group")
        for col in (
            "group",
            "tensors",
            "params",
            "indices",
            "signs",
            "headers",
            "bytes",
            "vs bf16",
        ):
            wire.add_column(col, justify="left" if col == "group" else "right")
        for name, g in breakdown.items():
            wire.add_row(
                name,
                str(g["tensors"]),
                f"{g['params']:,}",
                *(f"{g[c]:,.0f}" for c in ("indices", "signs", "headers", "bytes")),
                f"{2 * g['params'] / g['bytes']:.1f}×",
            )
        console.print(wire)

    if fig["presets"]:
        presets = Table(title="Per preset (one client, chunk 64 / top-k 8 / 1-bit)")
        for col in (
            "preset", "params", "v1 B", "v1 ×", "v2 B", "v2 ×", "bound ×",
            "fwd+bwd ms", "codec v1", "codec v2",
        ):  # fmt: skip
            presets.add_column(col, justify="left" if col == "preset" else "right")
        for name, p in fig["presets"].items():
            presets.add_row(
                name,
                f"{p['n_params']:,}",
                f"{p['v1']['bytes_per_client_step']:,}",
                f"{p['v1']['compression_ratio_vs_bf16']:.1f}",
                f"{p['v2']['bytes_per_client_step']:,}",
                f"{p['v2']['compression_ratio_vs_bf16']:.1f}",
                f"{p['entropy_bound_ratio_vs_bf16']:.1f}",
                f"{p['fwd_bwd_ms']:.0f}",
                f"{p['v1']['codec_fraction_of_fwd_bwd']:.1%}",
                f"{p['v2']['codec_fraction_of_fwd_bwd']:.1%}",
            )
        console.print(presets)
        ns_table = Table(title="Codec ns/param per part and preset (encode/decode: v2, v1)")
        ns_table.add_column("preset")
        for part in ("fwd+bwd", *PROFILE_PARTS):
            ns_table.add_column(part.replace("_v1", " v1"), justify="right")
        for name, p in fig["presets"].items():
            ns_table.add_row(
                name,
                f"{p['fwd_bwd_ns_per_param']:.1f}",
                *(f"{p['ns_per_param'][part]:.2f}" for part in PROFILE_PARTS),
            )
        console.print(ns_table)

    curve = Table(title=f"Validation loss (initial {fig['initial_val_loss']:.4f})")
    for col in ("step", "DisTrO", "AdamW", "ratio"):
        curve.add_column(col, justify="right")
    for step, v in fig["val_curve"].items():
        curve.add_row(
            step, f"{v['distro']:.4f}", f"{v['adamw']:.4f}", f"{v['distro'] / v['adamw']:.4f}"
        )
    console.print(curve)
    console.print(
        f"LR base: DisTrO {fig['lr_distro']:g}, AdamW {fig['lr_adamw']:g} (cosine); lag "
        f"{fig['lag']}; {fig['tokens_per_step']:,} tokens/step; torch threads "
        f"{fig['torch_threads']}; wall {fig['wall_s']:.1f} s"
    )


# --- entry point ----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps (< 3 min, 2 cores)")
    p.add_argument("--steps", type=int, help=f"default {DEFAULT_STEPS} ({QUICK_STEPS} quick)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--batch-per-client", type=int, default=4, help="samples per client per step")
    p.add_argument("--seq-len", type=int, default=128, help="≤ 128 (the tiny preset's context)")
    p.add_argument("--val-samples", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="model init and corpus seed")
    p.add_argument("--lr-distro", type=float, default=DEFAULT_LR_DISTRO)
    p.add_argument("--lr-adamw", type=float, default=DEFAULT_LR_ADAMW)
    p.add_argument("--chunk", type=int, default=64, help="DisTrO DCT tile edge (target)")
    p.add_argument("--topk", type=int, default=8, help="DisTrO coefficients kept per tile")
    p.add_argument(
        "--lag", type=int, default=APPLY_LAG, choices=(0, 1, 2), help="apply delay in steps"
    )
    p.add_argument("--evals", type=int, default=5, help="validation points along the run")
    p.add_argument(
        "--timing-warmup", type=int, default=5, help="leading steps left out of the timings"
    )
    p.add_argument(
        "--apply-format",
        type=int,
        default=PAYLOAD_VERSION,
        choices=FORMATS,
        help="which decoded format DisTrO applies (both are encoded, decoded and timed)",
    )
    p.add_argument(
        "--presets",
        default=",".join(PRESET_NAMES),
        help="presets to profile (sizes, bound, codec parts); empty for none",
    )
    p.add_argument(
        "--profile-steps", type=int, help="timed steps per preset profile (default 4; 10 full)"
    )
    p.add_argument("--workdir", type=Path, help="keep model and data here (default: temp dir)")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    p.add_argument(
        "--apply-preset",
        default="tiny",
        choices=("tiny", "small", "medium"),
        help="model shapes for apply_over_matmul_decode (bench/apply_cost.py)",
    )
    p.add_argument("--apply-repeat", type=int, default=5, help="repetitions of the apply timing")
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = QUICK_STEPS if args.quick else DEFAULT_STEPS
    if args.profile_steps is None:
        args.profile_steps = 4 if args.quick else 10
    args.presets = tuple(name for name in args.presets.split(",") if name)
    for name in args.presets:
        if name not in PRESETS:
            p.error(f"--presets: unknown preset {name!r} (known: {', '.join(PRESETS)})")
    for name in ("steps", "clients", "batch_per_client", "val_samples", "evals", "apply_repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be ≥ 1")
    if not 2 <= args.seq_len <= PRESETS["tiny"].max_seq_len:
        p.error(f"--seq-len must be in [2, {PRESETS['tiny'].max_seq_len}]")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = BenchConfig(
        steps=args.steps,
        clients=args.clients,
        batch_per_client=args.batch_per_client,
        seq_len=args.seq_len,
        val_samples=args.val_samples,
        seed=args.seed,
        lr_distro=args.lr_distro,
        lr_adamw=args.lr_adamw,
        lag=args.lag,
        evals=args.evals,
        timing_warmup=args.timing_warmup,
        apply_format=args.apply_format,
        presets=args.presets,
        profile_steps=args.profile_steps,
        chunk=args.chunk,
        topk=args.topk,
    )
    console = Console()
    started = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers.utils.logging.disable_progress_bar()
    enable_determinism(cfg.seed)
    with tempfile.TemporaryDirectory(prefix="psyche-bench-") as tmp:
        root = args.workdir if args.workdir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        ws = prepare_workspace(cfg, root, console)
        data = LocalDataProvider(ws.data_dir, cfg.seq_len)
        initial_val = evaluate(load(ws), ws.val)
        console.print(f"initial validation loss {initial_val:.4f}; arm (a) DisTrO")
        distro, specs = run_distro(cfg, ws, data, console)
        console.print("arm (b) AdamW")
        adamw = run_adamw(cfg, ws, data, console)
        if cfg.presets:
            console.print(f"codec profile per preset ({cfg.profile_steps} timed steps each)")
        profiles = {name: profile_preset(name, cfg, root, data, console) for name in cfg.presets}
    console.print(f"apply vs float matmul decode ({args.apply_preset}, {args.apply_repeat} runs)")
    apply = apply_cost(
        preset_shapes(args.apply_preset), cfg.chunk, cfg.topk, cfg.clients, args.apply_repeat
    )
    wall = time.perf_counter() - started
    fig = figures(cfg, ws, distro, adamw, specs, profiles, initial_val, wall)
    # Side by side in one process (bench/apply_cost.py): target ≤ 1.5.
    fig["apply_over_matmul_decode"] = apply["apply_over_matmul_decode"]
    fig["apply_cost"] = {"preset": args.apply_preset, **apply}
    print_report(fig, console)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(fig, indent=2) + "\n")
        console.print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    from psyche.cli.process_exit import exit_now

    # Without the interpreter's teardown (2-4 s of collecting torch's heap; every temporary
    # directory is a ``with`` block, already removed), as the console scripts end.
    exit_now(main())

"""``psyche demo``: N clients train a tiny model in one process (simulated run).

The clients are real round engines (the same code as a client process) on an in-memory network
and a simulated clock; see :mod:`psyche.simulation.run`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from psyche.cli.checks import device_name, usable_device
from psyche.cli.input_files import InputFile
from psyche.cli.model import PRESET_NAMES
from psyche.protocol.strict_obj import ConfigError

if TYPE_CHECKING:  # torch: loaded by the command, after parsing
    from psyche.simulation.run import RoundReport

ROOT_CONFIG = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"


@click.command()
@click.option(
    "--clients", default=3, show_default=True, envvar="PSYCHE_DEMO_CLIENTS", type=click.IntRange(1)
)
@click.option(
    "--config",
    "config_path",
    default=str(ROOT_CONFIG),
    show_default=True,
    envvar="PSYCHE_STATE",
    type=InputFile(parse="toml"),
    help="Run config (state.toml); its checkpoint and data location are replaced by local ones.",
)
@click.option("--out", default="runs/demo", show_default=True, envvar="PSYCHE_DEMO_OUT")
@click.option(
    "--preset",
    default="tiny",
    show_default=True,
    type=click.Choice(PRESET_NAMES),
    help="Model preset to create.",
)
@click.option(
    "--tokens",
    default=300_000,
    show_default=True,
    type=click.IntRange(1),
    help="Synthetic corpus size.",
)
@click.option(
    "--device", default="cpu", show_default=True, envvar="PSYCHE_DEVICE", callback=device_name
)
@click.option(
    "--micro-batch-size",
    default=2,
    show_default=True,
    envvar="MICRO_BATCH_SIZE",
    type=click.IntRange(1),
)
def demo(
    clients: int,
    config_path: str,
    out: str,
    preset: str,
    tokens: int,
    device: str,
    micro_batch_size: int,
) -> None:
    """Create a tiny model and corpus, then train it with N clients in one process (real round
    engines and coordinator; in-memory network, simulated clock); prints a line per round and
    writes summary.json and loss.png under OUT."""
    import asyncio

    usable_device(device)
    from psyche.protocol.model import LLM
    from psyche.protocol.run_file import load_run_config
    from psyche.simulation.run import SimulatedRun

    console = Console(soft_wrap=True)
    try:
        run = load_run_config(config_path, require_run_id=True)
    except ConfigError as e:
        console.print(f"[red]invalid config[/]: {e}")
        sys.exit(1)
    assert isinstance(run.model, LLM)
    out_dir = Path(out)
    model_dir, data_dir = _model_and_data(console, out_dir, preset, tokens, run.model.max_seq_len)
    sim = SimulatedRun(
        run,
        model_dir,
        data_dir,
        out_dir,
        n_clients=clients,
        micro_batch_size=micro_batch_size,
        device=device,
    )
    summary = asyncio.run(sim.run(lambda r: console.print(_round_line(r))))
    out_dir.mkdir(parents=True, exist_ok=True)
    data = summary.to_json()
    (out_dir / "summary.json").write_text(json.dumps(data, indent=1) + "\n")
    _plot(summary, out_dir / "loss.png")
    agree = all(r.hashes_agree for r in summary.rounds)
    console.print(
        f"[bold]done[/]: {summary.epochs_completed} epoch(s), state {summary.final_state}, "
        f"loss {data['first_loss']:.4f} → {data['final_loss']:.4f}, "
        f"weights identical after every round: {agree}; wrote {out_dir}/summary.json, loss.png"
    )
    if not agree:
        sys.exit(2)


def _model_and_data(
    console: Console, out_dir: Path, preset: str, tokens: int, seq_len: int
) -> tuple[Path, Path]:
    """A random ``preset`` model and a synthetic corpus of about ``tokens`` bytes, tokenized in
    samples of ``seq_len``, under ``out_dir`` (each kept from an earlier demo when there)."""
    from psyche.data.prepare import ByteTokenizer, prepare_corpus
    from psyche.data.synth import synth_corpus
    from psyche.training.presets import PRESETS, write_model_dir

    model_dir, text_dir, data_dir = out_dir / "model", out_dir / "text", out_dir / "data"
    with console.status("creating model and data") as status:
        if not (model_dir / "config.json").exists():
            status.update(f"writing a random '{preset}' model to {model_dir}")
            res = write_model_dir(model_dir, preset=PRESETS[preset], seed=0)
            console.print(f"model: {res.n_params:,} parameters in {model_dir}")
        if not data_dir.exists():
            status.update("writing a synthetic corpus")
            synth_corpus(text_dir, tokens, seed=0)
            prepare_corpus([text_dir], ByteTokenizer(), data_dir, seq_len=seq_len)
            console.print(f"data: tokens in {data_dir}")
    return model_dir, data_dir


def _round_line(r: RoundReport) -> str:
    return (
        f"epoch {r.epoch} step {r.step:3d} round {r.height:2d} "
        f"{'train' if r.trained else 'drain'} end={r.end_reason:13s} witnesses={r.witnesses} "
        f"applied={r.applied_batches} loss={'-' if r.loss is None else f'{r.loss:.4f}'} "
        f"payload={r.payload_bytes}B weights={'identical' if r.hashes_agree else 'DIVERGED'} "
        f"{r.model_hash[:12]}"
    )


def _plot(summary: object, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from psyche.simulation.run import RunSummary

    assert isinstance(summary, RunSummary)
    pts = [(r.step, r.loss) for r in summary.rounds if r.loss is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("mean training loss")
    ax.set_title("psyche demo run")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

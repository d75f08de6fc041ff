"""``psyche model``: create small random Llama models locally, and inspect checkpoints.

* ``init`` writes a randomly initialised model of a preset shape as an ordinary Hugging Face
  directory (config, safetensors, byte tokenizer); the same seed always gives the same bytes, so
  a run config can name the directory and every client starts from identical weights;
* ``info`` loads a directory (or a Hub repo, honouring ``HF_HUB_OFFLINE``/``HF_TOKEN``) through the
  same loader the client uses, and prints its shape and ``model_hash``.

torch and transformers are imported inside the commands, so ``psyche --help`` stays fast.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

log = logging.getLogger("psyche.cli.model")

PRESET_NAMES = ("tiny", "small", "medium")
_DTYPES = ("float32", "bfloat16")


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(show_path=False)],
    )


def _quiet_transformers() -> None:
    # Its per-shard progress bars and load reports would drown the one status line we print.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


@click.group(name="model")
def model_group() -> None:
    """Model utilities: create tiny local models, inspect checkpoints."""


@model_group.command("init")
@click.option(
    "--preset",
    type=click.Choice(PRESET_NAMES),
    required=True,
    envvar="PSYCHE_MODEL_PRESET",
    help="tiny ≈ 1.2 M, small ≈ 10 M, medium ≈ 51 M parameters.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    envvar="PSYCHE_MODEL_OUT",
    help="Directory to write the model into (created if missing).",
)
@click.option("--seed", type=int, default=0, show_default=True, envvar="PSYCHE_MODEL_SEED")
@click.option(
    "--vocab",
    type=click.Choice(["byte"]),
    default="byte",
    show_default=True,
    envvar="PSYCHE_MODEL_VOCAB",
    help="Tokenizer: 'byte' (byte b is id b; BOS/EOS/PAD 256-258; needs no download).",
)
@click.option(
    "--dtype",
    type=click.Choice(_DTYPES),
    default="float32",
    show_default=True,
    envvar="PSYCHE_MODEL_DTYPE",
    help="Storage dtype of the weights, which every client of a run then trains in, on any device.",
)
@click.option(
    "--force", is_flag=True, envvar="PSYCHE_MODEL_FORCE", help="Replace an existing model in OUT."
)
@click.option("-v", "--verbose", is_flag=True)
def init_cmd(
    preset: str, out: Path, seed: int, vocab: str, dtype: str, force: bool, verbose: bool
) -> None:
    """Write a randomly initialised Llama model of PRESET shape into OUT."""
    _setup_logging(verbose)
    from rich.console import Console

    console = Console()
    with console.status(f"initialising the {preset} model (seed {seed})…"):
        import torch

        from psyche.training import PRESETS, write_model_dir

        _quiet_transformers()
        try:
            result = write_model_dir(
                out,
                preset=PRESETS[preset],
                seed=seed,
                dtype=getattr(torch, dtype),
                overwrite=force,
            )
        except FileExistsError as e:
            raise click.ClickException(f"{e} (use --force)") from e
    shape = PRESETS[preset]
    console.print(
        f"[green]wrote[/] {preset} Llama ({result.n_params:,} parameters, hidden "
        f"{shape.hidden_size}, {shape.num_layers} layers, seq {shape.max_seq_len}, "
        f"vocab {vocab}) to [bold]{result.path}[/]"
    )
    console.print(f"model_hash {result.model_hash}")


@model_group.command("info")
@click.argument("source")
@click.option("--revision", default=None, help="Hub revision (commit, branch or tag).")
@click.option("-v", "--verbose", is_flag=True)
def info_cmd(source: str, revision: str | None, verbose: bool) -> None:
    """Load SOURCE (a local directory or a Hub repo id) and print its shape and model_hash."""
    _setup_logging(verbose)
    from rich.console import Console

    console = Console()
    with console.status(f"loading {source}…"):
        import torch

        from psyche.protocol.locations import HubRepo
        from psyche.protocol.model import LLMArchitecture
        from psyche.training import ModelLoadError, load_model, model_hash

        _quiet_transformers()
        try:
            model, tokenizer = load_model(
                HubRepo(repo_id=source, revision=revision),
                device="cpu",
                dtype=torch.float32,
                architecture=LLMArchitecture.HfAuto,
            )
        except ModelLoadError as e:
            raise click.ClickException(str(e)) from e
        digest = model_hash(model)
    n_params = sum(p.numel() for p in model.parameters())
    config = model.config
    console.print(f"{type(model).__name__}: {n_params:,} parameters")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        console.print(f"  {key}: {getattr(config, key, '?')}")
    console.print(f"  tokenizer: {type(tokenizer).__name__ if tokenizer else 'none'}")
    console.print(f"model_hash {digest} (as float32)")

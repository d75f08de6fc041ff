"""``psyche data``: build token files from local text, and serve them over TCP.

* ``synth`` writes a deterministic synthetic text corpus (no download needed for demos);
* ``prepare`` tokenizes text into ``.npy`` shards plus a ``data.toml``;
* ``serve`` runs a TCP data server for a ``data.toml`` that serves *every* authenticated client
  (no coordinator here to say who belongs to the run); the centralized server wires a real
  authorizer instead.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from psyche.cli.exit_codes import Mistake
from psyche.cli.input_files import InputFile
from psyche.protocol.locations import TokenSize

if TYPE_CHECKING:  # psyche.data imports torch: loaded by the commands, after parsing
    from psyche.data.prepare import TextTokenizer

log = logging.getLogger("psyche.cli.data")


class _HfTokenizer:
    """A local Hugging Face tokenizer directory behind the ``TextTokenizer`` protocol."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        # Documents are tokenized whole; the model's context limit does not apply here.
        self._tok.model_max_length = 1 << 62

    @property
    def vocab_size(self) -> int:
        return len(self._tok)

    @property
    def eos_token_id(self) -> int | None:
        eos = self._tok.eos_token_id
        return int(eos) if eos is not None else None

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))


def _load_tokenizer(spec: str) -> TextTokenizer:
    from psyche.data.prepare import ByteTokenizer

    if spec == "byte":
        return ByteTokenizer()
    if not spec.strip() or not Path(spec).is_dir():
        raise click.BadParameter(
            f"{spec!r} is neither 'byte' nor a local tokenizer directory", param_hint="--tokenizer"
        )
    return _HfTokenizer(spec)


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(show_path=False)],
    )


@click.group(name="data")
def data_group() -> None:
    """Data utilities: tokenize local text into token files, serve data."""


@data_group.command("synth")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--tokens", type=click.IntRange(min=1), required=True, help="About this many bytes.")
@click.option("--seed", type=int, default=0, show_default=True)
def synth_cmd(out: Path, tokens: int, seed: int) -> None:
    """Write a deterministic synthetic text corpus (doc-00000.txt, …) into OUT."""
    from psyche.data.synth import synth_corpus

    paths = synth_corpus(out, tokens, seed)
    size = sum(p.stat().st_size for p in paths)
    click.echo(f"wrote {len(paths)} documents ({size} bytes) to {out}")


@data_group.command("prepare")
@click.option(
    "--text",
    "texts",
    multiple=True,
    required=True,
    type=InputFile(dir_okay=True),
    metavar="TEXT",  # the help as it was before the type checked the path
    help="Text file or directory (*.txt, *.md searched recursively); repeatable.",
)
@click.option(
    "--tokenizer", default="byte", show_default=True, help="'byte' or a local HF tokenizer dir."
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option(
    "--token-size",
    type=click.Choice([t.name for t in TokenSize]),
    default=None,
    help="Default: TwoBytes when the vocabulary fits in u16.",
)
@click.option("--shard-tokens", type=click.IntRange(min=1), default=1 << 24, show_default=True)
@click.option(
    "--shuffle-seed",
    type=click.IntRange(0, 2**256 - 1),
    default=0,
    show_default=True,
    help="Written to data.toml as 32 little-endian bytes.",
)
@click.option("--force", is_flag=True, help="Delete token files already in OUT.")
def prepare_cmd(
    texts: tuple[str, ...],
    tokenizer: str,
    out: Path,
    seq_len: int,
    token_size: str | None,
    shard_tokens: int,
    shuffle_seed: int,
    force: bool,
) -> None:
    """Tokenize local UTF-8 text into .npy token shards plus a data.toml in OUT."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from psyche.data.prepare import prepare_corpus
    from psyche.data.provider import DataError

    tok = _load_tokenizer(tokenizer)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    ) as progress:
        task = progress.add_task("tokenizing", total=None)
        try:
            result = prepare_corpus(
                texts,
                tok,
                out,
                seq_len=seq_len,
                token_size=TokenSize[token_size] if token_size else None,
                shard_tokens=shard_tokens,
                shuffle_seed=shuffle_seed.to_bytes(32, "little"),
                overwrite=force,
                on_progress=lambda done, total: progress.update(task, completed=done, total=total),
                tokenizer_name=tokenizer,
            )
        except DataError as e:  # text that is not UTF-8, too little of it, a full OUT: the user's
            message = str(e)
            if any(message.startswith(str(Path(t))) for t in texts):
                message = f"--text {message}"  # a file named, or found in a folder named
            raise Mistake(message) from None
    click.echo(
        f"{result.n_documents} documents, {result.n_tokens} tokens in {len(result.shards)} "
        f"shard(s); {result.n_tokens // seq_len} samples of {seq_len}; config: {result.data_toml}"
    )


@data_group.command("serve")
@click.option(
    "--data-config",
    type=InputFile(parse="toml", path_type=Path),
    required=True,
    envvar="PSYCHE_DATA_CONFIG",
)
@click.option("--port", type=click.IntRange(0, 65535), required=True, envvar="PSYCHE_DATA_PORT")
@click.option("--host", default="0.0.0.0", show_default=True, envvar="PSYCHE_DATA_HOST")
@click.option("-v", "--verbose", is_flag=True)
def serve_cmd(data_config: Path, port: int, host: str, verbose: bool) -> None:
    """Serve the token files of a data.toml to any authenticated client."""
    from psyche.data.local import LocalDataProvider
    from psyche.data.provider import DataError
    from psyche.data.tcp_server import DataServer, allow_all
    from psyche.protocol.locations import SeededShuffle
    from psyche.protocol.run_file import load_data_config
    from psyche.protocol.strict_obj import ConfigError

    _setup_logging(verbose)
    try:
        dc = load_data_config(data_config)
        provider = LocalDataProvider(
            dc.resolved_dir(data_config), dc.seq_len, dc.token_size, SeededShuffle(dc.shuffle_seed)
        )
    except (ConfigError, DataError) as e:
        raise click.ClickException(str(e)) from None
    log.warning(
        "authorizer: ALLOW ALL — every client with a valid signature gets any sample "
        "(manual use only; run data inside the centralized server to restrict to the run)"
    )

    async def main() -> None:
        server = DataServer(provider, allow_all)
        await server.start(host, port)
        log.info(
            "serving %d samples of %d tokens from %s on %s:%d",
            provider.num_samples,
            provider.seq_len,
            dc.resolved_dir(data_config),
            host,
            server.port,
        )
        # SIGTERM (docker stop, systemd) and SIGINT both end serving cleanly, with the counters
        # logged. Installed explicitly: a process started in the background by a non-interactive
        # shell inherits SIGINT as ignored, and would otherwise not stop on it at all.
        serving = asyncio.ensure_future(server.serve_forever())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, serving.cancel)
        try:
            await serving
        except asyncio.CancelledError:
            pass
        finally:
            await server.close()
            log.info("data server stopped: %s", server.summary())

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        log.info("stopped")

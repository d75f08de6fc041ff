"""What every ``psyche-solana-client`` command shares: the endpoint, wallet and IDL options that
build its :class:`~psyche.solana.session.Session` (:func:`common`, :func:`read_only`),
the reused per-command options, running a command's coroutine and printing its result, and the
unquoting of environment values (:mod:`psyche.cli.solana` says why).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterable, MutableMapping
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from psyche.cli.exit_codes import EXIT_ERROR, Mistake
from psyche.cli.input_files import flag_name


def to_pubkey(value: str | None) -> Any:
    if value is None:
        return None
    from solders.pubkey import Pubkey

    try:
        return Pubkey.from_string(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a base58 public key") from None


# Read from the environment by this client outside of any flag's envvar.
DIRECT_ENV = ("RAW_WALLET_PRIVATE_KEY", "HF_TOKEN")


def unquote(value: str) -> str:
    """``value`` without one pair of matching surrounding quotes (``"…"`` or ``'…'``)."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def unquote_environ(names: Iterable[str], environ: MutableMapping[str, str]) -> None:
    """Unquote (:func:`unquote`) the variables ``names`` in ``environ``, in place."""
    for name in names:
        value = environ.get(name)
        if value is not None:
            environ[name] = unquote(value)


def envvars(cmd: click.Command) -> set[str]:
    names: set[str] = set()
    for param in cmd.params:
        if isinstance(param.envvar, str):
            names.add(param.envvar)
        elif param.envvar:
            names.update(param.envvar)
    return names


def _rpc_url(value: str | None, flag: str) -> str | None:
    from psyche.solana.session import resolve_rpc_url

    if not value:
        return None
    try:
        return resolve_rpc_url(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=flag) from None


def _ws_url(value: str | None, flag: str) -> str | None:
    from psyche.solana.session import CLUSTERS, websocket_url

    if not value:
        return None
    if value in CLUSTERS:
        return websocket_url(CLUSTERS[value])
    if value.split("://", 1)[0] not in ("ws", "wss"):
        raise click.BadParameter(f"{value!r} is not a ws(s):// URL nor a cluster", param_hint=flag)
    return value


def _wallet(kw: dict[str, Any], *, required: bool) -> Any:
    """The wallet keypair, or None (only when not ``required``). A key file named on the command
    line wins over RAW_WALLET_PRIVATE_KEY (a flag beats the environment), so the scripts can sign
    with the file they were given whatever the caller's environment holds. No wallet, or one
    that cannot be read or is not a keypair: one line, exit 2 (:mod:`psyche.cli.input_files`)."""
    from psyche.solana.session import WalletError, load_wallet

    path = kw.pop("wallet_private_key_path")
    ctx = click.get_current_context()
    source = ctx.get_parameter_source("wallet_private_key_path")
    raw = (
        None if source is ParameterSource.COMMANDLINE else os.environ.get("RAW_WALLET_PRIVATE_KEY")
    )
    if not required and not path and not raw:
        return None
    try:
        return load_wallet(path, raw)
    except WalletError as e:
        # The message names the file (or RAW_WALLET_PRIVATE_KEY); the flag goes before a file.
        named_file = path and not raw
        message = f"{_flag(ctx, 'wallet_private_key_path')} {e}" if named_file else str(e)
        raise Mistake(message) from None


def _flag(ctx: click.Context, name: str) -> str:
    param = next(p for p in ctx.command.params if p.name == name)
    return flag_name(param, ctx)


def _common(fn: Callable[..., Any], *, wallet_required: bool) -> Callable[..., Any]:
    options = [
        click.option(
            "-r",
            "--rpc",
            envvar="RPC",
            default="http://127.0.0.1:8899",
            show_default=True,
            help="RPC URL or cluster: devnet, mainnet-beta, testnet, localnet.",
        ),
        click.option(
            "--ws-rpc",
            envvar="WS_RPC",
            default=None,
            help="Default: from --rpc (http→ws, https→wss, an explicit port + 1).",
        ),
        click.option("--rpc-2", envvar="RPC_2", default=None, help="Fallback RPC endpoint."),
        click.option("--ws-rpc-2", envvar="WS_RPC_2", default=None),
        click.option("--rpc-3", envvar="RPC_3", default=None, help="Second fallback RPC endpoint."),
        click.option("--ws-rpc-3", envvar="WS_RPC_3", default=None),
        click.option(
            "-w",
            "--wallet-private-key-path",
            envvar="WALLET_PRIVATE_KEY_PATH",
            default=None,
            help="solana-keygen JSON keypair. RAW_WALLET_PRIVATE_KEY (JSON array or base58) wins "
            "over WALLET_PRIVATE_KEY_PATH, but not over this flag given on the command line.",
        ),
        click.option("--idl-dir", envvar="PSYCHE_IDL_DIR", default=None, help="Default: ./idl."),
        click.option("--coordinator-program-id", envvar="PSYCHE_COORDINATOR_PROGRAM_ID"),
        click.option("--authorizer-program-id", envvar="PSYCHE_AUTHORIZER_PROGRAM_ID"),
        click.option("--treasurer-program-id", envvar="PSYCHE_TREASURER_PROGRAM_ID"),
        click.option("--mining-pool-program-id", envvar="PSYCHE_MINING_POOL_PROGRAM_ID"),
        click.option(
            "--compute-unit-price",
            envvar="COMPUTE_UNIT_PRICE",
            type=click.IntRange(0, 10**9),
            default=0,
            show_default=True,
            help="Priority fee of every transaction, micro-lamports per compute unit (busy "
            "clusters schedule those that pay first).",
        ),
    ]

    @functools.wraps(fn)
    def wrapper(**kw: Any) -> Any:
        from solders.keypair import Keypair

        from psyche.solana.session import Endpoints, Session

        wallet = _wallet(kw, required=wallet_required)
        idl_dir = kw.pop("idl_dir")
        endpoints = Endpoints(
            _rpc_url(kw.pop("rpc"), "--rpc") or "http://127.0.0.1:8899",
            _ws_url(kw.pop("ws_rpc"), "--ws-rpc"),
            _rpc_url(kw.pop("rpc_2"), "--rpc-2"),
            _ws_url(kw.pop("ws_rpc_2"), "--ws-rpc-2"),
            _rpc_url(kw.pop("rpc_3"), "--rpc-3"),
            _ws_url(kw.pop("ws_rpc_3"), "--ws-rpc-3"),
        )
        session = Session(
            endpoints,
            # Read-only commands never sign; without a wallet they get a throwaway key and are
            # told there is none (``own_pubkey``), so nothing is attributed to it.
            wallet if wallet is not None else Keypair(),
            coordinator_program_id=to_pubkey(kw.pop("coordinator_program_id")),
            authorizer_program_id=to_pubkey(kw.pop("authorizer_program_id")),
            treasurer_program_id=to_pubkey(kw.pop("treasurer_program_id")),
            mining_pool_program_id=to_pubkey(kw.pop("mining_pool_program_id")),
            compute_unit_price=kw.pop("compute_unit_price"),
        )
        if idl_dir:
            session.idl_dir = Path(idl_dir)
        if not wallet_required:
            kw["own_pubkey"] = wallet.pubkey() if wallet is not None else None
        return fn(session=session, **kw)

    for opt in reversed(options):
        wrapper = opt(wrapper)
    return wrapper


def common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Endpoint, wallet and IDL options shared by every command; builds ``session``."""
    return _common(fn, wallet_required=True)


def read_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`common` for commands that only read: the wallet is optional, and ``fn`` gets
    ``own_pubkey`` (the wallet's public key, or None without one)."""
    return _common(fn, wallet_required=False)


def run_async(session: Any, coro: Coroutine[Any, Any, Any]) -> Any:
    from psyche.backends.base import BackendError
    from psyche.cli.solana_runs import explain_missing_run
    from psyche.protocol.strict_obj import ConfigError
    from psyche.solana.errors import ChainError

    async def go() -> Any:
        try:
            return await explain_missing_run(session, coro)
        finally:
            await session.close()

    try:
        return asyncio.run(go())
    except (ChainError, BackendError) as e:
        # The chain layer raises ChainError (an IdlError among them); the backend BackendError.
        # Errors that are the user's to fix carry their exit code (a run that does not exist: 2).
        click.echo(f"error: {e}", err=True)
        sys.exit(int(getattr(e, "exit_code", EXIT_ERROR)))
    except ConfigError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_ERROR)


def echo_result(value: Any) -> None:
    click.echo(json.dumps(value, indent=2) if not isinstance(value, str) else value)


RUN_ID_MAX_BYTES = 32
"""A run's accounts are derived from its id as one PDA seed, which Solana caps at 32 bytes
(``MAX_SEED_LEN``); a longer id has no address at all."""


def check_run_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A Solana run id: 1 to :data:`RUN_ID_MAX_BYTES` bytes of UTF-8, checked where it is parsed
    so that every command names the limit instead of failing to derive the run's address."""
    if value is None:
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise click.BadParameter("not valid UTF-8") from None
    if size == 0:
        raise click.BadParameter("a run id cannot be empty")
    if size > RUN_ID_MAX_BYTES:
        raise click.BadParameter(
            f"{size} bytes; a Solana run id is at most {RUN_ID_MAX_BYTES} bytes of UTF-8 (the "
            "run's address is derived from it as one seed)"
        )
    return value


run_id_option = click.option(
    "--run-id",
    required=True,
    envvar="RUN_ID",
    callback=check_run_id,
    help=f"The run (at most {RUN_ID_MAX_BYTES} bytes).",
)


def _metadata_text(limit: int) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > limit:
            raise click.BadParameter(
                f"{len(value.encode())} bytes; the run stores at most {limit} (UTF-8)"
            )
        return value

    return check


name_option = click.option(
    "--name", envvar="RUN_NAME", default=None, callback=_metadata_text(64), help="≤ 64 bytes."
)
description_option = click.option(
    "--description",
    envvar="RUN_DESCRIPTION",
    default=None,
    callback=_metadata_text(280),
    help="≤ 280 bytes.",
)


authorizer_option = click.option(
    "--authorizer",
    envvar="AUTHORIZER",
    default=None,
    help="Grantee of the join authorization (default: everyone, a permissionless run).",
)


pubkey_option = click.option(
    "--pubkey",
    "--address",
    "pubkey",
    envvar="ADDRESS",
    default=None,
    help="Public key to check (default: the wallet's).",
)

"""Solana client (psyche-solana-client): run administration and the training daemon on Solana.

Every flag has an environment twin (listed in .env.example). Endpoints: ``--rpc``/``--ws-rpc``
and a fallback pair ``--rpc-2``/``--ws-rpc-2``, each a URL or a cluster moniker (``devnet``,
``mainnet-beta``, ``testnet``, ``localnet``). The wallet is a solana-keygen JSON file
(``--wallet-private-key-path``) or ``RAW_WALLET_PRIVATE_KEY``. Instruction layouts come from the
committed IDLs in ``idl/`` (``--idl-dir``).

Environment values may carry one pair of surrounding quotes: ``docker run --env-file`` passes a
line ``RPC="http://…"`` on with its quotes, and a joiner's .env is written for both docker and
shells, so every value this client reads from the environment is unquoted once, on entry
(:func:`unquote_environ`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Iterable, MutableMapping
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from psyche.cli.daemon_options import daemon_options, take_checkpoint_and_sharing
from psyche.cli.logs import setup_logging


def _pubkey(value: str | None) -> Any:
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


def _envvars(cmd: click.Command) -> set[str]:
    names: set[str] = set()
    for param in cmd.params:
        if isinstance(param.envvar, str):
            names.add(param.envvar)
        elif param.envvar:
            names.update(param.envvar)
    return names


def _rpc_url(value: str | None, flag: str) -> str | None:
    from psyche.backends.solana.session import resolve_rpc_url

    if not value:
        return None
    try:
        return resolve_rpc_url(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=flag) from None


def _ws_url(value: str | None, flag: str) -> str | None:
    from psyche.backends.solana.session import CLUSTERS, websocket_url

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
    with the file they were given whatever the caller's environment holds."""
    from psyche.backends.solana.session import WalletError, load_wallet

    path = kw.pop("wallet_private_key_path")
    source = click.get_current_context().get_parameter_source("wallet_private_key_path")
    raw = (
        None if source is ParameterSource.COMMANDLINE else os.environ.get("RAW_WALLET_PRIVATE_KEY")
    )
    if not required and not path and not raw:
        return None
    try:
        return load_wallet(path, raw)
    except WalletError as e:
        raise click.UsageError(str(e)) from None


def _common(fn: Callable[..., Any], *, wallet_required: bool) -> Callable[..., Any]:
    options = [
        click.option(
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
        click.option(
            "--wallet-private-key-path",
            envvar="WALLET_PRIVATE_KEY_PATH",
            default=None,
            help="solana-keygen JSON keypair. RAW_WALLET_PRIVATE_KEY (JSON array or base58) wins "
            "over WALLET_PRIVATE_KEY_PATH, but not over this flag given on the command line.",
        ),
        click.option("--idl-dir", envvar="PSYCHE_IDL_DIR", default=None, help="Default: ./idl."),
        click.option("--coordinator-program-id", envvar="PSYCHE_COORDINATOR_PROGRAM_ID"),
        click.option("--authorizer-program-id", envvar="PSYCHE_AUTHORIZER_PROGRAM_ID"),
    ]

    @functools.wraps(fn)
    def wrapper(**kw: Any) -> Any:
        from solders.keypair import Keypair

        from psyche.backends.solana.session import Endpoints, Session

        wallet = _wallet(kw, required=wallet_required)
        idl_dir = kw.pop("idl_dir")
        endpoints = Endpoints(
            _rpc_url(kw.pop("rpc"), "--rpc") or "http://127.0.0.1:8899",
            _ws_url(kw.pop("ws_rpc"), "--ws-rpc"),
            _rpc_url(kw.pop("rpc_2"), "--rpc-2"),
            _ws_url(kw.pop("ws_rpc_2"), "--ws-rpc-2"),
        )
        session = Session(
            endpoints,
            # Read-only commands never sign; without a wallet they get a throwaway key and are
            # told there is none (``own_pubkey``), so nothing is attributed to it.
            wallet if wallet is not None else Keypair(),
            coordinator_program_id=_pubkey(kw.pop("coordinator_program_id")),
            authorizer_program_id=_pubkey(kw.pop("authorizer_program_id")),
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


def _run(session: Any, coro: Coroutine[Any, Any, Any]) -> Any:
    from psyche.backends.base import BackendError
    from psyche.backends.solana.idl import IdlError
    from psyche.protocol.strict_obj import ConfigError

    async def go() -> Any:
        try:
            return await coro
        finally:
            await session.close()

    try:
        return asyncio.run(go())
    except (BackendError, IdlError, ConfigError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


def _echo(value: Any) -> None:
    click.echo(json.dumps(value, indent=2) if not isinstance(value, str) else value)


run_id_option = click.option("--run-id", required=True, envvar="RUN_ID", help="The run.")


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


@click.group()
@click.pass_context
def solana(ctx: click.Context) -> None:
    """Solana client (psyche-solana-client):
    run administration and the training daemon on Solana."""
    # A group's callback runs before its subcommand parses, so the subcommand's options read
    # the unquoted values.
    cmd = solana.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None
    names = set(DIRECT_ENV) | (_envvars(cmd) if cmd is not None else set())
    unquote_environ(names, os.environ)


@solana.command("create-run")
@common
@run_id_option
@click.option("--client-version", envvar="CLIENT_VERSION", default="test", show_default=True)
@click.option(
    "--join-authority",
    envvar="JOIN_AUTHORITY",
    default=None,
    help="Who authorizes joiners (default: the wallet).",
)
@name_option
@description_option
def create_run_cmd(
    session: Any,
    run_id: str,
    client_version: str,
    join_authority: str | None,
    name: str | None,
    description: str | None,
):
    """Create RUN_ID's coordinator account and initialize it (the run stays Uninitialized),
    with its NAME and DESCRIPTION stored in the same transaction."""
    from psyche.backends.solana import admin

    _echo(
        _run(
            session,
            admin.create_run(
                session,
                run_id,
                client_version,
                _pubkey(join_authority),
                name=name,
                description=description,
            ),
        )
    )


@solana.command("update-config")
@common
@run_id_option
@click.option("--config-path", envvar="CONFIG_PATH", default=None, help="state.toml / config.toml")
@click.option(
    "--restart-from-step",
    envvar="RESTART_FROM_STEP",
    type=click.IntRange(1, 2**32 - 1),
    default=None,
    help="Step to continue from (steps start at 1, as the program's progress check requires).",
)
@click.option("--switch-to-hub", envvar="SWITCH_TO_HUB", is_flag=True, default=False)
@name_option
@description_option
@click.option("--num-parameters", envvar="NUM_PARAMETERS", type=int, default=None)
@click.option("--vocab-size", envvar="VOCAB_SIZE", type=int, default=None)
@click.option("--client-version", envvar="CLIENT_VERSION", default=None)
def update_config_cmd(
    session: Any,
    run_id: str,
    config_path: str | None,
    restart_from_step: int | None,
    switch_to_hub: bool,
    name: str | None,
    description: str | None,
    num_parameters: int | None,
    vocab_size: int | None,
    client_version: str | None,
):
    """Update the run's config/model (from CONFIG_PATH), progress, metadata or client version."""
    from psyche.backends.solana import admin

    meta = {
        "name": name,
        "description": description,
        "num_parameters": num_parameters,
        "vocab_size": vocab_size,
    }
    sigs = _run(
        session,
        admin.update_config(
            session,
            run_id,
            config_path=config_path,
            restart_from_step=restart_from_step,
            switch_to_hub=switch_to_hub,
            metadata=meta if any(v is not None for v in meta.values()) else None,
            client_version=client_version,
            on_warning=lambda w: click.echo(f"warning: {w}", err=True),
        ),
    )
    _echo({"signatures": sigs})


@solana.command("set-paused")
@common
@run_id_option
@click.argument("action", required=False, type=click.Choice(["pause", "resume"]))
@click.option("--resume", envvar="RESUME", is_flag=True, default=False, help="Same as `resume`.")
def set_paused_cmd(session: Any, run_id: str, action: str | None, resume: bool):
    """Pause the run, or resume it (`resume` or --resume; the first resume starts a new run).
    Without ACTION: pause."""
    from psyche.backends.solana import admin

    if action is not None:
        # The positional word wins over RESUME from the environment, not over the flag.
        source = click.get_current_context().get_parameter_source("resume")
        if action == "pause" and resume and source is ParameterSource.COMMANDLINE:
            raise click.UsageError("`pause` and --resume contradict each other")
        resume = action == "resume"
    _echo(_run(session, admin.set_paused(session, run_id, not resume)))


@solana.command("set-future-epoch-rates")
@common
@run_id_option
@click.option("--earning-rate-total-shared", envvar="EARNING_RATE_TOTAL_SHARED", type=int)
@click.option("--slashing-rate-per-client", envvar="SLASHING_RATE_PER_CLIENT", type=int)
def set_rates_cmd(
    session: Any,
    run_id: str,
    earning_rate_total_shared: int | None,
    slashing_rate_per_client: int | None,
):
    """Set the points earned (shared per epoch) and slashed (per client) from the next epoch."""
    from psyche.backends.solana import admin

    _echo(
        _run(
            session,
            admin.set_future_epoch_rates(
                session, run_id, earning_rate_total_shared, slashing_rate_per_client
            ),
        )
    )


@solana.command("tick")
@common
@run_id_option
@click.option("--ms-interval", envvar="MS_INTERVAL", type=int, default=1000, show_default=True)
@click.option("--count", envvar="COUNT", type=int, default=None, help="Default: forever.")
def tick_cmd(session: Any, run_id: str, ms_interval: int, count: int | None):
    """Send permissionless ticks."""
    from psyche.backends.solana import admin

    _echo(f"{_run(session, admin.tick(session, run_id, ms_interval, count))} tick(s) confirmed")


@solana.command("checkpoint")
@common
@run_id_option
@click.option("--repo", envvar="CHECKPOINT_REPO", required=True, help="Hub repo id of the upload.")
@click.option("--revision", envvar="CHECKPOINT_REVISION", default=None)
def checkpoint_cmd(session: Any, run_id: str, repo: str, revision: str | None):
    """Report a Hub checkpoint (the wallet must be an elected checkpointer, in Cooldown)."""
    from psyche.backends.solana import admin

    _echo(_run(session, admin.checkpoint(session, run_id, repo, revision)))


@solana.command("close-run")
@common
@run_id_option
@click.option("--spill", envvar="SPILL", default=None, help="Who gets the rent (default: wallet).")
def close_run_cmd(session: Any, run_id: str, spill: str | None):
    """Close a halted run's accounts and reclaim their rent."""
    from psyche.backends.solana import admin

    _echo(_run(session, admin.close_run(session, run_id, _pubkey(spill))))


@solana.command("json-dump-run")
@read_only
@run_id_option
def json_dump_run_cmd(session: Any, run_id: str, own_pubkey: Any):
    """Print the run's coordinator account as JSON."""
    from psyche.backends.solana import admin

    _echo(_run(session, admin.dump_run(session, run_id)))


def _can_join(
    session: Any, run_id: str, authorizer: str | None, pubkey: str | None, own_pubkey: Any
) -> None:
    from psyche.backends.solana import admin

    who = _pubkey(pubkey) if pubkey else own_pubkey
    if who is None:
        raise click.UsageError(
            "whose authorization? pass --pubkey, or a wallet (RAW_WALLET_PRIVATE_KEY or "
            "--wallet-private-key-path)"
        )
    result = _run(session, admin.can_join(session, run_id, who, _pubkey(authorizer)))
    _echo(result)
    if not result["can_join"]:
        by = f"authorizer {authorizer}" if authorizer else "the permissionless authorization"
        click.echo(
            f"error: {who} may not join run {run_id!r} through {by}: "
            + "; ".join(result["reasons"]),
            err=True,
        )
        sys.exit(1)


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


@solana.command("can-join")
@read_only
@run_id_option
@authorizer_option
@pubkey_option
def can_join_cmd(
    session: Any, run_id: str, authorizer: str | None, pubkey: str | None, own_pubkey: Any
):
    """Exit 0 if PUBKEY may join the run, 1 (with the reasons) otherwise."""
    _can_join(session, run_id, authorizer, pubkey, own_pubkey)


@solana.command("check-authorization")
@read_only
@run_id_option
@authorizer_option
@pubkey_option
def check_authorization_cmd(
    session: Any, run_id: str, authorizer: str | None, pubkey: str | None, own_pubkey: Any
):
    """Alias of can-join."""
    _can_join(session, run_id, authorizer, pubkey, own_pubkey)


@solana.command("join-authorization-create")
@common
@authorizer_option
def ja_create_cmd(session: Any, authorizer: str | None):
    """As a join authority, authorize AUTHORIZER (or everyone) to join our runs."""
    from psyche.backends.solana import admin

    _echo(_run(session, admin.join_authorization_create(session, _pubkey(authorizer))))


@solana.command("join-authorization-delegate")
@common
@click.option("--join-authority", envvar="JOIN_AUTHORITY", required=True)
@click.option("--delegates-clear", envvar="DELEGATES_CLEAR", is_flag=True, default=False)
@click.option(
    "--delegates-added",
    envvar="DELEGATES_ADDED",
    multiple=True,
    help="Public key; repeatable; the env twin is space-separated.",
)
@click.option(
    "--delegate-keypair",
    envvar="DELEGATE_KEYPAIRS",
    multiple=True,
    help="Keypair file whose public key is added; repeatable; the env twin is space-separated.",
)
def ja_delegate_cmd(
    session: Any,
    join_authority: str,
    delegates_clear: bool,
    delegates_added: tuple[str, ...],
    delegate_keypair: tuple[str, ...],
):
    """As a grantee, set the wallets that may join in our place."""
    from psyche.backends.solana import admin
    from psyche.backends.solana.session import WalletError, load_keypair_file

    added = [_pubkey(d) for item in delegates_added for d in item.split()]
    for path in delegate_keypair:
        try:
            added.append(load_keypair_file(path).pubkey())
        except WalletError as e:
            raise click.BadParameter(str(e), param_hint="--delegate-keypair") from None
    _echo(
        _run(
            session,
            admin.join_authorization_delegate(
                session, _pubkey(join_authority), delegates_clear, added
            ),
        )
    )


@solana.command("join-authorization-read")
@read_only
@click.option("--join-authority", envvar="JOIN_AUTHORITY", required=True)
@authorizer_option
def ja_read_cmd(session: Any, join_authority: str, authorizer: str | None, own_pubkey: Any):
    """Print an authorization."""
    from psyche.backends.solana import admin

    _echo(
        _run(
            session,
            admin.join_authorization_read(session, _pubkey(join_authority), _pubkey(authorizer)),
        )
    )


@solana.command("join-authorization-delete")
@common
@authorizer_option
def ja_delete_cmd(session: Any, authorizer: str | None):
    """As a join authority, deactivate and close an authorization."""
    from psyche.backends.solana import admin

    _echo(_run(session, admin.join_authorization_delete(session, _pubkey(authorizer))))


@solana.command("train")
@common
@run_id_option
@authorizer_option
@click.option(
    "--client-version",
    envvar="CLIENT_VERSION",
    default=None,
    help="Must equal the run's (default: this package's version).",
)
@click.option("--data-parallelism", envvar="DATA_PARALLELISM", type=int, default=1)
@click.option("--tensor-parallelism", envvar="TENSOR_PARALLELISM", type=int, default=1)
@click.option(
    "--bootstrap-peers",
    envvar="PSYCHE_BOOTSTRAP_PEERS",
    default=None,
    help="Multiaddrs (/…/p2p/<peer id>) of other clients, comma or space separated.",
)
@daemon_options(p2p_host="0.0.0.0")
def train(
    session: Any,
    run_id: str,
    authorizer: str | None,
    client_version: str | None,
    data_parallelism: int,
    tensor_parallelism: int,
    **kw: Any,
) -> None:
    """Join RUN_ID on Solana and train until the run is finished (exit 10: wrong version)."""
    for name, value in (
        ("--data-parallelism", data_parallelism),
        ("--tensor-parallelism", tensor_parallelism),
    ):
        if value != 1:
            raise click.BadParameter(
                f"{value}: only 1 is supported (this trainer runs one model copy on one device)",
                param_hint=name,
            )
    setup_logging(kw.pop("logs"))
    from psyche import __version__
    from psyche.cli.solana_client_process import train_on_solana

    checkpoint, sharing = take_checkpoint_and_sharing(kw)

    try:
        code = _run(
            session,
            train_on_solana(
                session,
                run_id=run_id,
                grantee=_pubkey(authorizer),
                client_version=client_version or __version__,
                checkpoint=checkpoint,
                sharing=sharing,
                **kw,
            ),
        )
    except KeyboardInterrupt:
        logging.getLogger("psyche").warning("interrupted")
        code = 130
    sys.exit(code)

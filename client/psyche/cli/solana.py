"""Solana client (psyche-solana-client): run administration and the training daemon on Solana.

Every flag has an environment twin (listed in .env.example). Endpoints: ``--rpc``/``--ws-rpc``
and a fallback pair ``--rpc-2``/``--ws-rpc-2``. The wallet is a solana-keygen JSON file
(``--wallet-private-key-path``) or ``RAW_WALLET_PRIVATE_KEY``. Instruction layouts come from the
committed IDLs in ``idl/`` (``--idl-dir``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

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


def common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Endpoint, wallet and IDL options shared by every command; builds ``session``."""
    options = [
        click.option("--rpc", envvar="RPC", default="http://127.0.0.1:8899", show_default=True),
        click.option("--ws-rpc", envvar="WS_RPC", default=None, help="Default: from --rpc."),
        click.option("--rpc-2", envvar="RPC_2", default=None, help="Fallback RPC endpoint."),
        click.option("--ws-rpc-2", envvar="WS_RPC_2", default=None),
        click.option(
            "--wallet-private-key-path",
            envvar="WALLET_PRIVATE_KEY_PATH",
            default=None,
            help="solana-keygen JSON keypair; RAW_WALLET_PRIVATE_KEY (JSON array or base58) wins.",
        ),
        click.option("--idl-dir", envvar="PSYCHE_IDL_DIR", default=None, help="Default: ./idl."),
        click.option("--coordinator-program-id", envvar="PSYCHE_COORDINATOR_PROGRAM_ID"),
        click.option("--authorizer-program-id", envvar="PSYCHE_AUTHORIZER_PROGRAM_ID"),
    ]

    @functools.wraps(fn)
    def wrapper(**kw: Any) -> Any:
        from psyche.backends.solana.session import Endpoints, Session, WalletError, load_wallet

        try:
            wallet = load_wallet(
                kw.pop("wallet_private_key_path"), os.environ.get("RAW_WALLET_PRIVATE_KEY")
            )
        except WalletError as e:
            raise click.UsageError(str(e)) from None
        idl_dir = kw.pop("idl_dir")
        session = Session(
            Endpoints(kw.pop("rpc"), kw.pop("ws_rpc"), kw.pop("rpc_2"), kw.pop("ws_rpc_2")),
            wallet,
            coordinator_program_id=_pubkey(kw.pop("coordinator_program_id")),
            authorizer_program_id=_pubkey(kw.pop("authorizer_program_id")),
        )
        if idl_dir:
            session.idl_dir = Path(idl_dir)
        return fn(session=session, **kw)

    for opt in reversed(options):
        wrapper = opt(wrapper)
    return wrapper


def _run(session: Any, coro: Coroutine[Any, Any, Any]) -> Any:
    from psyche.backends.base import BackendError
    from psyche.backends.solana.idl import IdlError
    from psyche.protocol.serde import ConfigError

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


@click.group()
def solana() -> None:
    """Solana client (psyche-solana-client):
    run administration and the training daemon on Solana."""


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
def create_run_cmd(session: Any, run_id: str, client_version: str, join_authority: str | None):
    """Create RUN_ID's coordinator account and initialize it (the run stays Uninitialized)."""
    from psyche.backends.solana import admin

    _echo(_run(session, admin.create_run(session, run_id, client_version, _pubkey(join_authority))))


@solana.command("update-config")
@common
@run_id_option
@click.option("--config-path", envvar="CONFIG_PATH", default=None, help="state.toml / config.toml")
@click.option("--restart-from-step", envvar="RESTART_FROM_STEP", type=int, default=None)
@click.option("--switch-to-hub", envvar="SWITCH_TO_HUB", is_flag=True, default=False)
@click.option("--name", envvar="RUN_NAME", default=None)
@click.option("--description", envvar="RUN_DESCRIPTION", default=None)
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
        ),
    )
    _echo({"signatures": sigs})


@solana.command("set-paused")
@common
@run_id_option
@click.option("--resume", envvar="RESUME", is_flag=True, default=False, help="Unpause instead.")
def set_paused_cmd(session: Any, run_id: str, resume: bool):
    """Pause the run (or resume it with --resume; the first resume starts a new run)."""
    from psyche.backends.solana import admin

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
@common
@run_id_option
def json_dump_run_cmd(session: Any, run_id: str):
    """Print the run's coordinator account as JSON."""
    from psyche.backends.solana import admin

    async def go() -> Any:
        accounts = await session.run_accounts(run_id)
        _, snap = await session.run(run_id)
        return admin.run_json(snap, accounts)

    _echo(_run(session, go()))


def _can_join(session: Any, run_id: str, authorizer: str | None, address: str | None) -> None:
    from psyche.backends.solana import admin

    who = _pubkey(address) if address else session.wallet.pubkey()
    result = _run(session, admin.can_join(session, run_id, who, _pubkey(authorizer)))
    _echo(result)
    sys.exit(0 if result["can_join"] else 1)


authorizer_option = click.option(
    "--authorizer",
    envvar="AUTHORIZER",
    default=None,
    help="Grantee of the join authorization (default: everyone, a permissionless run).",
)


@solana.command("can-join")
@common
@run_id_option
@authorizer_option
@click.option("--address", envvar="ADDRESS", default=None, help="Wallet to check (default: ours).")
def can_join_cmd(session: Any, run_id: str, authorizer: str | None, address: str | None):
    """Exit 0 if ADDRESS may join the run, 1 (with the reasons) otherwise."""
    _can_join(session, run_id, authorizer, address)


@solana.command("check-authorization")
@common
@run_id_option
@authorizer_option
@click.option("--address", envvar="ADDRESS", default=None)
def check_authorization_cmd(session: Any, run_id: str, authorizer: str | None, address: str | None):
    """Alias of can-join."""
    _can_join(session, run_id, authorizer, address)


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
    help="Repeatable; the env twin is space-separated.",
)
def ja_delegate_cmd(
    session: Any, join_authority: str, delegates_clear: bool, delegates_added: tuple[str, ...]
):
    """As a grantee, set the wallets that may join in our place."""
    from psyche.backends.solana import admin

    added = [_pubkey(d) for item in delegates_added for d in item.split()]
    _echo(
        _run(
            session,
            admin.join_authorization_delegate(
                session, _pubkey(join_authority), delegates_clear, added
            ),
        )
    )


@solana.command("join-authorization-read")
@common
@click.option("--join-authority", envvar="JOIN_AUTHORITY", required=True)
@authorizer_option
def ja_read_cmd(session: Any, join_authority: str, authorizer: str | None):
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
    from psyche.backends.solana.train import train_on_solana

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

"""The ``psyche-solana-client`` commands around joining a run: the join authorizations (created
and deleted by the run's join authority, delegated by the grantee, readable by anyone; what they
send is in :mod:`psyche.solana.programs.authorizer`), the ``can-join`` check, and ``train``,
the joiner's daemon. :mod:`psyche.cli.solana` registers them on its group.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from psyche.cli.checks import start_logging, usable_device
from psyche.cli.daemon_options import (
    daemon_options,
    take_checkpoint_and_sharing,
    take_training_flags,
)
from psyche.cli.exit_codes import EXIT_INTERRUPTED, Mistake
from psyche.cli.identity import create_static_identity_cmd, show_static_identity_cmd
from psyche.cli.solana_options import (
    authorizer_option,
    common,
    echo_result,
    pubkey_option,
    read_only,
    run_async,
    run_id_option,
    to_pubkey,
)


def _can_join(
    session: Any, run_id: str, authorizer: str | None, pubkey: str | None, own_pubkey: Any
) -> None:
    from psyche.solana.programs import authorizer as authorization

    who = to_pubkey(pubkey) if pubkey else own_pubkey
    if who is None:
        raise click.UsageError(
            "whose authorization? pass --pubkey, or a wallet (RAW_WALLET_PRIVATE_KEY or "
            "--wallet-private-key-path)"
        )
    result = run_async(session, authorization.can_join(session, run_id, who, to_pubkey(authorizer)))
    echo_result(result)
    if not result["can_join"]:
        by = f"authorizer {authorizer}" if authorizer else "the permissionless authorization"
        click.echo(
            f"error: {who} may not join run {run_id!r} through {by}: "
            + "; ".join(result["reasons"]),
            err=True,
        )
        sys.exit(1)


@click.command("can-join")
@read_only
@run_id_option
@authorizer_option
@pubkey_option
def can_join_cmd(
    session: Any, run_id: str, authorizer: str | None, pubkey: str | None, own_pubkey: Any
):
    """Exit 0 if PUBKEY may join the run, 1 (with the reasons) otherwise."""
    _can_join(session, run_id, authorizer, pubkey, own_pubkey)


@click.command("check-authorization")
@read_only
@run_id_option
@authorizer_option
@pubkey_option
def check_authorization_cmd(
    session: Any, run_id: str, authorizer: str | None, pubkey: str | None, own_pubkey: Any
):
    """Alias of can-join."""
    _can_join(session, run_id, authorizer, pubkey, own_pubkey)


@click.command("join-authorization-create")
@common
@authorizer_option
def ja_create_cmd(session: Any, authorizer: str | None):
    """As a join authority, authorize AUTHORIZER (or everyone) to join our runs."""
    from psyche.solana.programs import authorizer as authorization

    echo_result(
        run_async(session, authorization.join_authorization_create(session, to_pubkey(authorizer)))
    )


@click.command("join-authorization-delegate")
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
    from psyche.solana.programs import authorizer as authorization
    from psyche.solana.session import WalletError, load_keypair_file

    added = [to_pubkey(d) for item in delegates_added for d in item.split()]
    for path in delegate_keypair:
        try:
            added.append(load_keypair_file(path).pubkey())
        except WalletError as e:
            raise Mistake(f"--delegate-keypair {e}") from None
    echo_result(
        run_async(
            session,
            authorization.join_authorization_delegate(
                session, to_pubkey(join_authority), delegates_clear, added
            ),
        )
    )


@click.command("join-authorization-read")
@read_only
@click.option("--join-authority", envvar="JOIN_AUTHORITY", required=True)
@authorizer_option
def ja_read_cmd(session: Any, join_authority: str, authorizer: str | None, own_pubkey: Any):
    """Print an authorization."""
    from psyche.solana.programs import authorizer as authorization

    echo_result(
        run_async(
            session,
            authorization.join_authorization_read(
                session, to_pubkey(join_authority), to_pubkey(authorizer)
            ),
        )
    )


@click.command("join-authorization-delete")
@common
@authorizer_option
def ja_delete_cmd(session: Any, authorizer: str | None):
    """As a join authority, deactivate and close an authorization."""
    from psyche.solana.programs import authorizer as authorization

    echo_result(
        run_async(session, authorization.join_authorization_delete(session, to_pubkey(authorizer)))
    )


@click.command("train")
@common
@run_id_option
@authorizer_option
@click.option(
    "--client-version",
    envvar="CLIENT_VERSION",
    default=None,
    help="Must equal the run's (default: this package's version).",
)
@click.option(
    "--bootstrap-peers",
    envvar="PSYCHE_BOOTSTRAP_PEERS",
    default=None,
    help="Multiaddrs (/…/p2p/<peer id>) of other clients, comma or space separated.",
)
@click.option(
    "--p2p-announce-addrs",
    envvar="PSYCHE_P2P_ANNOUNCE_ADDRS",
    default=None,
    help="Multiaddrs (/ip4/<public ip>/tcp/<port>) to publish in this client's peer record before "
    "the ones it listens on: a public address a router forwards to this machine.",
)
@click.option(
    "-i",
    "--identity-secret-key-path",
    envvar="IDENTITY_SECRET_KEY_PATH",
    default=None,
    help="Accepted for compatibility and ignored: on Solana the P2P identity is the wallet's key.",
)
@daemon_options()
def train(
    session: Any,
    run_id: str,
    authorizer: str | None,
    client_version: str | None,
    identity_secret_key_path: str | None,
    **kw: Any,
) -> None:
    """Join RUN_ID on Solana and train until the run is finished. Exit codes: 0 finished, 2 a
    configuration to change (run id, device, join authorization), 3 withdrawn by the
    coordinator, 10 the run needs another version, 143 stopped by SIGTERM."""
    checkpoint, sharing = take_checkpoint_and_sharing(kw)
    training = take_training_flags(kw)
    usable_device(kw["device"])
    start_logging(kw.pop("logs"), kw.pop("write_log"))
    if identity_secret_key_path:
        logging.getLogger("psyche.client").warning(
            "--identity-secret-key-path is ignored on Solana: the client's P2P identity is its "
            "wallet's ed25519 key, so the coordinator and peers know it by one key"
        )
    from psyche import __version__
    from psyche.cli.solana_client_process import train_on_solana

    try:
        code = run_async(
            session,
            train_on_solana(
                session,
                run_id=run_id,
                grantee=to_pubkey(authorizer),
                client_version=client_version or __version__,
                checkpoint=checkpoint,
                sharing=sharing,
                training=training,
                **kw,
            ),
        )
    except KeyboardInterrupt:
        logging.getLogger("psyche").warning("interrupted")
        code = EXIT_INTERRUPTED
    sys.exit(code)


COMMANDS = (
    can_join_cmd,
    check_authorization_cmd,
    ja_create_cmd,
    ja_delegate_cmd,
    ja_read_cmd,
    ja_delete_cmd,
    train,
    show_static_identity_cmd,
    create_static_identity_cmd,
)

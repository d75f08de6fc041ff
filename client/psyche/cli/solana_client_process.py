"""``psyche-solana-client train``: the client daemon on a Solana run.

The process is assembled by :func:`psyche.cli.client_process.run_client` exactly as for the
centralized backend; only the backend differs. The daemon's key is the wallet's own ed25519 key,
so one key is the coordinator ``signer`` (wallet) and the P2P identity: the daemon finds itself in
the epoch by that key and signs its gossip with it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from solders.pubkey import Pubkey

from psyche.backends.solana.backend import SolanaBackend
from psyche.backends.solana.discovery import ChainDirectory
from psyche.backends.solana.peers import parse_bootstrap_peers
from psyche.cli.client_process import (
    TERMINATED_LINE,
    ClientOptions,
    cancel_on_sigterm,
    remove_sigterm_handler,
    run_client,
)
from psyche.cli.daemon_options import TrainingFlags
from psyche.cli.exit_codes import EXIT_TERMINATED
from psyche.daemon.checkpointing import CheckpointOptions
from psyche.daemon.sharing import SharingOptions
from psyche.events import EventLog, TransactionEvent
from psyche.protocol.identity import SecretKey
from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlError
from psyche.solana.instructions import RunInstructions, peer_record_pda
from psyche.solana.peer_record import MAX_PEER_ADDR_LEN, MAX_PEER_ADDRS, decode_peer_record
from psyche.solana.session import RunNotFoundError, Session

__all__ = ["not_authorized_hint", "train_on_solana"]

log = logging.getLogger("psyche.client")

RETRY_FIRST_S = 2.0
RETRY_MAX_S = 60.0
T = TypeVar("T")


def not_authorized_hint(
    run_id: str, wallet: Pubkey, join_authority: Pubkey, grantee: Pubkey | None, exists: bool
) -> str:
    """One line: why ``wallet`` may not join ``run_id`` and which key to create or delegate
    (``exists``: whether the join authority's authorization for ``grantee`` exists)."""
    client = "psyche-solana-client"
    if grantee is None:
        if not exists:
            return (
                f"wallet {wallet} may not join run {run_id!r}: the run is not permissionless (join "
                f"authority {join_authority} has no authorization for everyone); set AUTHORIZER "
                "(--authorizer) to the grantee you join for, or ask the join authority to run "
                f"`{client} join-authorization-create` without --authorizer"
            )
        return (
            f"wallet {wallet} may not join run {run_id!r}: join authority {join_authority}'s "
            "authorization for everyone is not active; ask the join authority to renew it"
        )
    if not exists:
        return (
            f"wallet {wallet} may not join run {run_id!r} for grantee {grantee}: join authority "
            f"{join_authority} has not authorized that grantee; ask it to run `{client} "
            f"join-authorization-create --authorizer {grantee}`, or fix AUTHORIZER"
        )
    if wallet == grantee:
        return (
            f"wallet {wallet} may not join run {run_id!r}: join authority {join_authority}'s "
            "authorization for it is not active; ask the join authority to renew it"
        )
    return (
        f"wallet {wallet} may not join run {run_id!r}: it is neither grantee {grantee} nor one of "
        f"its delegates; the grantee delegates this key with `{client} "
        f"join-authorization-delegate --join-authority {join_authority} --delegates-added "
        f"{wallet}`"
    )


async def _until_reachable(read: Callable[[], Awaitable[T]]) -> T:
    """``read()``, retried with a doubling back-off (to :data:`RETRY_MAX_S`) while no RPC
    endpoint answers: an RPC node that is down or restarting is a transient fault a joiner waits
    out. An answer that the run does not exist is final (exit 2), as is an account the IDL
    cannot decode."""
    delay = RETRY_FIRST_S
    while True:
        try:
            return await read()
        except (RunNotFoundError, IdlError):
            raise
        except ChainError as e:
            log.warning("%s; retrying in %.0f s", e, delay)
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)


def _directory(
    session: Session,
    instance: Pubkey,
    local: bool,
    bootstrap_peers: str | None,
    p2p_announce_addrs: str | None,
) -> ChainDirectory:
    """The run's peer records on the chain: where the client finds its peers and publishes
    its own addresses."""
    program_id = session.coordinator.program_id
    return ChainDirectory(
        program_id=program_id,
        instance=instance,
        record_address=lambda wallet: peer_record_pda(program_id, instance, wallet),
        decode=functools.partial(decode_peer_record, session.coordinator.idl),
        local=local,
        bootstrap=parse_bootstrap_peers(bootstrap_peers),
        announce=(p2p_announce_addrs or "").replace(",", " ").split(),
        max_addrs=MAX_PEER_ADDRS,
        max_addr_len=MAX_PEER_ADDR_LEN,
    )


async def _read_run(
    session: Session, run_id: str, terminated: asyncio.Event
) -> tuple[RunInstructions, dict[str, Any]] | None:
    """The run's instructions and coordinator instance, read while no RPC endpoint answers;
    None when SIGTERM (``terminated``) stopped the wait (logged). On any way out but the run read,
    the SIGTERM handler is removed; after it, :func:`run_client` takes the handler over."""
    try:
        ixs, _ = await _until_reachable(lambda: session.run(run_id))
        inst = await _until_reachable(lambda: session.instance(run_id))
    except asyncio.CancelledError:
        remove_sigterm_handler()
        if not terminated.is_set():
            raise
        log.warning(TERMINATED_LINE)
        return None
    except BaseException:
        remove_sigterm_handler()  # a run that does not exist: the caller explains and exits
        raise
    return ixs, inst


def _backend_maker(
    session: Session,
    ixs: RunInstructions,
    *,
    run_id: str,
    join_authority: Pubkey,
    grantee: Pubkey | None,
    client_version: str,
    directory: ChainDirectory,
    events: EventLog | None,
) -> Callable[[SecretKey], SolanaBackend]:
    """What :func:`~psyche.cli.client_process.run_client` builds its backend with: the run's
    coordinator account and instructions, the wallet that signs, its join authorization, and
    each confirmed transaction written to ``events``."""

    def confirmed(label: str, signature: str) -> None:
        if events is not None:
            events.write(TransactionEvent(label=label, signature=signature))

    def make_backend(key: SecretKey) -> SolanaBackend:
        return SolanaBackend(
            rpcs=session.rpcs,
            ws_urls=session.endpoints.ws_urls,
            coordinator_account=ixs.run.account,
            codec=session.layout,
            instructions=ixs,
            wallet=session.wallet,
            p2p_identity=key.public_key(),
            authorization=session.join_authorization(join_authority, grantee),
            client_version=client_version,
            directory=directory,
            sender=session.sender(session.coordinator),
            on_confirmed=confirmed,
            explain_not_authorized=functools.partial(
                not_authorized_hint, run_id, session.wallet.pubkey(), join_authority, grantee
            ),
        )

    return make_backend


async def train_on_solana(
    session: Session,
    *,
    run_id: str,
    grantee: Pubkey | None,
    client_version: str,
    micro_batch_size: int = 2,
    bootstrap_peers: str | None = None,
    p2p_announce_addrs: str | None = None,
    bind_p2p_port: int = 0,
    bind_p2p_host: str = "0.0.0.0",
    p2p_blob_dir: Path | None = None,
    checkpoint: CheckpointOptions | None = None,
    sharing: SharingOptions | None = None,
    device: str = "auto",
    event_log: str | None = None,
    training: TrainingFlags | None = None,
) -> int:
    # First, before any wait on the network: a SIGTERM while no RPC answers is a clean stop
    # (issue 42, item 5). The handler stays for run_client, which takes its event.
    terminated = cancel_on_sigterm()
    read = await _read_run(session, run_id, terminated)
    if read is None:
        return EXIT_TERMINATED
    ixs, inst = read
    key = SecretKey.from_bytes(session.wallet.secret())
    directory = _directory(
        session, ixs.run.instance, bool(inst["local_run"]), bootstrap_peers, p2p_announce_addrs
    )
    make_backend = _backend_maker(
        session,
        ixs,
        run_id=run_id,
        join_authority=Pubkey.from_bytes(bytes(inst["join_authority"])),
        grantee=grantee,
        client_version=client_version,
        directory=directory,
        # The daemon's event log also names each confirmed transaction, so what a client did on
        # the chain can be looked up there (getTransaction) after the run.
        events=EventLog(event_log, key.node_identity().hex()) if event_log else None,
    )
    options = ClientOptions(
        run_id=run_id,
        coordinator_addr=session.endpoints.rpc,
        p2p_host=bind_p2p_host,
        p2p_port=bind_p2p_port,
        p2p_blob_dir=p2p_blob_dir,
        micro_batch_size=micro_batch_size,
        checkpoint=checkpoint or CheckpointOptions(),
        sharing=sharing or SharingOptions(),
        device=device,
        event_log=event_log,
        training=training,
    )
    return await run_client(options, key=key, make_backend=make_backend, terminated=terminated)

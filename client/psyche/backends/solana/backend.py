"""``SolanaBackend``: the Backend seam on a Solana run (docs/solana.md, "Python side").

Tasks, all owned by the backend and cancelled by :meth:`SolanaBackend.close`:

* one ``accountSubscribe`` per websocket endpoint (primary and fallback, both live; each
  reconnects after ``min(30, 2·retries)`` s). Every update, and the initial ``getAccountInfo``,
  goes through :meth:`SolanaBackend._accept`, which keeps a snapshot only if its ``nonce``
  increased, so the two subscriptions and RPC re-reads never deliver a state twice or go back;
* a 500 ms loop that predicts ``tick`` with the Python coordinator on the latest snapshot and the
  local clock (:mod:`psyche.backends.solana.ticker`), re-reads the account while the run is
  WaitingForMembers (for a fresh pending list), joins, and sends ``tick`` when the prediction
  says the phase would change (with probability ``min(1, 2/#clients)``, so the clients do not
  all pay for the same tick);
* one task per transaction (sends are fire-and-forget for the daemon; failures are logged and
  queued for :meth:`SolanaBackend.next_rejection`).

Joining: once per epoch, on a WaitingForMembers snapshot. After joining epoch E, a later snapshot
of epoch E that is not WaitingForMembers ends the client (:class:`LeftRunError`) if it shows the
run halted, omits us from the epoch, or shows us unhealthy; the state is still delivered first,
so the daemon sees a Finished run finish. Client version gate: ``client_version`` must equal the
account's unless that is ``"test"``; otherwise :class:`ClientVersionMismatchError` (exit code 10),
also when the version changes while the run is paused. These exceptions and their exit codes are
in :mod:`psyche.backends.solana.errors` (re-exported here).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.backends.base import BackendError, HealthCheckEntries
from psyche.backends.inbox import Inbox
from psyche.backends.solana.discovery import ChainDirectory
from psyche.backends.solana.errors import (
    EXIT_LEFT_RUN,
    EXIT_NOT_AUTHORIZED,
    EXIT_VERSION_MISMATCH,
    ClientVersionMismatchError,
    JoinNotAuthorizedError,
    LeftRunError,
    backend_error,
)
from psyche.backends.solana.peers import BootstrapDirectory
from psyche.backends.solana.ticker import predicts_transition, tick_probability
from psyche.coordinator import ClientState, Coordinator, RunState, Witness, WitnessMetadata
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.solana.errors import ChainError
from psyche.solana.rpc import (
    ProgramRejectedError,
    SolanaRpc,
    TxSender,
    account_updates,
    reconnect_delay,
)
from psyche.solana.snapshot import (
    ClientInstructions,
    CoordinatorCodec,
    RunSnapshot,
)

__all__ = [
    "EXIT_LEFT_RUN",
    "EXIT_NOT_AUTHORIZED",
    "EXIT_VERSION_MISMATCH",
    "ClientVersionMismatchError",
    "JoinNotAuthorizedError",
    "LeftRunError",
    "SolanaBackend",
    "backend_error",
]

log = logging.getLogger(__name__)

ACCOUNT_NOT_INITIALIZED = 3012
"""Anchor's code for an account that does not exist: ``join_run`` got an authorization that was
never created."""
DISCOVERY_FAST_S = 60.0
"""How long after an epoch starts peer records are re-read at the fast interval."""
CLOSE_WAIT_S = 3.0
"""How long ``close`` waits for its background tasks to stop after cancelling them."""


class SolanaBackend:
    """A :class:`~psyche.backends.base.Backend` (and peer directory) for one Solana run."""

    def __init__(
        self,
        *,
        rpcs: Sequence[SolanaRpc],
        ws_urls: Sequence[str],
        coordinator_account: Pubkey,
        codec: CoordinatorCodec,
        instructions: ClientInstructions,
        wallet: Keypair,
        p2p_identity: bytes,
        authorization: Pubkey,
        client_version: str,
        directory: ChainDirectory | BootstrapDirectory | None = None,
        sender: TxSender | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        tick_interval: float = 0.5,
        tick_resend_s: float = 5.0,
        join_timeout: float = 5.0,
        ws_delay: Callable[[int], float] = reconnect_delay,
        max_buffered_states: int = 64,
        discovery_interval: float = 2.0,
        discovery_idle_interval: float = 20.0,
        on_confirmed: Callable[[str, str], None] | None = None,
        explain_not_authorized: Callable[[bool], str] | None = None,
    ) -> None:
        if not rpcs:
            raise ValueError("at least one RPC endpoint is needed")
        self.rpcs = list(rpcs)
        self.ws_urls = list(ws_urls)
        self.account = coordinator_account
        self.codec = codec
        self.ixs = instructions
        self.wallet = wallet
        self.identity = NodeIdentity(bytes(wallet.pubkey()), p2p_identity)
        self.authorization = authorization
        self.client_version = client_version
        # What the user must do when join_run is not authorized (argument: whether the
        # authorization account exists); the CLI knows the join authority and grantee.
        self._explain_not_authorized = explain_not_authorized
        self.directory = directory or BootstrapDirectory()
        self.sender = sender or TxSender(self.rpcs, wallet)
        self.rng = rng or random.Random()
        self.clock = clock
        self._ws_delay = ws_delay
        self.latest: RunSnapshot | None = None
        self._inbox = Inbox(max_states=max_buffered_states)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self._init_joining_and_ticking(tick_interval, tick_resend_s, join_timeout)
        self._init_discovery(discovery_interval, discovery_idle_interval)
        self.sent: list[str] = []
        """Labels of the transactions confirmed so far (for tests and logs)."""
        self.on_confirmed = on_confirmed
        """Called with (label, signature) for every confirmed transaction, so a client's event
        log can name the transactions it made (the local testnet looks them up on the chain)."""

    def _init_joining_and_ticking(
        self, tick_interval: float, tick_resend_s: float, join_timeout: float
    ) -> None:
        """The tick loop's settings (see the module doc) and what it remembers: the epoch
        joined, whether a join is in flight, and the (nonce, time) of the last tick sent."""
        self.tick_interval = tick_interval
        self.tick_resend_s = tick_resend_s
        self.join_timeout = join_timeout
        self.joined_epoch: int | None = None
        self._joining = False
        self._tick_sent: tuple[int, float] | None = None

    def _init_discovery(self, interval: float, idle_interval: float) -> None:
        """Peer discovery's settings (see :meth:`_maybe_discover`) and what it remembers: the
        last read of the peer records, whether one is in flight, the (epoch, time it was first
        seen), the record last written with its time, and the addresses it was made from."""
        self.discovery_interval = interval
        self.discovery_idle_interval = idle_interval
        self._discovered_at = float("-inf")
        self._discovering = False
        self._discovery_epoch: tuple[int, float] | None = None
        self._published: tuple[list[str], float] | None = None
        self._p2p_addrs: list[str] = []

    # --- lifecycle ------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Read the account once (first RPC that answers), then start following it."""
        if self._started:
            return
        await self.refresh()
        self._started = True
        for url in self.ws_urls:
            self._spawn(self._follow(url), f"solana-ws-{url}")
        self._spawn(self._tick_loop(), "solana-tick")

    async def refresh(self) -> RunSnapshot:
        """Fetch the account by RPC (falling back through the endpoints) and accept it."""
        last: Exception | None = None
        for rpc in self.rpcs:
            try:
                data = await rpc.get_account(self.account)
            except (BackendError, ChainError) as e:
                last = e
                continue
            if data is None:
                raise BackendError(f"coordinator account {self.account} does not exist")
            try:
                snap = self.codec.decode_account(data)
            except ChainError as e:
                raise backend_error(e) from e
            await self._accept(snap)
            assert self.latest is not None
            return self.latest
        raise BackendError(f"no RPC endpoint answered: {last}")

    async def close(self) -> None:
        self._inbox.closed = True
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            # Bounded: a websocket mid-close can hold a cancelled task for its close timeout,
            # and awaiting the tasks one by one would also swallow our own cancellation.
            _, stuck = await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
            if stuck:
                log.debug("%d background task(s) still stopping at close", len(stuck))
        for rpc in self.rpcs:
            await rpc.close()
        await self._inbox.notify()

    async def __aenter__(self) -> SolanaBackend:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- Backend --------------------------------------------------------------------------------

    async def wait_for_new_state(self) -> Coordinator:
        if not self._started and not self._inbox.closed:
            await self.connect()
        return await self._inbox.next_state()

    async def send_witness(self, witness: Witness, metadata: WitnessMetadata) -> None:
        self._send([self.ixs.witness(self.wallet.pubkey(), witness, metadata)], "witness")

    async def send_warmup_witness(self, witness: Witness) -> None:
        self._send([self.ixs.warmup_witness(self.wallet.pubkey(), witness)], "warmup_witness")

    async def send_health_check(self, checks: HealthCheckEntries) -> None:
        # One transaction per accused client: the program fails a whole instruction if any
        # accused client is healthy, and one bad accusation must not void the others.
        for ix in self.ixs.health_check(self.wallet.pubkey(), checks):
            self._send([ix], "health_check")

    async def send_checkpoint(self, index: int, checkpoint: Checkpoint) -> None:
        self._send([self.ixs.checkpoint(self.wallet.pubkey(), index, checkpoint)], "checkpoint")

    # --- PeerDirectory (rendezvous: see docs/solana.md) -----------------------------------------

    async def publish_p2p_addrs(self, addrs: list[str]) -> None:
        """Write this client's peer record (``set_peer_addrs``) when what it should hold differs
        from what this process last wrote; without a chain directory, only log them."""
        if not isinstance(self.directory, ChainDirectory):
            await self.directory.publish_p2p_addrs(addrs)
            return
        self._p2p_addrs = list(addrs)
        record = self.directory.record_addrs(addrs, self.identity.p2p_identity)
        if self._published is not None and self._published[0] == record:
            return
        self._published = (record, self.clock())
        log.info("publishing P2P addresses in the peer record: %s", " ".join(record) or "(none)")
        self._send([self.ixs.set_peer_addrs(self.wallet.pubkey(), record)], "set_peer_addrs")

    def peer_addrs(self) -> dict[bytes, list[str]]:
        return self.directory.peer_addrs()

    # --- extras ---------------------------------------------------------------------------------

    async def next_rejection(self) -> str:
        """The next transaction failure (oldest first), as a message."""
        return await self._inbox.next_rejection()

    # --- internals ------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        if self._inbox.closed:
            coro.close()
            return
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fail(self, error: BackendError) -> None:
        # Raised to the client by the next wait, which logs it once with its exit code (issue 42,
        # item 5: it was logged here too, so each refusal appeared twice).
        if await self._inbox.fail(error):
            log.debug("failing with: %s", error)

    async def _follow(self, url: str) -> None:
        # After every (re)subscription, re-read the account once: an update published while
        # the socket was down is otherwise never seen.
        def resync() -> None:
            self._spawn(self._refresh_quietly(), "solana-resync")

        async for data in account_updates(
            url, self.account, delay=self._ws_delay, on_connect=resync
        ):
            try:
                await self._accept(self.codec.decode_account(data))
            except (BackendError, ChainError) as e:
                log.warning("ignored an undecodable coordinator update from %s: %s", url, e)

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except (BackendError, ChainError) as e:
            log.warning("re-reading the coordinator account failed: %s", e)

    async def _accept(self, snap: RunSnapshot) -> bool:
        """Keep ``snap`` if its nonce increased; then apply the gate, join and exit rules."""
        if self.latest is not None and snap.nonce <= self.latest.nonce:
            return False
        self.latest = snap
        coord = snap.coordinator
        self._inbox.states.append(coord)
        required = snap.client_version
        if required != "test" and required != self.client_version:
            await self._fail(
                ClientVersionMismatchError(
                    f"this client is version {self.client_version!r} but the run requires "
                    f"{required!r}; install that version"
                )
            )
            return True
        reason = self._exit_reason(coord)
        if reason is not None:
            await self._fail(LeftRunError(reason))
            return True
        self._maybe_join(snap)
        await self._inbox.notify()
        return True

    def _exit_reason(self, coord: Coordinator) -> str | None:
        if self.joined_epoch is None or coord.progress.epoch != self.joined_epoch:
            return None
        state = coord.run_state
        if state is RunState.WaitingForMembers:
            return None
        if state.halted:
            return f"the run is {state.name}"
        i = coord.index_of(self.identity)
        if i is None:
            return f"not selected into epoch {coord.progress.epoch}"
        if coord.epoch_state.clients[i].state is not ClientState.Healthy:
            return f"{coord.epoch_state.clients[i].state.name} in epoch {coord.progress.epoch}"
        return None

    def _maybe_join(self, snap: RunSnapshot) -> None:
        coord = snap.coordinator
        if coord.run_state is not RunState.WaitingForMembers or self._joining:
            return
        if self.joined_epoch == coord.progress.epoch:
            return
        self._joining = True
        self._spawn(self._join(coord.progress.epoch), "solana-join")

    async def _join(self, epoch: int) -> None:
        ix = self.ixs.join_run(self.wallet.pubkey(), self.identity, self.authorization)
        try:
            sig = await self.sender.send([ix], label="join_run", confirm_timeout=self.join_timeout)
            self.joined_epoch = epoch
            self._confirmed("join_run", sig)
            log.info("joined epoch %d of the run", epoch)
        except ProgramRejectedError as e:
            if e.name == "JoinNotAuthorized" or e.code == ACCOUNT_NOT_INITIALIZED:
                exists = e.code != ACCOUNT_NOT_INITIALIZED
                hint = self._explain_not_authorized(exists) if self._explain_not_authorized else ""
                await self._fail(JoinNotAuthorizedError(hint or str(e)))
            else:
                log.warning("join_run for epoch %d failed (will retry): %s", epoch, e)
                self._inbox.rejections.append(f"join_run: {e}")
        except (BackendError, ChainError) as e:
            log.warning("join_run for epoch %d failed (will retry): %s", epoch, e)
            self._inbox.rejections.append(f"join_run: {e}")
        finally:
            self._joining = False
            await self._inbox.notify()

    def _send(self, ixs: list[Instruction], label: str) -> None:
        self._spawn(self._send_now(ixs, label), f"solana-{label}")

    async def _send_now(self, ixs: list[Instruction], label: str) -> None:
        try:
            self._confirmed(label, await self.sender.send(ixs, label=label))
        except (BackendError, ChainError) as e:
            log.warning("%s transaction failed: %s", label, e)
            self._inbox.rejections.append(f"{label}: {e}")
            await self._inbox.notify()

    def _confirmed(self, label: str, signature: str) -> None:
        self.sent.append(label)
        if self.on_confirmed is not None:
            self.on_confirmed(label, signature)

    async def _tick_loop(self) -> None:
        while not self._inbox.ended:
            await asyncio.sleep(self.tick_interval)
            snap = self.latest
            if snap is None:
                continue
            try:
                if snap.coordinator.run_state is RunState.WaitingForMembers:
                    snap = await self.refresh()
                self._maybe_join(snap)
                self._maybe_tick(snap)
                self._maybe_discover(snap)
            except (BackendError, ChainError) as e:
                log.warning("tick loop: %s", e)

    def _maybe_discover(self, snap: RunSnapshot) -> None:
        """Re-read the members' peer records: often while one has no address yet, rarely once
        everyone has one; rewrite our own when it is half its TTL old."""
        directory = self.directory
        if not isinstance(directory, ChainDirectory) or self._discovering:
            return
        me = self.identity
        members = [c.id for c in snap.coordinator.epoch_state.clients] + snap.pending()
        others = [m for m in members if m.signer != me.signer]
        now = self.clock()
        epoch = snap.coordinator.progress.epoch
        if self._discovery_epoch is None or self._discovery_epoch[0] != epoch:
            self._discovery_epoch = (epoch, now)
        # Often while a member has no address, and in an epoch's first minute, when NAT'd
        # members rewrite their records with relayed addresses; rarely after that, so a large
        # run does not load its RPC with one read per client every few seconds.
        young = now - self._discovery_epoch[1] < DISCOVERY_FAST_S
        missing = any(not directory.known(m.p2p_identity) for m in others)
        interval = self.discovery_interval if missing or young else self.discovery_idle_interval
        if now - self._discovered_at < interval:
            return
        self._discovered_at = now
        written = directory.record_times.get(me.signer)
        if (
            self._published is not None
            and written is not None
            and now - written > directory.ttl_s / 2
            and now - self._published[1] > directory.ttl_s / 2
        ):
            self._published = None  # rewrite it on the next line
            self._spawn(self.publish_p2p_addrs(self._p2p_addrs), "solana-peer-record")
        self._discovering = True
        self._spawn(self._discover([*others, me]), "solana-discovery")

    async def _discover(self, members: list[NodeIdentity]) -> None:
        assert isinstance(self.directory, ChainDirectory)
        try:
            for rpc in self.rpcs:
                try:
                    await self.directory.refresh(rpc, members)
                    return
                except (BackendError, ChainError) as e:
                    log.debug("reading peer records from %s failed: %s", rpc.url, e)
        finally:
            self._discovering = False

    def _maybe_tick(self, snap: RunSnapshot) -> None:
        now = self.clock()
        if self._tick_sent is not None:
            nonce, at = self._tick_sent
            if nonce == snap.nonce and now - at < self.tick_resend_s:
                return
        if not predicts_transition(snap, int(now)):
            return
        if self.rng.random() >= tick_probability(snap):
            return
        self._tick_sent = (snap.nonce, now)
        self._send([self.ixs.tick(self.wallet.pubkey())], "tick")

"""The websocket (pubsub) front: ``accountSubscribe``, ``slotSubscribe``, ``signatureSubscribe``
and their ``…Unsubscribe``, with a validator's notification shapes.

Notifications are pushed from the chain's listeners, on the event loop's thread, right after the
transaction (or slot) that caused them; each connection has its own outbound queue drained by one
writer task, so a slow reader never blocks the chain. What a reader that does not keep up can
make the server hold is bounded (docs/localsvm.md, "Limits"): at most
:data:`MAX_SUBSCRIPTIONS` subscriptions per connection, and queued bytes (a message counts until
it is written) of at most :data:`MAX_QUEUED_BYTES` per connection and
:data:`MAX_QUEUED_BYTES_TOTAL` over all of them. A connection over its bound, or the one with
the most queued when the total is over, is disconnected, as a validator drops a lagging
subscriber. A notification's result (an account's data can be megabytes) is encoded once per
encoding, not once per subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from solders.account import Account
from solders.pubkey import Pubkey
from solders.signature import Signature
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from psyche.localsvm.accounts import Encoding, ui_account
from psyche.localsvm.chain import Chain
from psyche.localsvm.history import TxRecord
from psyche.localsvm.params import SubscribeConfig, config, parse_pubkey, parse_signature
from psyche.localsvm.protocol import (
    INTERNAL_ERROR,
    Handler,
    RpcFault,
    convert,
    dispatch,
    encode,
    invalid_params,
    positional,
)
from psyche.localsvm.transactions import FINALITY_DEPTH

__all__ = ["PubSub"]

log = logging.getLogger(__name__)

MAX_QUEUED = 4096
"""Messages queued for one connection (replies and notifications)."""
MAX_QUEUED_BYTES = 8 << 20
"""Bytes queued for one connection. A single larger message (a notification of an account of
megabytes) is still sent when nothing else is queued."""
MAX_QUEUED_BYTES_TOTAL = 64 << 20
"""Bytes queued over all connections."""
MAX_SUBSCRIPTIONS = 100
"""Subscriptions one connection may hold (a client follows a few accounts and the signatures of
its transactions in flight)."""
SYSTEM_PROGRAM = Pubkey.from_string("11111111111111111111111111111111")


@dataclass(slots=True)
class _Sub:
    id: int
    kind: str
    client: _Client
    pubkey: Pubkey | None = None
    signature: Signature | None = None
    encoding: Encoding = "binary"
    data_slice: tuple[int, int] | None = None
    received: bool = False


class _Budget:
    """Queued bytes over all connections; over :data:`MAX_QUEUED_BYTES_TOTAL`, the connection
    holding the most is dropped (it is the one furthest behind)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self.clients: set[_Client] = set()

    def charge(self, n: int) -> None:
        self.total += n
        while self.total > self.limit:
            max(self.clients, key=lambda c: c.queued_bytes).drop("server queue full")


class _Client:
    """One websocket connection: its subscriptions and its outbound queue. A message stays
    queued (and counted) until the writer has handed it to the socket."""

    def __init__(self, ws: ServerConnection, budget: _Budget) -> None:
        self.ws = ws
        self.budget = budget
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.ready = asyncio.Event()
        self.subs: set[int] = set()
        self.dropped = False
        self._writer: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.budget.clients.add(self)
        self._writer = asyncio.get_running_loop().create_task(self._write())

    async def stop(self) -> None:
        self.budget.clients.discard(self)
        self._release()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer

    def send(self, message: bytes) -> None:
        if self.dropped:
            return
        n = len(message)
        if self.queue and (
            len(self.queue) >= MAX_QUEUED or self.queued_bytes + n > MAX_QUEUED_BYTES
        ):
            self.drop(f"queue full ({len(self.queue)} messages, {self.queued_bytes} bytes)")
            return
        self.queue.append(message)
        self.queued_bytes += n
        self.ready.set()
        self.budget.charge(n)

    def drop(self, why: str) -> None:
        """Disconnect a subscriber that does not keep up; what it had queued is freed now."""
        if self.dropped:
            return
        self.dropped = True
        log.warning("websocket subscriber too slow (%s): disconnecting", why)
        self._release()
        if self._writer is not None:
            self._writer.cancel()  # it may hold a message the peer is not reading
        self._closing = asyncio.get_running_loop().create_task(self.ws.close(1008, "queue full"))

    def _release(self) -> None:
        self.budget.total -= self.queued_bytes
        self.queued_bytes = 0
        self.queue.clear()

    async def _write(self) -> None:
        while True:
            while not self.queue:
                self.ready.clear()
                await self.ready.wait()
            message = self.queue[0]
            # Text frames, as a validator sends them.
            await self.ws.send(message.decode())
            if self.dropped:
                return  # drop() has released the queue
            self.queue.popleft()
            self.queued_bytes -= len(message)
            self.budget.total -= len(message)


def _notification(method: str, sub: int, result: Any) -> bytes:
    return _framed(method, sub, encode(result))


def _framed(method: str, sub: int, result: bytes) -> bytes:
    """A notification around an already encoded result (shared by every subscription)."""
    head = b'{"jsonrpc":"2.0","method":"' + method.encode() + b'","params":{"result":'
    return head + result + b',"subscription":' + str(sub).encode() + b"}}"


class PubSub:
    """Subscriptions over one :class:`Chain`; :meth:`handler` serves one websocket."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self._ids = itertools.count()
        self._subs: dict[int, _Sub] = {}
        self._by_account: defaultdict[Pubkey, set[int]] = defaultdict(set)
        self._by_signature: defaultdict[Signature, set[int]] = defaultdict(set)
        self._slot_subs: set[int] = set()
        self._budget = _Budget(MAX_QUEUED_BYTES_TOTAL)
        chain.slot_listeners.append(self._on_slot)
        chain.account_listeners.append(self._on_account)
        chain.tx_listeners.append(self._on_tx)

    @property
    def subscription_count(self) -> int:
        return len(self._subs)

    async def handler(self, ws: ServerConnection) -> None:
        client = _Client(ws, self._budget)
        client.start()
        methods = self._methods(client)
        try:
            async for message in ws:
                self.chain.sync()
                reply = dispatch(message, methods)
                if reply is not None:
                    client.send(reply)
        except ConnectionClosed:
            pass
        finally:
            # The connection is gone: what is still queued cannot be delivered.
            for sub_id in list(client.subs):
                self._remove(sub_id)
            await client.stop()

    # --- methods --------------------------------------------------------------------------------

    def _methods(self, client: _Client) -> dict[str, Handler]:
        def unsubscribe(kind: str) -> Handler:
            def call(params: list[Any]) -> bool:
                (value,) = positional(params, 1, 1)
                sub_id = convert(value, int)
                sub = self._subs.get(sub_id)
                if sub is None or sub.client is not client or sub.kind != kind:
                    raise invalid_params("Invalid subscription id.")
                self._remove(sub_id)
                return True

            return call

        return {
            "accountSubscribe": lambda p: self._account_subscribe(client, p),
            "accountUnsubscribe": unsubscribe("account"),
            "signatureSubscribe": lambda p: self._signature_subscribe(client, p),
            "signatureUnsubscribe": unsubscribe("signature"),
            "slotSubscribe": lambda p: self._slot_subscribe(client, p),
            "slotUnsubscribe": unsubscribe("slot"),
        }

    @staticmethod
    def _room(client: _Client) -> None:
        if len(client.subs) >= MAX_SUBSCRIPTIONS:
            # A refusal for want of room, not a malformed request: the server's error code.
            raise RpcFault(
                INTERNAL_ERROR,
                f"Subscription refused: at most {MAX_SUBSCRIPTIONS} subscriptions per connection",
            )

    def _add(self, sub: _Sub) -> int:
        self._subs[sub.id] = sub
        sub.client.subs.add(sub.id)
        return sub.id

    def _remove(self, sub_id: int) -> None:
        sub = self._subs.pop(sub_id, None)
        if sub is None:
            return
        sub.client.subs.discard(sub_id)
        if sub.kind == "account" and sub.pubkey is not None:
            self._by_account[sub.pubkey].discard(sub_id)
            if not self._by_account[sub.pubkey]:
                del self._by_account[sub.pubkey]
            self.chain.unwatch(sub.pubkey)
        elif sub.kind == "signature" and sub.signature is not None:
            self._by_signature[sub.signature].discard(sub_id)
            if not self._by_signature[sub.signature]:
                del self._by_signature[sub.signature]
        else:
            self._slot_subs.discard(sub_id)

    def _account_subscribe(self, client: _Client, params: list[Any]) -> int:
        key, cfg_value = positional(params, 1, 2)
        pubkey = parse_pubkey(key)
        cfg = config(cfg_value, SubscribeConfig)
        self._room(client)
        encoding: Encoding = cfg.encoding or "binary"
        if encoding == "jsonParsed":
            encoding = "base64"
        sub = _Sub(next(self._ids), "account", client, pubkey, None, encoding, cfg.slice)
        self._by_account[pubkey].add(sub.id)
        self.chain.watch(pubkey)
        return self._add(sub)

    def _signature_subscribe(self, client: _Client, params: list[Any]) -> int:
        value, cfg_value = positional(params, 1, 2)
        signature = parse_signature(value)
        cfg = config(cfg_value, SubscribeConfig)
        self._room(client)
        sub = _Sub(next(self._ids), "signature", client, signature=signature)
        sub.received = cfg.enable_received_notification
        self._by_signature[signature].add(sub.id)
        sub_id = self._add(sub)
        record = self.chain.transaction(signature)
        if record is not None:
            # Already processed: a validator notifies at once. After the reply, which the
            # dispatcher queues when this returns.
            asyncio.get_running_loop().call_soon(self._notify_signature, sub, record)
        return sub_id

    def _slot_subscribe(self, client: _Client, params: list[Any]) -> int:
        positional(params, 0, 0)
        self._room(client)
        sub = _Sub(next(self._ids), "slot", client)
        self._slot_subs.add(sub.id)
        return self._add(sub)

    # --- notifications --------------------------------------------------------------------------

    def _on_slot(self, slot: int) -> None:
        if not self._slot_subs:
            return
        result = {"parent": max(0, slot - 1), "root": max(0, slot - FINALITY_DEPTH), "slot": slot}
        encoded = encode(result)
        for sub_id in list(self._slot_subs):
            self._subs[sub_id].client.send(_framed("slotNotification", sub_id, encoded))

    def _on_account(self, slot: int, pubkey: Pubkey, account: Account | None) -> None:
        encoded: dict[tuple[str, tuple[int, int] | None], bytes] = {}
        for sub_id in list(self._by_account.get(pubkey, ())):
            sub = self._subs[sub_id]
            if sub.client.dropped:
                continue
            key = (sub.encoding, sub.data_slice)
            if key not in encoded:
                value = self._ui_account(account, sub)
                encoded[key] = encode({"context": {"slot": slot}, "value": value})
            sub.client.send(_framed("accountNotification", sub_id, encoded[key]))

    @staticmethod
    def _ui_account(account: Account | None, sub: _Sub) -> dict[str, Any]:
        if account is None:
            # A closed account is notified as an empty system account, as a validator does.
            value = ui_account(Account(0, b"", SYSTEM_PROGRAM), sub.encoding, sub.data_slice)
            value["rentEpoch"] = 0
            return value
        # A validator's notifications skip the 128-byte base58 limit of its HTTP reads.
        return ui_account(account, sub.encoding, sub.data_slice, limit_base58=False)

    def _on_tx(self, record: TxRecord) -> None:
        for sub_id in list(self._by_signature.get(record.signature, ())):
            self._notify_signature(self._subs[sub_id], record)

    def _notify_signature(self, sub: _Sub, record: TxRecord) -> None:
        if sub.id not in self._subs:
            return
        if sub.received:
            result = {"context": {"slot": record.slot}, "value": "receivedSignature"}
            sub.client.send(_notification("signatureNotification", sub.id, result))
        result = {"context": {"slot": record.slot}, "value": {"err": record.err}}
        sub.client.send(_notification("signatureNotification", sub.id, result))
        # A signature subscription ends with its notification.
        self._remove(sub.id)

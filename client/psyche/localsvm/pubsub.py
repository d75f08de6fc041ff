"""The websocket (pubsub) front: ``accountSubscribe``, ``slotSubscribe``, ``signatureSubscribe``
and their ``…Unsubscribe``, with a validator's notification shapes.

Notifications are pushed from the chain's listeners, on the event loop's thread, right after the
transaction (or slot) that caused them; each connection has its own bounded outbound queue
drained by one writer task, so a slow reader never blocks the chain (it is disconnected when its
queue overflows, as a validator drops a lagging subscriber).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import defaultdict
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
    Handler,
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


class _Client:
    """One websocket connection: its subscriptions and its outbound queue."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(MAX_QUEUED)
        self.subs: set[int] = set()
        self.dropped = False
        self._closing: asyncio.Task[None] | None = None

    def send(self, message: bytes) -> None:
        if self.dropped:
            return
        try:
            self.queue.put_nowait(message)
        except asyncio.QueueFull:
            self.dropped = True
            log.warning("websocket subscriber too slow (%d queued): disconnecting", MAX_QUEUED)
            self._closing = asyncio.get_running_loop().create_task(
                self.ws.close(1008, "queue full")
            )

    async def write(self) -> None:
        while True:
            message = await self.queue.get()
            # Text frames, as a validator sends them.
            await self.ws.send(message.decode())


def _notification(method: str, sub: int, result: Any) -> bytes:
    return encode(
        {"jsonrpc": "2.0", "method": method, "params": {"result": result, "subscription": sub}}
    )


class PubSub:
    """Subscriptions over one :class:`Chain`; :meth:`handler` serves one websocket."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self._ids = itertools.count()
        self._subs: dict[int, _Sub] = {}
        self._by_account: defaultdict[Pubkey, set[int]] = defaultdict(set)
        self._by_signature: defaultdict[Signature, set[int]] = defaultdict(set)
        self._slot_subs: set[int] = set()
        chain.slot_listeners.append(self._on_slot)
        chain.account_listeners.append(self._on_account)
        chain.tx_listeners.append(self._on_tx)

    @property
    def subscription_count(self) -> int:
        return len(self._subs)

    async def handler(self, ws: ServerConnection) -> None:
        client = _Client(ws)
        writer = asyncio.create_task(client.write())
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
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer

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
        sub = _Sub(next(self._ids), "slot", client)
        self._slot_subs.add(sub.id)
        return self._add(sub)

    # --- notifications --------------------------------------------------------------------------

    def _on_slot(self, slot: int) -> None:
        if not self._slot_subs:
            return
        result = {"parent": max(0, slot - 1), "root": max(0, slot - FINALITY_DEPTH), "slot": slot}
        for sub_id in list(self._slot_subs):
            self._subs[sub_id].client.send(_notification("slotNotification", sub_id, result))

    def _on_account(self, slot: int, pubkey: Pubkey, account: Account | None) -> None:
        encoded: dict[tuple[str, tuple[int, int] | None], dict[str, Any]] = {}
        for sub_id in list(self._by_account.get(pubkey, ())):
            sub = self._subs[sub_id]
            key = (sub.encoding, sub.data_slice)
            if key not in encoded:
                encoded[key] = self._ui_account(account, sub)
            result = {"context": {"slot": slot}, "value": encoded[key]}
            sub.client.send(_notification("accountNotification", sub_id, result))

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

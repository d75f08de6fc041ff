"""Solana JSON-RPC over HTTP (httpx) and ``accountSubscribe`` over websocket, with retries.

Only the handful of methods the client needs, written directly against the JSON-RPC API so the
retry, timeout and fallback policy is ours and visible (docs/solana.md, "Python side"):

* :class:`SolanaRpc` — one endpoint: ``getAccountInfo`` (base64), ``getLatestBlockhash``,
  ``sendTransaction`` (preflight on, so a program error comes back at once with its custom code),
  ``getSignatureStatuses``, ``getMinimumBalanceForRentExemption``.
* :class:`TxSender` — signs and sends one transaction through a list of endpoints: 3 attempts per
  endpoint with a backoff of 500 ms ×1.5 (at most 10 s), then the next endpoint. A transaction
  the *program* rejects is not retried (the same transaction fails the same way); the error names
  the program's error from the IDL. Before signing anew it waits for each signature it already
  sent to land or expire, so a transaction still in flight is never run twice.
* :func:`account_updates` — one websocket subscription with reconnects after
  ``min(30, 2·retries)`` s; the backend runs one per websocket endpoint (primary and fallback).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from psyche.solana.errors import ChainError

__all__ = [
    "AlreadyProcessedError",
    "BlockhashExpiredError",
    "ProgramRejectedError",
    "RpcError",
    "RpcRefusedError",
    "SolanaRpc",
    "TxSender",
    "account_updates",
    "reconnect_delay",
]

log = logging.getLogger(__name__)

COMMITMENT = "confirmed"
MAX_MULTIPLE_ACCOUNTS = 100
"""The most keys one ``getMultipleAccounts`` takes (Solana's RPC limit)."""
RATE_LIMIT_RETRIES = 4
"""Calls answered HTTP 429 (a public RPC's rate limit) are repeated this many times, each after
the answer's ``Retry-After`` (capped by :data:`RATE_LIMIT_MAX_WAIT_S`) or 1, 2, 4, 8 s."""
RATE_LIMIT_MAX_WAIT_S = 10.0
SETTLE_TIMEOUT_S = 180.0
"""How long the sender may wait for an earlier signature of the same instructions to land or
expire before it signs them anew: longer than a blockhash lives on a real cluster (150 blocks,
60-90 s), so the wait normally ends with the expiry, not with this bound."""


def retry_after(header: str | None, attempt: int) -> float:
    """Seconds to wait before repeating a rate-limited call (``Retry-After`` in seconds, else
    exponential), never more than :data:`RATE_LIMIT_MAX_WAIT_S`."""
    try:
        wait = float(header) if header is not None else 2.0**attempt
    except ValueError:  # an HTTP date, which no Solana RPC sends: wait as without one
        wait = 2.0**attempt
    return min(RATE_LIMIT_MAX_WAIT_S, max(0.0, wait))


class RpcError(ChainError):
    """An endpoint failed or answered with a JSON-RPC error (worth retrying elsewhere)."""


class ProgramRejectedError(ChainError):
    """The program rejected the transaction (``code``: custom error, ``name``: its IDL name)."""

    def __init__(self, code: int | None, name: str | None, message: str) -> None:
        self.code = code
        self.name = name
        what = f"{name} ({code})" if name else (str(code) if code is not None else "error")
        super().__init__(f"the program rejected the transaction: {what}: {message}")


def reconnect_delay(retries: int) -> float:
    """Websocket reconnect backoff: ``min(30, 2·retries)`` seconds.

    See docs/solana.md, "Python side".
    """
    return float(min(30, 2 * retries))


class RpcRefusedError(RpcError):
    """The node answered the call with a JSON-RPC error: it did the call's work not at all (for
    ``sendTransaction``: the transaction was not forwarded, so it is not in flight)."""


class AlreadyProcessedError(RpcError):
    """The node has already processed this very transaction (same signature)."""


class BlockhashExpiredError(RpcError):
    """A sent transaction's blockhash expired before it landed: it never will, and signing the
    instructions anew cannot run them twice."""

    def __init__(self, message: str, signature: str = "") -> None:
        super().__init__(message)
        self.signature = signature


def deterministic_error(err: Any) -> bool:
    """Whether a transaction error would recur on every retry: an instruction failed, or an
    account would be left below rent exemption (unlike a stale blockhash or a busy node)."""
    return isinstance(err, dict) and (
        "InstructionError" in err or "InsufficientFundsForRent" in err
    )


def custom_error_code(err: Any) -> int | None:
    """The custom program error code in a transaction error, e.g.
    ``{"InstructionError": [0, {"Custom": 6003}]}``."""
    if isinstance(err, dict) and "InstructionError" in err:
        detail = err["InstructionError"]
        if isinstance(detail, list) and len(detail) == 2 and isinstance(detail[1], dict):
            code = detail[1].get("Custom")
            return int(code) if isinstance(code, int) else None
    return None


class SolanaRpc:
    """One JSON-RPC endpoint."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None
        self._next_id = 0

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def call(self, method: str, params: list[Any]) -> Any:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self._timeout)
        self._next_id += 1
        body = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        try:
            for attempt in range(RATE_LIMIT_RETRIES + 1):
                resp = await self._http.post(self.url, json=body)
                if resp.status_code != 429 or attempt == RATE_LIMIT_RETRIES:
                    break
                wait = retry_after(resp.headers.get("Retry-After"), attempt)
                log.warning(
                    "%s: %s rate-limited (HTTP 429); again in %.1f s", self.url, method, wait
                )
                await asyncio.sleep(wait)
            if resp.status_code == 429:
                raise RpcError(
                    f"{self.url}: {method}: rate-limited (HTTP 429) {RATE_LIMIT_RETRIES + 1} "
                    "times: use a less busy RPC endpoint (RPC_2 and RPC_3 are fallbacks)"
                )
            resp.raise_for_status()
            reply = resp.json()
        except (httpx.HTTPError, ValueError) as e:
            raise RpcError(f"{self.url}: {method}: {type(e).__name__}: {e}") from e
        if not isinstance(reply, dict):
            raise RpcError(f"{self.url}: {method}: malformed reply")
        if "error" in reply:
            err: dict[str, Any] = reply["error"] if isinstance(reply["error"], dict) else {}
            data = err.get("data")
            tx_err = data.get("err") if isinstance(data, dict) else None
            message = str(err.get("message", ""))
            if deterministic_error(tx_err):
                raise ProgramRejectedError(custom_error_code(tx_err), None, message)
            if tx_err == "AlreadyProcessed":
                raise AlreadyProcessedError(f"{self.url}: {method}: {message}")
            raise RpcRefusedError(f"{self.url}: {method}: {err.get('message', reply['error'])}")
        return reply.get("result")

    async def get_account(self, pubkey: Pubkey) -> bytes | None:
        """The account's data, or None if it does not exist."""
        res = await self.call(
            "getAccountInfo", [str(pubkey), {"encoding": "base64", "commitment": COMMITMENT}]
        )
        value = res.get("value") if isinstance(res, dict) else None
        if value is None:
            return None
        return decode_account_data(value)

    async def get_multiple_accounts(
        self, pubkeys: Sequence[Pubkey]
    ) -> list[tuple[Pubkey, bytes] | None]:
        """(owner, data) of each account, None where it does not exist; at most
        :data:`MAX_MULTIPLE_ACCOUNTS` keys (the RPC's own limit)."""
        if len(pubkeys) > MAX_MULTIPLE_ACCOUNTS:
            raise ValueError(f"at most {MAX_MULTIPLE_ACCOUNTS} accounts per call")
        res = await self.call(
            "getMultipleAccounts",
            [[str(k) for k in pubkeys], {"encoding": "base64", "commitment": COMMITMENT}],
        )
        values = res.get("value") if isinstance(res, dict) else None
        if not isinstance(values, list) or len(values) != len(pubkeys):
            raise RpcError(f"{self.url}: getMultipleAccounts: malformed reply")
        out: list[tuple[Pubkey, bytes] | None] = []
        for value in values:
            if value is None:
                out.append(None)
                continue
            try:
                owner = Pubkey.from_string(str(value.get("owner")))
            except (ValueError, AttributeError):
                raise RpcError(f"{self.url}: getMultipleAccounts: bad owner") from None
            out.append((owner, decode_account_data(value)))
        return out

    async def latest_blockhash(self) -> Hash:
        return (await self.latest_blockhash_and_expiry())[0]

    async def latest_blockhash_and_expiry(self) -> tuple[Hash, int | None]:
        """The latest blockhash and the last block height at which a transaction signed with
        it can land (``None`` where the node does not say)."""
        res = await self.call("getLatestBlockhash", [{"commitment": COMMITMENT}])
        last_valid = res["value"].get("lastValidBlockHeight")
        blockhash = Hash.from_string(res["value"]["blockhash"])
        return blockhash, int(last_valid) if isinstance(last_valid, int) else None

    async def block_height(self) -> int:
        return int(await self.call("getBlockHeight", [{"commitment": COMMITMENT}]))

    async def minimum_balance(self, size: int) -> int:
        return int(await self.call("getMinimumBalanceForRentExemption", [size]))

    async def send_transaction(self, tx: Transaction) -> str:
        data = base64.b64encode(bytes(tx)).decode()
        opts = {"encoding": "base64", "preflightCommitment": COMMITMENT}
        return str(await self.call("sendTransaction", [data, opts]))

    async def status(self, signature: str) -> dict[str, Any] | None:
        """The signature's status, or None if this node has not seen it land."""
        res = await self.call("getSignatureStatuses", [[signature]])
        status = (res.get("value") or [None])[0] if isinstance(res, dict) else None
        return status if isinstance(status, dict) else None

    async def confirm(self, signature: str, timeout: float, last_valid: int | None = None) -> None:
        """Wait until the signature is confirmed; a failed transaction raises. With
        ``last_valid`` (its blockhash's last valid block height), a transaction the chain has
        not seen once the block height passed it can never land: :class:`BlockhashExpiredError`
        at once, so the sender signs anew without waiting out ``timeout``."""
        deadline = time.monotonic() + timeout
        polls = 0
        while True:
            res = await self.call("getSignatureStatuses", [[signature]])
            status = (res.get("value") or [None])[0] if isinstance(res, dict) else None
            if status is not None:
                if status.get("err") is not None:
                    code = custom_error_code(status["err"])
                    raise ProgramRejectedError(code, None, json.dumps(status["err"]))
                if status.get("confirmationStatus") in ("confirmed", "finalized"):
                    return
            elif last_valid is not None and polls % 5 == 4:  # every 2 s: one more call
                height = await self.block_height()
                if height > last_valid:
                    raise BlockhashExpiredError(
                        f"{self.url}: transaction {signature} expired unconfirmed (block height "
                        f"{height} > its last valid {last_valid}); signing it anew",
                        signature,
                    )
            if time.monotonic() > deadline:
                raise RpcError(f"{self.url}: transaction {signature} not confirmed in {timeout} s")
            polls += 1
            await asyncio.sleep(0.4)


def decode_account_data(value: dict[str, Any]) -> bytes:
    data = value.get("data")
    if not (isinstance(data, list) and len(data) == 2 and data[1] == "base64"):
        raise RpcError(f"account data in an unexpected encoding: {str(data)[:80]}")
    return base64.b64decode(data[0])


class TxSender:
    """Sends transactions through ``rpcs`` in order, with the retry policy of docs/solana.md,
    "Python side"."""

    def __init__(
        self,
        rpcs: Sequence[SolanaRpc],
        payer: Keypair,
        *,
        error_names: Callable[[int], str | None] = lambda _: None,
        attempts: int = 3,
        backoff: float = 0.5,
        backoff_factor: float = 1.5,
        max_backoff: float = 10.0,
        confirm_timeout: float = 30.0,
        prepare: Callable[[Sequence[Instruction]], list[Instruction]] | None = None,
    ) -> None:
        """``prepare`` rewrites each instruction list before signing (the session's
        :class:`~psyche.solana.budget.ComputeBudget` prepends the compute-unit limit)."""
        if not rpcs:
            raise ValueError("at least one RPC endpoint is needed")
        self.rpcs = list(rpcs)
        self.payer = payer
        self._names = error_names
        self._attempts = attempts
        self._backoff = (backoff, backoff_factor, max_backoff)
        self._confirm_timeout = confirm_timeout
        self._prepare = prepare

    async def send(
        self,
        ixs: Sequence[Instruction],
        extra_signers: Sequence[Keypair] = (),
        *,
        label: str = "",
        confirm_timeout: float | None = None,
    ) -> str:
        """Sign (payer first) and send; returns the confirmed signature."""
        timeout = self._confirm_timeout if confirm_timeout is None else confirm_timeout
        if self._prepare is not None:
            ixs = self._prepare(ixs)
        last: Exception | None = None
        delay, factor, cap = self._backoff
        # Signatures sent and possibly in flight, with their blockhash's last valid block height:
        # a send or confirm that failed on our side may still land (on a real cluster a
        # transaction is seen only some hundred milliseconds after it was sent), and signing
        # anew with a newer blockhash while one is in flight could run the instructions twice.
        pending: dict[str, int | None] = {}
        for rpc in self.rpcs:
            wait = delay
            for attempt in range(1, self._attempts + 1):
                try:
                    landed = await self._settle(rpc, pending, timeout)
                    if landed is not None:
                        return landed
                    return await self._sign_and_send(rpc, ixs, extra_signers, pending, timeout)
                except ProgramRejectedError as e:
                    name = self._names(e.code) if e.code is not None else None
                    raise ProgramRejectedError(e.code, name, f"{label}: {e}") from None
                except ChainError as e:
                    if isinstance(e, BlockhashExpiredError):
                        pending.pop(e.signature, None)  # it can never land
                    last = e
                    log.warning(
                        "%s: attempt %d/%d on %s failed: %s",
                        label or "transaction",
                        attempt,
                        self._attempts,
                        rpc.url,
                        e,
                    )
                if attempt < self._attempts:
                    await asyncio.sleep(wait)
                    wait = min(cap, wait * factor)
        raise RpcError(f"{label or 'transaction'} failed on every RPC endpoint: {last}")

    async def _sign_and_send(
        self,
        rpc: SolanaRpc,
        ixs: Sequence[Instruction],
        extra_signers: Sequence[Keypair],
        pending: dict[str, int | None],
        timeout: float,
    ) -> str:
        blockhash, last_valid = await rpc.latest_blockhash_and_expiry()
        msg = Message.new_with_blockhash(list(ixs), self.payer.pubkey(), blockhash)
        signers = [self.payer, *[s for s in extra_signers if s != self.payer]]
        tx = Transaction(signers, msg, blockhash)
        sig = str(tx.signatures[0])
        pending[sig] = last_valid
        try:
            # AlreadyProcessed: this very transaction landed before; confirm it.
            with contextlib.suppress(AlreadyProcessedError):
                await rpc.send_transaction(tx)
        except RpcRefusedError:
            # The node refused it (preflight, an unhealthy node): not in flight, so the next
            # attempt need not wait for it.
            del pending[sig]
            raise
        await rpc.confirm(sig, timeout, last_valid)
        return sig

    @staticmethod
    async def _settle(rpc: SolanaRpc, pending: dict[str, int | None], timeout: float) -> str | None:
        """Waits until each signature in ``pending`` landed or can no longer land, before the
        instructions are signed anew: the landed one (confirmed; a landed one that failed raises
        its error), or None once every one expired. A signature whose blockhash expiry the node
        did not give is waited for only if the node already knows it."""
        for sig, last_valid in list(pending.items()):
            if last_valid is None:
                if await rpc.status(sig) is None:
                    del pending[sig]
                    continue
                await rpc.confirm(sig, timeout)
                return sig
            try:
                await rpc.confirm(sig, max(timeout, SETTLE_TIMEOUT_S), last_valid)
            except BlockhashExpiredError:
                del pending[sig]
                continue
            return sig
        return None


async def account_updates(
    ws_url: str,
    pubkey: Pubkey,
    *,
    delay: Callable[[int], float] = reconnect_delay,
    on_connect: Callable[[], None] | None = None,
) -> AsyncIterator[bytes]:
    """Account data from ``accountSubscribe`` at ``ws_url``, forever, reconnecting on failure."""
    from websockets.asyncio.client import connect

    retries = 0
    while True:
        try:
            async with connect(ws_url, open_timeout=10, close_timeout=2, max_size=16 * 2**20) as ws:
                params = [str(pubkey), {"encoding": "base64", "commitment": COMMITMENT}]
                req = {"jsonrpc": "2.0", "id": 1, "method": "accountSubscribe", "params": params}
                await ws.send(json.dumps(req))
                async with asyncio.timeout(10):
                    ack = json.loads(await ws.recv())
                if "result" not in ack:
                    raise RpcError(f"{ws_url}: accountSubscribe refused: {ack.get('error')}")
                log.info("subscribed to %s at %s", pubkey, ws_url)
                retries = 0
                if on_connect is not None:
                    on_connect()
                async for raw in ws:
                    msg = json.loads(raw)
                    if msg.get("method") != "accountNotification":
                        continue
                    value = msg["params"]["result"]["value"]
                    yield decode_account_data(value)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # any transport or protocol failure: reconnect
            retries += 1
            wait = delay(retries)
            log.warning("websocket %s: %s; reconnecting in %.0f s", ws_url, e, wait)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.sleep(wait)

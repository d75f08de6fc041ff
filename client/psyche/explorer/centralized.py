"""The centralized source: a server's read-only ``GET /status`` endpoint
(:mod:`psyche.backends.centralized.status_http`).

Each poll decodes the published coordinator state strictly (the serde reader a client uses), stores
it under the server's sequence number (a state seen twice is stored once), and stores the witness
reports the endpoint lists under their server-issued refs. The server keeps the last 2048 reports,
so an indexer that was away for longer misses the ones in between (and says so in one line).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from psyche.coordinator.state_json import from_obj_state
from psyche.explorer.observe import ClientRow, MetricObs, observe
from psyche.explorer.sources import BadInput, SourceUnavailable
from psyche.explorer.store import Store

__all__ = ["CentralizedSource", "metric_from_report"]

P2P_NA = "n/a"
"""P2P reachability on the centralized backend (docs/explorer.md, "The page"): the server forwards
the addresses clients announce but never dials them, and its read-only ``/status`` leaves them
out, so the explorer has nothing to judge reachability by."""

log = logging.getLogger(__name__)

MAX_STATUS = 8 * 2**20
"""A status answer larger than this is refused (a coordinator's JSON is ~100 KB at most)."""


def metric_from_report(r: Any) -> MetricObs:
    if not isinstance(r, dict):
        raise BadInput("a witness report is not an object")
    try:
        evals = [[int(t), float(v)] for t, v in r.get("evals", [])]
        return MetricObs(
            ref=str(r["ref"])[:100],
            at=float(r["at"]),
            client=str(r["client"])[:200],
            step=int(r["step"]),
            loss=float(r["loss"]),
            tokens_per_sec=float(r["tokens_per_sec"]),
            bandwidth_per_sec=float(r["bandwidth_per_sec"]),
            efficiency=float(r["efficiency"]),
            evals=evals[:64],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"a witness report is malformed: {e!r}") from None


class CentralizedSource:
    def __init__(self, store: Store, url: str, *, timeout: float = 5.0) -> None:
        self.store = store
        self.url = url.rstrip("/")
        if not self.url.endswith("/status"):
            self.url += "/status"
        self.name = f"centralized {self.url}"
        self.timeout = timeout
        self.calls = 0
        self._http: httpx.AsyncClient | None = None
        self._run: int | None = None
        self._first_seq: int | None = None
        self._seq: int | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def wait_for_change(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    async def _fetch(self) -> dict[str, Any]:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        self.calls += 1
        try:
            # ``since``: the states published between two polls come too (a round's phases can
            # be shorter than the poll interval).
            params = {} if self._seq is None else {"since": str(self._seq)}
            resp = await self._http.get(self.url, params=params)
        except httpx.HTTPError as e:
            raise SourceUnavailable(f"{self.url}: {type(e).__name__}: {e}") from None
        if resp.status_code != 200:
            raise SourceUnavailable(f"{self.url}: HTTP {resp.status_code}")
        if len(resp.content) > MAX_STATUS:
            raise BadInput(f"{self.url}: answer of {len(resp.content)} bytes refused")
        try:
            body = resp.json()
        except ValueError as e:
            raise BadInput(f"{self.url}: not JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadInput(f"{self.url}: the answer is not an object")
        return body

    async def poll(self) -> int:
        body = await self._fetch()
        try:
            coordinator = from_obj_state(body["coordinator"])
            seq = int(body["seq"])
            connected = set(map(str, body.get("connected", [])))
            pending = [str(p) for p in body.get("pending", [])]
            reports = list(body.get("witnesses", []))
            earlier = [
                (int(e["seq"]), from_obj_state(e["coordinator"]))
                for e in body.get("earlier", [])[:64]
            ]
        except Exception as e:  # the strict decoder's errors, or a missing key
            raise BadInput(f"{self.url}: undecodable status: {type(e).__name__}: {e}") from None
        host = self.url.split("://", 1)[-1].rsplit("/status", 1)[0]
        if self._run is None:
            key = f"centralized:{host}:{coordinator.run_id}"
            self._run = self.store.run(key, "centralized", host, coordinator.run_id)
        first_seq = body.get("first_seq")
        if self._first_seq is not None and first_seq != self._first_seq:
            log.info("%s: the server restarted (new sequence origin %s)", self.name, first_seq)
        self._first_seq = first_seq if isinstance(first_seq, int) else None
        rows = [
            ClientRow(
                x.id.hex(),
                x.state.name,
                x.state.name == "Healthy",
                connected=x.id.hex() in connected,
                p2p=P2P_NA,
            )
            for x in coordinator.epoch_state.clients
        ]
        in_epoch = {r.id for r in rows}
        rows += [
            ClientRow(p, "Pending", False, connected=p in connected, p2p=P2P_NA)
            for p in pending
            if p not in in_epoch
        ]
        events = [
            {"at": float(e["at"]), "text": str(e["text"])[:300]}
            for e in body.get("events", [])[-20:]
            if isinstance(e, dict) and isinstance(e.get("at"), int | float)
        ]
        obs = observe(coordinator, seq, clients=rows, extra={"events": events})
        # Earlier states are stored only for their phases and rounds (the latest one's client
        # rows replace theirs on the run).
        before = [observe(c, n) for n, c in sorted(earlier, key=lambda e: e[0])]
        found = []
        for r in reports:
            try:
                found.append(metric_from_report(r))
            except BadInput as e:
                log.warning("%s: %s", self.name, e)
        # One transaction: a crash stores the poll whole or not at all.
        stored = self.store.record_state(self._run, obs, found, earlier=before)
        self._seq = seq
        return stored

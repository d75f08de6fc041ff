"""The blob protocol over in-memory streams: honest, forged, stalled, truncated, refusing peers."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from psyche.p2p.control import FetchDone, FetchErrorKind, blob_path
from psyche.p2p.digests import Digest, digest_of
from psyche.p2p.host.blobs import (
    HEADER_LEN,
    MAX_HINTS,
    MAX_HINTS_LEN,
    REQUEST_LEN,
    BlobServer,
    ByteStream,
    Status,
    decode_header,
    decode_hints,
    decode_request,
    encode_header,
    encode_hints,
    encode_request,
    ping,
    read_exactly,
    serve_ping,
)
from psyche.p2p.host.fetch import FetchRequest, fetch_blob
from psyche.p2p.host.peers import PeerTable

BLOB = os.urandom(300_000)
H = hashlib.sha256(BLOB).digest()


class Stream:
    """The :class:`ByteStream` face of one end of a trio in-memory stream pair."""

    def __init__(self, s: Any) -> None:
        self.s = s

    async def read(self, n: int | None = None) -> bytes:
        return bytes(await self.s.receive_some(n))

    async def write(self, data: bytes) -> None:
        await self.s.send_all(data)

    async def close(self) -> None:
        await self.s.send_stream.aclose()

    async def reset(self) -> None:
        await self.s.aclose()


Handler = Callable[[ByteStream], Awaitable[None]]


def run_fetch(
    tmp_path: Path,
    handlers: dict[str, Handler],
    peers: list[str],
    *,
    max_size: int = len(BLOB),
    timeout: float = 5.0,
    attempt_timeout: float = 2.0,
    table: PeerTable | None = None,
    allowed: set[str] | None = None,
    connected: set[str] | None = None,
    clock: trio.abc.Clock | None = None,
    name: bytes = H,
    digest: Digest = Digest.sha256,
) -> tuple[FetchDone, list[str]]:
    """Fetch ``name`` (``H``: the SHA-256 of ``BLOB``) from ``peers`` served by ``handlers``;
    returns the outcome and peers dialled."""
    table = table or PeerTable()
    opened: list[str] = []

    running: set[object] = set()
    # Set while no server runs. An event rather than a poll: under a MockClock every poll's
    # sleep is one autojump, each after its threshold of real time (50 s per test at 0.5 s).
    idle = [trio.Event()]
    idle[0].set()

    async def serve(handler: Handler, stream: ByteStream) -> None:
        token = object()
        if idle[0].is_set():
            idle[0] = trio.Event()
        running.add(token)
        try:
            await handler(stream)
        finally:
            running.discard(token)
            if not running:
                idle[0].set()

    async def main() -> FetchDone:
        async with trio.open_nursery() as nursery:

            async def open_stream(peer: str) -> ByteStream:
                opened.append(peer)
                if peer not in handlers:
                    raise ConnectionRefusedError(f"cannot dial {peer}")
                ours, theirs = trio.testing.memory_stream_pair()
                nursery.start_soon(serve, handlers[peer], Stream(theirs))
                return Stream(ours)

            req = FetchRequest(1, name, max_size, peers, timeout, attempt_timeout, digest)
            done = await fetch_blob(
                req,
                blob_dir=tmp_path,
                table=table,
                is_allowed=lambda p: allowed is None or p in allowed,
                open_stream=open_stream,
                connected=None if connected is None else (lambda: connected),
            )
            with trio.move_on_after(1.0):  # let servers finish their bookkeeping (not stallers)
                await idle[0].wait()
            nursery.cancel_scope.cancel()
            return done

    done = trio.run(main, clock=clock)
    assert not list(tmp_path.glob("*.part")), "partial downloads must be cleaned up"
    return done, opened


def server_for(
    tmp_path: Path, content: bytes, name: bytes = H, **kw: Any
) -> tuple[BlobServer, Handler]:
    path = tmp_path / f"served-{os.urandom(4).hex()}"
    path.write_bytes(content)
    server = BlobServer(is_allowed=lambda p: p != "outsider", **kw)
    server.serve(name, str(path), len(content))

    async def handle(stream: ByteStream) -> None:
        await server.handle(stream, "fetcher")

    return server, handle


async def ask(server: BlobServer, peer: str) -> Status:
    """``peer`` asks ``server`` for blob ``H`` (reading the blob when served)."""
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.handle, Stream(theirs), peer)
        await Stream(ours).write(encode_request(H, len(BLOB)))
        status, length = decode_header(await read_exactly(Stream(ours), HEADER_LEN))
        if status is Status.OK:
            assert await read_exactly(Stream(ours), length) == BLOB
        else:
            await read_exactly(Stream(ours), length)  # the hints
        return status


def scripted(*parts: bytes, then: str = "close") -> Handler:
    """A server that reads the request, writes ``parts``, then closes, stalls or resets."""

    async def handle(stream: ByteStream) -> None:
        await read_exactly(stream, REQUEST_LEN)
        for part in parts:
            await stream.write(part)
        if then == "stall":
            await trio.sleep_forever()
        await (stream.close() if then == "close" else stream.reset())

    return handle


def test_request_and_header_codecs() -> None:
    assert decode_request(encode_request(H, 2**64 - 1)) == (H, 2**64 - 1)
    assert decode_header(encode_header(Status.BUSY, 5)) == (Status.BUSY, 5)
    with pytest.raises(ValueError):
        decode_request(bytes(REQUEST_LEN - 1))
    with pytest.raises(ValueError, match="unknown"):
        decode_header(bytes([9]) + bytes(8))
    with pytest.raises(ValueError):
        encode_request(bytes(31), 1)


def test_honest_fetch_writes_a_verified_file_and_measures_the_peer(tmp_path: Path) -> None:
    server, handle = server_for(tmp_path, BLOB)
    table = PeerTable()
    done, _ = run_fetch(tmp_path, {"a": handle}, ["a"], table=table)
    assert done.path == str(blob_path(tmp_path, H)) and done.from_peer == "a"
    assert Path(done.path).read_bytes() == BLOB and done.failures == []
    assert server.served == 1 and (table.get("a").bandwidth_bps or 0) > 0


def test_forged_truncated_and_lying_peers_are_skipped(tmp_path: Path) -> None:
    _, honest = server_for(tmp_path, BLOB)
    _, forger = server_for(tmp_path, os.urandom(len(BLOB)))
    truncator = scripted(encode_header(Status.OK, len(BLOB)), BLOB[:1000])
    liar = scripted(encode_header(Status.OK, len(BLOB) + 1))
    handlers = {"forger": forger, "trunc": truncator, "liar": liar, "honest": honest}
    done, _ = run_fetch(tmp_path, handlers, ["forger", "trunc", "liar", "dead", "honest"])
    assert done.from_peer == "honest"
    reasons = dict((f.peer, f.reason) for f in done.failures)
    assert "does not match" in reasons["forger"]
    assert "ended after 1000" in reasons["trunc"]
    assert "max_size" in reasons["liar"]
    assert "ConnectionRefusedError" in reasons["dead"]


def test_a_blake3_named_blob_is_checked_as_blake3(tmp_path: Path) -> None:
    """The SparseLoCo audit's blobs are named by their BLAKE3 (psyche.p2p.digests): a fetch
    that says so keeps the honest copy and skips a forger; the same id checked as SHA-256
    matches no copy at all, so a fetch never takes one kind of id for the other."""
    name = digest_of(BLOB, Digest.blake3)
    assert name != H
    _, forger = server_for(tmp_path, os.urandom(len(BLOB)), name)
    _, honest = server_for(tmp_path, BLOB, name)
    handlers = {"forger": forger, "honest": honest}
    done, _ = run_fetch(tmp_path, handlers, ["forger", "honest"], name=name, digest=Digest.blake3)
    assert done.from_peer == "honest" and Path(str(done.path)).read_bytes() == BLOB
    assert "does not match" in dict((f.peer, f.reason) for f in done.failures)["forger"]
    (tmp_path / "sha").mkdir()
    done, _ = run_fetch(tmp_path / "sha", {"honest": honest}, ["honest"], name=name, timeout=0.5)
    assert done.path is None
    assert "does not match" in dict((f.peer, f.reason) for f in done.failures)["honest"]


def test_stalled_peer_hits_the_attempt_timeout_then_another_peer_serves(tmp_path: Path) -> None:
    stall = scripted(encode_header(Status.OK, len(BLOB)), BLOB[:10], then="stall")
    _, honest = server_for(tmp_path, BLOB)
    # Virtual time that moves only once every task has waited 0.5 s of real time: the stall is
    # skipped at once, while the honest upload (its file read in a worker thread) cannot run
    # into the 0.3 s timeout however loaded the machine is (it did once on real time).
    clock = trio.testing.MockClock(autojump_threshold=0.5)
    done, _ = run_fetch(
        tmp_path, {"frozen": stall, "b": honest}, ["frozen", "b"], attempt_timeout=0.3, clock=clock
    )
    assert done.from_peer == "b"
    assert [f.peer for f in done.failures] == ["frozen"]
    assert "within 0.3 s" in done.failures[0].reason


def test_connected_peers_are_asked_before_unreachable_ones(tmp_path: Path) -> None:
    # The producer is first in the list but behind a NAT with no connection to us: dialling it
    # would cost a whole attempt timeout before the peer re-serving it is asked.
    stall = scripted(then="stall")
    _, honest = server_for(tmp_path, BLOB)
    handlers = {"natd-producer": stall, "reserver": honest}
    peers = ["natd-producer", "reserver"]
    done, opened = run_fetch(tmp_path, handlers, peers, attempt_timeout=3, connected={"reserver"})
    assert done.from_peer == "reserver" and opened == ["reserver"] and done.seconds < 2
    # Without the hint the old order stands (and the stall costs its attempt timeout).
    clock = trio.testing.MockClock(autojump_threshold=0.5)  # as in the stalled-peer test
    done, opened = run_fetch(tmp_path, handlers, peers, attempt_timeout=0.3, clock=clock)
    assert opened[0] == "natd-producer" and done.from_peer == "reserver"


def test_too_large_everywhere_fails_fast_without_transfer(tmp_path: Path) -> None:
    server, handle = server_for(tmp_path, BLOB)
    done, _ = run_fetch(tmp_path, {"a": handle, "b": handle}, ["a", "b"], max_size=10, timeout=30)
    assert done.kind is FetchErrorKind.too_large and done.seconds < 5
    assert server.served == 0 and server.refused == 2


def test_missing_blob_is_retried_until_the_deadline(tmp_path: Path) -> None:
    server = BlobServer(is_allowed=lambda p: True)

    async def handle(stream: ByteStream) -> None:
        await server.handle(stream, "fetcher")

    done, _ = run_fetch(tmp_path, {"a": handle}, ["a"], timeout=0.8)
    assert done.kind is FetchErrorKind.not_found
    assert len(done.failures) >= 2, "a missing blob is asked for again (it may arrive later)"


def test_peers_outside_the_allow_list_are_never_dialled(tmp_path: Path) -> None:
    _, honest = server_for(tmp_path, BLOB)
    done, opened = run_fetch(tmp_path, {"x": honest, "y": honest}, ["x", "y"], allowed={"y"})
    assert done.from_peer == "y" and opened == ["y"]
    done, opened = run_fetch(tmp_path, {"x": honest}, ["x"], allowed=set())
    assert done.kind is FetchErrorKind.not_found and opened == []


def test_one_blob_is_uploaded_to_at_most_two_fetchers_at_once(tmp_path: Path) -> None:
    server, _ = server_for(tmp_path, BLOB, min_rate_bps=1.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            streams = []
            for i in range(3):
                ours, theirs = trio.testing.memory_stream_pair()
                nursery.start_soon(server.handle, Stream(theirs), f"peer{i}")
                await Stream(ours).write(encode_request(H, len(BLOB)))
                streams.append(Stream(ours))
            # Nobody reads yet: the first two uploads are under way, the third is turned away.
            headers = [decode_header(await read_exactly(s, HEADER_LEN)) for s in streams]
            assert [h[0] for h in headers] == [Status.OK, Status.OK, Status.BUSY]
            # ... and told whom to ask instead: the two peers the blob is on its way to.
            hints = decode_hints(await read_exactly(streams[2], headers[2][1]))
            assert hints == ["peer1", "peer0"]
            for s in streams[:2]:
                assert await read_exactly(s, len(BLOB)) == BLOB
        assert server.served == 2 and server.refused == 1

    trio.run(main)


def test_server_refuses_outsiders_oversize_and_overload(tmp_path: Path) -> None:
    server, _ = server_for(tmp_path, BLOB, max_concurrent=0)

    async def ask(peer: str, max_size: int, blob_hash: bytes = H) -> tuple[Status, int]:
        ours, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.handle, Stream(theirs), peer)
            await Stream(ours).write(encode_request(blob_hash, max_size))
            return decode_header(await read_exactly(Stream(ours), HEADER_LEN))

    async def main() -> None:
        assert await ask("outsider", len(BLOB)) == (Status.FORBIDDEN, len(BLOB))
        assert await ask("peer", len(BLOB) - 1) == (Status.TOO_LARGE, len(BLOB))
        assert await ask("peer", len(BLOB), bytes(32)) == (Status.NOT_FOUND, 0)
        assert await ask("peer", len(BLOB)) == (Status.BUSY, 0)  # no hints: nobody has it

    trio.run(main)
    assert server.refused == 4 and server.served == 0


def test_server_drops_a_client_that_never_sends_its_request(tmp_path: Path) -> None:
    server, _ = server_for(tmp_path, BLOB, request_timeout=0.1)

    async def main() -> bytes:
        ours, theirs = trio.testing.memory_stream_pair()
        with trio.fail_after(5):
            await server.handle(Stream(theirs), "peer")
            return bytes(await ours.receive_some())

    assert trio.run(main) == b""  # reset without an answer


def test_ping_echoes_and_measures(tmp_path: Path) -> None:
    async def main() -> float:
        ours, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_ping, Stream(theirs))
            return await ping(Stream(ours))

    assert 0.0 <= trio.run(main) < 1.0


def test_only_bad_links_and_dishonest_peers_lose_their_ranking(tmp_path: Path) -> None:
    _, honest = server_for(tmp_path, BLOB)
    _, forger = server_for(tmp_path, os.urandom(len(BLOB)))
    empty = BlobServer(is_allowed=lambda p: True)

    async def missing(stream: ByteStream) -> None:
        await empty.handle(stream, "fetcher")

    table = PeerTable()
    handlers = {"missing": missing, "forger": forger, "honest": honest}
    done, _ = run_fetch(tmp_path, handlers, ["missing", "forger", "honest"], table=table)
    assert done.from_peer == "honest"
    assert table.get("missing").bandwidth_bps is None  # lacking a blob is not a fault
    assert table.get("forger").bandwidth_bps == 0.0
    assert table.order(["forger", "missing", "honest"]) == ["honest", "missing", "forger"]


@pytest.mark.parametrize("handoff", [True, False])
def test_a_blob_is_handed_off_after_two_uploads_then_served_again(
    tmp_path: Path, handoff: bool
) -> None:
    server, _ = server_for(tmp_path, BLOB, handoff_min_s=0.5, handoff_factor=0.0)
    if not handoff:  # a model snapshot piece: joiners ask one holder by name, never turned away
        server.serve(H, server._blobs[H].path, len(BLOB), handoff=False)

    async def main() -> list[Status]:
        got = [await ask(server, p) for p in ("first", "second", "third")]
        await trio.sleep(0.6)  # the window is over: a fetcher nobody else served still gets it
        return [*got, await ask(server, "third")]

    if handoff:
        assert trio.run(main) == [Status.OK, Status.OK, Status.BUSY, Status.OK]
        assert server.served == 3 and server.handed_off == 1 and server.refused == 1
    else:
        assert trio.run(main) == [Status.OK] * 4
        assert server.served == 4 and server.handed_off == 0 and server.refused == 0


def test_a_busy_answer_names_the_peers_the_blob_was_uploaded_to(tmp_path: Path) -> None:
    server, _ = server_for(tmp_path, BLOB, handoff_min_s=5.0)

    async def ask(peer: str) -> tuple[Status, list[str]]:
        ours, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.handle, Stream(theirs), peer)
            await Stream(ours).write(encode_request(H, len(BLOB)))
            status, length = decode_header(await read_exactly(Stream(ours), HEADER_LEN))
            body = await read_exactly(Stream(ours), length)
            return status, decode_hints(body) if status is Status.BUSY else []

    async def main() -> list[tuple[Status, list[str]]]:
        return [await ask(p) for p in ("first", "second", "third", "fourth")]

    assert trio.run(main) == [
        (Status.OK, []),
        (Status.OK, []),
        (Status.BUSY, ["second", "first"]),  # newest first
        (Status.BUSY, ["second", "first"]),
    ]


def test_a_served_payload_reports_each_allowed_peer_that_asked_once(tmp_path: Path) -> None:
    # The daemon stops resending a result once every member asked for its payload
    # (psyche.daemon.resending): whatever the answer, an allowed asker has heard the result.
    server, _ = server_for(tmp_path, BLOB, handoff_min_s=5.0)
    other = tmp_path / "other"
    other.write_bytes(BLOB)
    server.serve(H, server._blobs[H].path, len(BLOB), report_askers=True)
    server.serve(bytes(32), str(other), len(BLOB))  # a re-served download: not tracked

    async def ask(peer: str, blob_hash: bytes = H, max_size: int = len(BLOB)) -> Status:
        ours, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.handle, Stream(theirs), peer)
            await Stream(ours).write(encode_request(blob_hash, max_size))
            status, length = decode_header(await read_exactly(Stream(ours), HEADER_LEN))
            if status in (Status.OK, Status.BUSY):
                await read_exactly(Stream(ours), length)
            return status

    async def main() -> list[Status]:
        got = [await ask(p) for p in ("a", "b", "c", "a", "outsider")]
        return [*got, await ask("d", max_size=1), await ask("e", bytes(32))]

    statuses = trio.run(main)
    assert statuses == [Status.OK, Status.OK, Status.BUSY, Status.BUSY, Status.FORBIDDEN,
                        Status.TOO_LARGE, Status.OK]  # fmt: skip
    assert server.take_asked(2) == [(H, ["a", "b"])]  # the rest waits for the next report
    assert server.take_asked(100) == [(H, ["c", "d"])]
    assert server.take_asked(100) == []
    server.unserve(H)
    assert server.take_asked(100) == []


def test_after_the_window_a_new_fetcher_is_named_the_holders_once_then_served(
    tmp_path: Path,
) -> None:
    # Fetchers that heard of the blob late (a resend) come after the window: each is first
    # pointed at the holders, so the producer's uplink does not upload a copy per late fetcher;
    # one that comes back (it could not reach them) is served.
    server, _ = server_for(tmp_path, BLOB, handoff_min_s=0.5, handoff_factor=0.0)

    async def main() -> list[Status]:
        got = [await ask(server, "first"), await ask(server, "second")]
        await trio.sleep(0.6)  # the window is over
        return [*got, await ask(server, "late"), await ask(server, "late")]

    assert trio.run(main) == [Status.OK, Status.OK, Status.BUSY, Status.OK]
    assert server.served == 3 and server.handed_off == 1


def test_a_fetcher_turned_away_three_times_is_served_within_the_window(tmp_path: Path) -> None:
    # Its named holders did not serve it (NAT, departed, unwilling): it must not wait for the
    # whole window, and others still are handed off meanwhile.
    server, _ = server_for(tmp_path, BLOB, handoff_min_s=60.0, handoff_patience=3)

    async def ask(peer: str) -> Status:
        ours, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.handle, Stream(theirs), peer)
            await Stream(ours).write(encode_request(H, len(BLOB)))
            status, length = decode_header(await read_exactly(Stream(ours), HEADER_LEN))
            await read_exactly(Stream(ours), length)
            return status

    async def main() -> list[Status]:
        order = ("first", "second", "late", "late", "other", "late", "late", "other")
        return [await ask(p) for p in order]

    busy, ok = Status.BUSY, Status.OK
    assert trio.run(main) == [ok, ok, busy, busy, busy, busy, ok, busy]
    assert server.served == 3 and server.handed_off == 5


def test_hints_are_bounded_and_never_more_than_peer_names() -> None:
    assert decode_hints(encode_hints(["a", "b"])) == ["a", "b"]
    many = [f"peer{i}" for i in range(10)]
    assert decode_hints(encode_hints(many)) == many[:MAX_HINTS]
    assert len(encode_hints(["x" * 600, "y" * 600])) <= MAX_HINTS_LEN
    assert decode_hints(b"ok\n\x00bad\n\xffx\nfine") == ["ok", "fine"]


def busy_naming(*holders: str) -> Handler:
    """A producer handing its blob off: ``BUSY``, naming ``holders``."""
    hints = encode_hints(holders)
    return scripted(encode_header(Status.BUSY, len(hints)) + hints)


def test_a_fetcher_asks_the_named_holders_next(tmp_path: Path) -> None:
    _, honest = server_for(tmp_path, BLOB)
    empty = BlobServer(is_allowed=lambda p: True)

    async def lacking(stream: ByteStream) -> None:
        await empty.handle(stream, "fetcher")

    handlers = {"producer": busy_naming("c"), "a": lacking, "b": lacking, "c": honest}
    done, opened = run_fetch(tmp_path, handlers, ["producer", "a", "b", "c"])
    assert done.from_peer == "c" and opened == ["producer", "c"]  # not a and b, which lack it


def test_named_holders_come_before_the_producer_in_the_next_pass(tmp_path: Path) -> None:
    # The named holder is still downloading when first asked (NOT_FOUND). In the next pass it
    # is asked before the producer, which would otherwise be first again and, once its
    # handoff window closed, upload a third copy.
    holder, _ = server_for(tmp_path, BLOB)
    empty = BlobServer(is_allowed=lambda p: True)
    asked = 0

    async def downloading_then_holding(stream: ByteStream) -> None:
        nonlocal asked
        asked += 1
        await (empty if asked == 1 else holder).handle(stream, "fetcher")

    async def lacking(stream: ByteStream) -> None:
        await empty.handle(stream, "fetcher")

    handlers = {"producer": busy_naming("c"), "a": lacking, "c": downloading_then_holding}
    done, opened = run_fetch(tmp_path, handlers, ["producer", "a", "c"])
    # a, which nobody named, is not asked while holders are busy handing the blob on.
    assert done.from_peer == "c" and opened == ["producer", "c", "c"]


def test_a_producer_that_handed_off_is_asked_last_in_later_passes(tmp_path: Path) -> None:
    # Its handoff window closes while the named holder is still downloading: the fetcher
    # asks the named holder first, and the producer serves only when it cannot. The peer
    # nobody named waits for a pass that follows one nobody was busy in.
    _, honest = server_for(tmp_path, BLOB)
    empty = BlobServer(is_allowed=lambda p: True)
    asked = 0

    async def producer(stream: ByteStream) -> None:
        nonlocal asked
        asked += 1
        await (busy_naming("c") if asked == 1 else honest)(stream)

    async def lacking(stream: ByteStream) -> None:
        await empty.handle(stream, "fetcher")

    handlers = {"producer": producer, "a": lacking, "c": lacking}
    done, opened = run_fetch(tmp_path, handlers, ["producer", "a", "c"])
    assert done.from_peer == "producer" and opened == ["producer", "c", "c", "producer"]


def test_after_a_busy_answer_only_known_holders_are_asked(tmp_path: Path) -> None:
    # The producer is busy (no hints): the peers that lack the blob are not walked, in that
    # pass nor in the next one, which asks the producer again; they are asked only after a
    # pass in which nobody was busy (here the producer has withdrawn the blob: the third pass
    # still follows a busy one, the fourth walks everyone).
    empty = BlobServer(is_allowed=lambda p: True)
    asked = 0

    async def producer(stream: ByteStream) -> None:
        nonlocal asked
        asked += 1
        await (scripted(encode_header(Status.BUSY, 0)) if asked <= 2 else lacking)(stream)

    async def lacking(stream: ByteStream) -> None:
        await empty.handle(stream, "fetcher")

    handlers = {"producer": producer, "a": lacking, "b": lacking}
    done, opened = run_fetch(tmp_path, handlers, ["producer", "a", "b"], timeout=1.0)
    assert done.path is None
    assert opened[:6] == ["producer", "producer", "producer", "producer", "a", "b"], opened


def test_passes_after_busy_answers_slow_down_to_one_a_second(tmp_path: Path) -> None:
    # Many fetchers turned away at once must not flood the few holders while copies spread:
    # 0.1 s, 0.2 s, 0.4 s, 0.8 s, then 1 s between passes (every 0.1 s would be ~100 here).
    handlers = {"holder": scripted(encode_header(Status.BUSY, 0))}
    done, opened = run_fetch(
        tmp_path,
        handlers,
        ["holder"],
        timeout=10.0,
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    assert done.path is None and done.kind is FetchErrorKind.timeout
    assert 10 <= len(opened) <= 14, len(opened)


def test_a_busy_holder_is_waited_for_instead_of_dialling_an_unconnected_peer(
    tmp_path: Path,
) -> None:
    # The producer is handing its blob off and nobody we are connected to has it yet; the only
    # other candidate is a NAT'd peer we hold no connection to, whose dial would stall.
    server, producer = server_for(tmp_path, BLOB, handoff_min_s=0.6, handoff_factor=0.0)
    server._blobs[H].uploads = 2
    server._blobs[H].handoff_until = 0.0  # set on the fetch's clock below

    async def producer_then_window(stream: ByteStream) -> None:
        if server._blobs[H].handoff_until == 0.0:
            server._blobs[H].handoff_until = trio.current_time() + 0.6
        await producer(stream)

    handlers = {"producer": producer_then_window, "natd": scripted(then="stall")}
    done, opened = run_fetch(
        tmp_path, handlers, ["producer", "natd"], attempt_timeout=3, connected={"producer"}
    )
    assert done.from_peer == "producer" and "natd" not in opened and done.seconds < 2.5
    assert server.handed_off >= 1


def spread(
    tmp_path: Path, n: int, *, latency: float = 0.0, handoff_min_s: float = 1.0
) -> tuple[dict[str, int], int]:
    """N fetchers at once fetch the producer's blob, each serving it once it has it; returns
    the uploads per server and the requests every server answered (served or refused).
    ``latency`` delays every stream open (a round trip on a real link)."""
    names = ["producer", *[f"f{i}" for i in range(n)]]
    servers = {
        name: BlobServer(is_allowed=lambda p: True, handoff_min_s=handoff_min_s, handoff_factor=0.0)
        for name in names
    }
    path = tmp_path / "producer-blob"
    path.write_bytes(BLOB)
    servers["producer"].serve(H, str(path), len(BLOB))

    async def main() -> list[FetchDone]:
        results: list[FetchDone] = []
        async with trio.open_nursery() as nursery:

            def opener(me: str) -> Callable[[str], Awaitable[ByteStream]]:
                async def open_stream(peer: str) -> ByteStream:
                    ours, theirs = trio.testing.memory_stream_pair()
                    await trio.sleep(latency)
                    nursery.start_soon(servers[peer].handle, Stream(theirs), me)
                    return Stream(ours)

                return open_stream

            async def fetch(me: str) -> None:
                blob_dir = tmp_path / me
                blob_dir.mkdir()
                others = [p for p in names if p != me]
                req = FetchRequest(1, H, len(BLOB), others, 60.0, 5.0)
                done = await fetch_blob(
                    req,
                    blob_dir=blob_dir,
                    table=PeerTable(),
                    is_allowed=lambda p: True,
                    open_stream=opener(me),
                    connected=lambda: set(names),
                )
                assert done.path is not None
                servers[me].serve(H, done.path, len(BLOB))  # a fetched blob is served on
                results.append(done)

            async with trio.open_nursery() as fetchers:
                for name in names[1:]:
                    fetchers.start_soon(fetch, name)
            await trio.sleep(1.0)  # servers finish their bookkeeping after the last byte is read
            nursery.cancel_scope.cancel()
        return results

    # Time jumps only when every task has waited 0.1 s of real time: uploads read their file in
    # worker threads, and a jump during such a read would skip over handoff windows.
    done = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.1))
    assert len(done) == n and all(d.path is not None for d in done)
    served = {name: s.served for name, s in servers.items()}
    return served, sum(s.served + s.refused for s in servers.values())


def test_copies_spread_as_a_tree_so_every_holder_uploads_about_twice(tmp_path: Path) -> None:
    """N fetchers at once: the producer uploads twice whatever N is, and so does each holder."""
    n = 12
    served, _ = spread(tmp_path, n)
    assert served["producer"] == 2, served
    assert sum(served.values()) == n and max(served.values()) <= 2, served


def test_a_fetch_asks_about_log_n_peers_not_n(tmp_path: Path) -> None:
    """The requests a fetch makes grow with the depth of the copies' tree, not with the run.

    Fetchers that walked every peer after a ``BUSY`` answer asked n/4 of them per fetch (24.5
    at 96 fetchers, 3.5 at 12, with 50 ms per stream opened); following only the peers a
    ``BUSY`` answer names asks about 2.4 at 12 and 4.9 at 96.
    """
    per_fetch = {}
    for n in (12, 96):
        (tmp_path / str(n)).mkdir()
        served, requests = spread(tmp_path / str(n), n, latency=0.05, handoff_min_s=10.0)
        assert served["producer"] == 2 and max(served.values()) <= 2, served
        per_fetch[n] = requests / n
    assert per_fetch[12] < 3.5 and per_fetch[96] < 6.5, per_fetch

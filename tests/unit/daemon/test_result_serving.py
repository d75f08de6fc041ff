"""Round results are served while members may still want them, and withdrawn after
(``psyche.daemon.result_serving``), on the in-memory transport the simulated run uses."""

from __future__ import annotations

import asyncio

from psyche.daemon.result_serving import KEEP_ROUNDS, ResultBlobs
from psyche.p2p.memory import MemoryNetwork, MemoryTransport
from psyche.protocol.identity import SecretKey


def _pair() -> tuple[MemoryTransport, MemoryTransport]:
    net = MemoryNetwork()
    a, b = net.node(SecretKey.generate()), net.node(SecretKey.generate())
    a.set_allowed_peers([b.peer_id])
    b.set_allowed_peers([a.peer_id])
    return a, b


def test_a_clients_served_results_stay_within_the_last_rounds_however_long_it_runs() -> None:
    a, b = _pair()
    held = ResultBlobs()

    async def rounds() -> list[int]:
        sizes = []
        for height in range(40):
            held.round_started(a, 0, height)
            own = a.serve(f"a {height}".encode(), report_askers=True)
            held.add(a, (0, height), own)
            peer = b.serve(f"b {height}".encode())
            await a.fetch(peer, from_any_of=[b.peer_id], max_size=100)  # now served by a too
            held.add(a, (0, height), peer)
            sizes.append(len(a.served()))
        return sizes

    sizes = asyncio.run(rounds())
    assert max(sizes) == 2 * KEEP_ROUNDS == sizes[-1]
    assert held.held == 2 * KEEP_ROUNDS
    # The newest rounds are the ones still served.
    assert b"a 39" in [bytes(d) for d in a._blobs.values()]
    assert b"a 35" not in [bytes(d) for d in a._blobs.values()]


def test_a_payload_in_two_rounds_stays_until_both_are_withdrawn() -> None:
    a, _ = _pair()
    held = ResultBlobs()
    same = a.serve(b"replayed", report_askers=True)
    held.add(a, (0, 1), same)
    held.add(a, (0, 2), same)
    held.round_started(a, 0, 1 + KEEP_ROUNDS)  # round 1 falls out
    assert same in a.served()
    held.round_started(a, 0, 2 + KEEP_ROUNDS)
    assert same not in a.served() and held.held == 0


def test_a_download_that_ends_after_its_round_was_withdrawn_is_not_kept() -> None:
    a, _ = _pair()
    held = ResultBlobs()
    held.round_started(a, 0, 10)
    late = a.serve(b"late")
    held.add(a, (0, 10 - KEEP_ROUNDS), late)
    assert late not in a.served() and held.held == 0
    kept = a.serve(b"in time")
    held.add(a, (0, 11 - KEEP_ROUNDS), kept)
    assert kept in a.served()


def test_a_new_epoch_withdraws_the_last_one_although_its_heights_restart() -> None:
    a, _ = _pair()
    held = ResultBlobs()
    for height in (8, 9):
        held.add(a, (3, height), a.serve(f"{height}".encode()))
    assert held.round_started(a, 4, 0) == 2
    assert a.served() == [] and held.held == 0


def test_results_fetched_without_resharing_are_not_served() -> None:
    a, b = _pair()
    blob = b.serve(b"an audit state")
    got = asyncio.run(a.fetch(blob, from_any_of=[b.peer_id], max_size=100, reshare=False))
    assert got == b"an audit state" and a.served() == []

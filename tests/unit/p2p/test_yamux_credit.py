"""Yamux receive credit in steps, not after every read (psyche.p2p.host.yamux_credit).

py-libp2p 0.8.1 sends a WINDOW_UPDATE after nearly every read; the host replaces that with
go-yamux's rule. These tests drive the library's own YamuxStream credit methods on a stream
whose frames are recorded instead of sent: the original sends one update per small read, the
replacement one per 16 KiB consumed, and a sender limited by the credit it receives
still moves every byte.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, YamuxStream

from psyche.p2p.host import yamux_credit


class _Conn:
    def __init__(self) -> None:
        self.stream_buffers: dict[int, bytearray] = {1: bytearray()}

    def rtt(self) -> float:
        return 0.001


class _Stream:
    """The fields and helpers the credit methods use, taken from YamuxStream itself."""

    _grow_threshold = YamuxStream._grow_threshold
    _grow_to_delta = YamuxStream._grow_to_delta
    _apply_autotune_epoch = YamuxStream._apply_autotune_epoch
    _effective_rtt = YamuxStream._effective_rtt

    def __init__(self) -> None:
        self.stream_id = 1
        self.conn = _Conn()
        self.window_lock = trio.Lock()
        self.recv_window = DEFAULT_WINDOW_SIZE
        self.target_recv_window = DEFAULT_WINDOW_SIZE
        self.epoch_start = 0.0
        self._pending_recv_release = 0
        self._window_update_full_grow = 0
        self._window_update_pending_flush = 0
        self._window_update_partial_slack = 0
        self._window_update_bytes_read_only = 0
        self._window_update_hysteresis_skips = 0
        self.updates: list[int] = []

    async def send_window_update(self, increment: int, skip_lock: bool = False) -> None:
        self.updates.append(increment)


Credit = Callable[..., Awaitable[None]]


def _transfer(credit: Credit, total: int, read_size: int) -> _Stream:
    """A sender that never exceeds the credit it holds sends ``total`` bytes; the reader reads
    ``read_size`` at a time and calls ``credit`` after each read, as YamuxStream.read does."""
    s = _Stream()
    send_window = DEFAULT_WINDOW_SIZE

    async def main() -> None:
        nonlocal send_window
        sent = read = 0
        while read < total:
            n = min(send_window, total - sent)
            assert n > 0 or s.conn.stream_buffers[1], "the sender waits for credit nobody sends"
            s.conn.stream_buffers[1] += b"x" * n  # arrives: the receiver's window shrinks
            s.recv_window -= n
            send_window -= n
            sent += n
            while s.conn.stream_buffers[1]:
                take = min(read_size, len(s.conn.stream_buffers[1]))
                del s.conn.stream_buffers[1][:take]
                read += take
                before = len(s.updates)
                await credit(s, bytes_read=take)
                send_window += sum(s.updates[before:])

    trio.run(main)
    return s


@pytest.fixture
def replaced(monkeypatch: pytest.MonkeyPatch) -> Credit:
    original = YamuxStream._auto_tune_and_send_window_update
    monkeypatch.setattr(YamuxStream, "_auto_tune_and_send_window_update", original)
    assert yamux_credit.send_credit_in_steps()
    credit: Credit = YamuxStream._auto_tune_and_send_window_update
    assert credit is not original
    return credit


def test_the_library_credits_after_every_small_read() -> None:
    s = _transfer(YamuxStream._auto_tune_and_send_window_update, total=2_000, read_size=1)
    assert len(s.updates) == 2_000


def test_small_reads_send_no_update_until_a_step_is_consumed(replaced: Credit) -> None:
    s = _transfer(replaced, total=2_000, read_size=1)
    assert s.updates == []
    s = _transfer(replaced, total=DEFAULT_WINDOW_SIZE // 2, read_size=100)
    # Each update carries at least a step (the library's auto-tuning may add a larger target).
    assert 1 <= len(s.updates) <= DEFAULT_WINDOW_SIZE // 2 // yamux_credit.CREDIT_STEP
    assert min(s.updates) >= yamux_credit.CREDIT_STEP


@pytest.mark.parametrize("read_size", [1_000, 64 * 1024, 1 << 20])
def test_a_credit_limited_sender_moves_every_byte(replaced: Credit, read_size: int) -> None:
    total = 16 << 20
    s = _transfer(replaced, total=total, read_size=read_size)
    # At most one update per step, never one per small read.
    assert 0 < len(s.updates) <= total // yamux_credit.CREDIT_STEP
    assert sum(s.updates) >= total - DEFAULT_WINDOW_SIZE


def test_another_release_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    original = YamuxStream._auto_tune_and_send_window_update
    monkeypatch.setattr(yamux_credit.importlib.metadata, "version", lambda _name: "0.9.0")
    assert not yamux_credit.send_credit_in_steps()
    assert YamuxStream._auto_tune_and_send_window_update is original

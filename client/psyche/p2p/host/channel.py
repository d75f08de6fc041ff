"""The trio end of the control socket to the parent (:mod:`psyche.p2p.control`)."""

from __future__ import annotations

import trio

from psyche.p2p.control import FrameDecoder, HostMessage, encode_frame

__all__ = ["ControlChannel"]


class ControlChannel:
    """The trio end of the control socket: whole frames in, serialized frames out."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._decoder = FrameDecoder()
        self._pending: list[bytes] = []
        self._lock = trio.Lock()

    async def receive(self) -> bytes | None:
        while not self._pending:
            data = await self._stream.receive_some(1 << 16)
            if not data:
                return None
            self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)

    async def send(self, msg: HostMessage) -> None:
        frame = encode_frame(msg)
        async with self._lock:
            await self._stream.send_all(frame)

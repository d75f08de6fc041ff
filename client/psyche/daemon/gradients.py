"""``--write-gradients-dir``: every payload this client holds as verified, written to disk.

For debugging and for offline analysis of what a run exchanged: this client's own result when
it is published and each peer's once its download matched the sender's commitment (a payload
that failed verification is counted as a rejection and never written). One file per result,
``step{S:06d}-batch{start}-{end}-{trainer}.payload``, holding the exact wire bytes
(:func:`psyche.distro.decode_payload` reads them back); ``trainer`` is the first 8 bytes (hex) of
the trainer's P2P identity. A write error is logged, never raised: it must not cost the round.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from psyche.protocol.data_selection import BatchId

if TYPE_CHECKING:
    from psyche.daemon.parts import ClientParts

__all__ = ["gradient_file_name", "write_gradient"]

log = logging.getLogger("psyche.daemon")


def gradient_file_name(step: int, batch: BatchId, trainer: bytes) -> str:
    return f"step{step:06d}-batch{batch.start}-{batch.end}-{trainer[:8].hex()}.payload"


def write_gradient(
    parts: ClientParts, step: int, batch: BatchId, trainer: bytes, payload: bytes
) -> None:
    directory = parts.options.gradients_dir
    if directory is None:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / gradient_file_name(step, batch, trainer)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(payload)
        tmp.replace(path)  # a reader never sees half a payload
    except OSError as e:
        log.warning("could not write the payload of step %d to %s: %s", step, directory, e)

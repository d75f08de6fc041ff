"""Assembles a client process: identity, coordinator backend, P2P node, model loader, daemon.

Kept apart from :mod:`psyche.daemon.client` so the daemon's logic never builds its own parts
(tests hand it fakes or real parts directly) and so exit codes live in one place.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from psyche.backends.base import BackendError, JoinRejectedError
from psyche.backends.centralized.client import CentralizedBackend
from psyche.coordinator import Coordinator
from psyche.daemon.client import CHECKPOINT_META, ClientDaemon, Trained
from psyche.data.factory import provider_for_location
from psyche.distro import Distro
from psyche.events import EventLog
from psyche.p2p.node import P2PNode
from psyche.protocol.config import (
    Checkpoint,
    DistroOptimizer,
    HubCheckpoint,
    HubRepo,
    P2PCheckpoint,
    P2PGcsCheckpoint,
)
from psyche.protocol.identity import SecretKey, secret_key_from_env_or_file
from psyche.training.device import default_dtype, pick_device
from psyche.training.errors import ModelLoadError
from psyche.training.loading import load_model
from psyche.training.trainer import Trainer, distro_config

log = logging.getLogger("psyche.client")

EXIT_OK, EXIT_ERROR, EXIT_JOIN_REJECTED = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    run_id: str
    server_addr: str
    key_path: str | None = None
    raw_key: str | None = None
    p2p_host: str = "127.0.0.1"
    p2p_port: int = 0
    micro_batch_size: int = 2
    checkpoint_dir: str | None = None
    device: str = "auto"
    event_log: str | None = None


def make_loader(key: SecretKey, options: ClientOptions) -> Callable[[Coordinator], Trained]:
    device = pick_device(options.device)

    def load(coord: Coordinator) -> Trained:
        llm = coord.llm
        source: Checkpoint = llm.checkpoint
        if isinstance(source, P2PCheckpoint) and _fresh_local_copy(source.repo, coord):
            # The last checkpoint an elected checkpointer stored is a directory on this machine
            # (local runs): the weights there are the ones the epoch ended with.
            log.info("loading the run's last stored checkpoint %s", source.repo.repo_id)
            source = HubCheckpoint(source.repo)
        elif isinstance(source, P2PCheckpoint | P2PGcsCheckpoint):
            raise ModelLoadError(
                "this run's model is only available from peers (P2P checkpoint), which this "
                "client cannot load yet; join at the start of a run"
            )
        if not isinstance(llm.optimizer, DistroOptimizer):
            raise ModelLoadError("multi-client runs need the Distro optimizer")
        model, _ = load_model(
            source,
            device=device,
            dtype=default_dtype(device),
            architecture=llm.architecture,
        )
        distro = Distro(model.named_parameters(), distro_config(llm.optimizer))
        trainer = Trainer(model, distro, micro_batch_size=options.micro_batch_size, device=device)
        data = provider_for_location(llm.data_location, llm.max_seq_len, secret_key=key)
        log.info("model loaded on %s; training data from %s", device, type(llm.data_location).TAG)
        return Trained(trainer=trainer, spec=distro.payload_spec, data=data)

    return load


def _fresh_local_copy(repo: HubRepo, coord: Coordinator) -> bool:
    """A directory here that a checkpointer of this run wrote at the current step, so it holds
    the weights the last epoch ended with (an older copy would silently desynchronise us)."""
    path = Path(repo.repo_id)
    if repo.revision is not None or not (path / "config.json").is_file():
        return False
    try:
        meta = json.loads((path / CHECKPOINT_META).read_text())
    except (OSError, ValueError):
        return False
    return bool(meta.get("run_id") == coord.run_id and meta.get("step") == coord.progress.step)


async def run_client(options: ClientOptions) -> int:
    key = secret_key_from_env_or_file(options.key_path, options.raw_key)
    me = key.node_identity()
    log.info("client %s joining run %r at %s", me.hex(), options.run_id, options.server_addr)
    backend = CentralizedBackend(options.server_addr, key, options.run_id)
    p2p = P2PNode()
    try:
        await backend.connect()
        await p2p.start(
            key, run_id=options.run_id, listen_port=options.p2p_port, listen_host=options.p2p_host
        )
        daemon = ClientDaemon(
            key=key,
            backend=backend,
            directory=backend,
            p2p=p2p,
            load=make_loader(key, options),
            events=EventLog(options.event_log, me.hex()),
            checkpoint_dir=options.checkpoint_dir,
        )
        await daemon.run()
        log.info("run %r finished", options.run_id)
        return EXIT_OK
    except JoinRejectedError as e:
        log.error("%s", e)
        return EXIT_JOIN_REJECTED
    except BackendError as e:
        log.error("coordinator connection failed: %s", e)
        return EXIT_ERROR
    finally:
        await p2p.stop()
        await backend.close()

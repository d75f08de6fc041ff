"""Assembles a client process: identity, coordinator backend, P2P node, model loader, daemon.

Kept apart from :mod:`psyche.daemon.client` so the daemon's logic never builds its own parts
(tests hand it fakes or real parts directly) and so exit codes live in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from psyche.backends.base import Backend, BackendError, JoinRejectedError
from psyche.backends.centralized.client import CentralizedBackend
from psyche.checkpoint.manifest import SHARED_FILES
from psyche.checkpoint.p2p import ReceivedModel
from psyche.coordinator import Coordinator
from psyche.daemon.checkpointing import CheckpointOptions
from psyche.daemon.client import ClientDaemon, PeerDirectory, Trained
from psyche.daemon.sharing import SharingOptions
from psyche.data.factory import provider_for_location
from psyche.distro import Distro
from psyche.events import EventLog
from psyche.p2p.node import P2PNode
from psyche.protocol.config import DistroOptimizer, P2PCheckpoint, P2PGcsCheckpoint
from psyche.protocol.identity import SecretKey, secret_key_from_env_or_file
from psyche.training.device import default_dtype, pick_device
from psyche.training.errors import ModelLoadError
from psyche.training.hashing import model_hash
from psyche.training.loading import load_model, model_from_state_dict, resolve_checkpoint_dir
from psyche.training.trainer import Trainer, distro_config

log = logging.getLogger("psyche.client")

EXIT_OK, EXIT_ERROR, EXIT_JOIN_REJECTED = 0, 1, 2


class ClientBackend(Backend, PeerDirectory, Protocol):
    """A backend that also relays peers, as ``run_client`` needs (centralized or Solana)."""

    async def connect(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    run_id: str
    server_addr: str
    key_path: str | None = None
    raw_key: str | None = None
    p2p_host: str = "127.0.0.1"
    p2p_port: int = 0
    micro_batch_size: int = 2
    device: str = "auto"
    event_log: str | None = None
    checkpoint: CheckpointOptions = field(default_factory=CheckpointOptions)
    sharing: SharingOptions = field(default_factory=SharingOptions)


def make_loader(
    key: SecretKey, options: ClientOptions
) -> Callable[[Coordinator, ReceivedModel | None], Trained]:
    device = pick_device(options.device)

    def load(coord: Coordinator, received: ReceivedModel | None) -> Trained:
        llm = coord.llm
        if not isinstance(llm.optimizer, DistroOptimizer):
            raise ModelLoadError("multi-client runs need the Distro optimizer")
        if received is not None:
            # Built in the tensors' own dtype: the joiner must hold the servers' exact bits.
            config = received.manifest.config_json
            model = model_from_state_dict(config, received.tensors, device=device)
            if model_hash(model) != received.manifest.model_hash:
                raise ModelLoadError("the model fetched from peers does not match its manifest")
            files = {**received.files, "config.json": config.encode()}
            source = "p2p"
        elif isinstance(llm.checkpoint, P2PCheckpoint | P2PGcsCheckpoint):
            raise ModelLoadError("this run's model is only available from peers (P2P checkpoint)")
        else:
            path = resolve_checkpoint_dir(llm.checkpoint)
            model, _ = load_model(
                path, device=device, dtype=default_dtype(device), architecture=llm.architecture
            )
            files = {
                name: (path / name).read_bytes()
                for name in ("config.json", *SHARED_FILES)
                if (path / name).is_file()
            }
            source = str(llm.checkpoint.TAG)
        distro = Distro(model.named_parameters(), distro_config(llm.optimizer))
        trainer = Trainer(model, distro, micro_batch_size=options.micro_batch_size, device=device)
        data = provider_for_location(llm.data_location, llm.max_seq_len, secret_key=key)
        log.info("model loaded on %s; training data from %s", device, type(llm.data_location).TAG)
        return Trained(
            trainer=trainer, spec=distro.payload_spec, data=data, files=files, source=source
        )

    return load


async def run_client(
    options: ClientOptions,
    *,
    key: SecretKey | None = None,
    make_backend: Callable[[SecretKey], ClientBackend] | None = None,
) -> int:
    """``key`` and ``make_backend`` default to the key file and the centralized backend."""
    key = key or secret_key_from_env_or_file(options.key_path, options.raw_key)
    me = key.node_identity()
    log.info("client %s joining run %r at %s", me.hex(), options.run_id, options.server_addr)
    backend: ClientBackend = (
        make_backend(key)
        if make_backend is not None
        else CentralizedBackend(options.server_addr, key, options.run_id)
    )
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
            checkpoint=options.checkpoint,
            sharing=options.sharing,
        )
        await daemon.run()
        log.info("run %r finished", options.run_id)
        return EXIT_OK
    except JoinRejectedError as e:
        log.error("%s", e)
        return EXIT_JOIN_REJECTED
    except BackendError as e:
        log.error("coordinator connection failed: %s", e)
        return int(getattr(e, "exit_code", EXIT_ERROR))
    finally:
        await p2p.stop()
        await backend.close()

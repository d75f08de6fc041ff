"""The round engine on the real network, in one event loop: a real centralized server (TCP,
handshake, ticks on the wall clock), three engines with the real centralized backend and real
libp2p nodes (each a host child process), real models trained with DisTrO. No simulated part:
what the simulated run of ``test_round_engine.py`` stands in for is exercised here once, end to
end, with every client's weights identical after every apply.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from psyche.backends.centralized.backend import CentralizedBackend
from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import CentralizedServer, ServerOptions
from psyche.coordinator import Coordinator, RunState
from psyche.daemon.engine import RoundEngine
from psyche.daemon.loader import model_loader
from psyche.daemon.parts import client_parts
from psyche.events import ApplyEvent, EventLog, TrainEvent, read_events
from psyche.p2p.node import P2PNode
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import Checkpoint, HubCheckpoint, HubRepo, LocalData
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_run_config
from psyche.training.loading import resolve_checkpoint_dir

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
MODEL_REPO = "engine-test/model"

pytestmark = pytest.mark.slow


def test_three_engines_on_a_real_server_and_real_p2p_agree_after_every_apply(
    tiny_corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    model_dir, data_dir = tiny_corpus
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    llm = dataclasses.replace(
        rc.model,
        checkpoint=HubCheckpoint(HubRepo(repo_id=MODEL_REPO)),
        data_location=LocalData(path=str(data_dir)),
    )
    config = dataclasses.replace(rc.config, total_steps=6, cooldown_time=2)
    coord = Coordinator(
        run_id="engine", config=config, model=llm, run_state=RunState.WaitingForMembers
    )

    def resolve(ck: Checkpoint) -> Path:
        if isinstance(ck, HubCheckpoint) and ck.repo.repo_id == MODEL_REPO:
            return model_dir
        return resolve_checkpoint_dir(ck)

    async def main() -> None:
        server = CentralizedServer(RunHost(coord), ServerOptions(host="127.0.0.1", port=0))
        await server.start()
        ticking = asyncio.create_task(server.serve_forever())
        nodes: list[P2PNode] = []
        backends: list[CentralizedBackend] = []
        try:
            engines = []
            for i in range(3):
                key = SecretKey.from_bytes(bytes([i + 1]) * 32)
                backend = CentralizedBackend(f"127.0.0.1:{server.port}", key, "engine")
                backends.append(backend)
                await backend.connect()
                node = P2PNode()
                nodes.append(node)
                await node.start(key, run_id="engine", listen_host="127.0.0.1")
                parts = client_parts(
                    key=key,
                    backend=backend,
                    transport=node,
                    load=model_loader(key, device="cpu", resolve=resolve),
                    events=EventLog(tmp_path / f"client-{i}.jsonl", key.node_identity().hex()),
                )
                engines.append(RoundEngine(parts, backend))
            await asyncio.wait_for(asyncio.gather(*(e.run() for e in engines)), 150)
        finally:
            ticking.cancel()
            for node in nodes:
                await node.stop()
            for backend in backends:
                await backend.close()
            await server.close()

    asyncio.run(main())
    hashes: dict[int, set[str]] = {}
    trained: set[int] = set()
    for i in range(3):
        for e in read_events(tmp_path / f"client-{i}.jsonl"):
            if isinstance(e, ApplyEvent):
                hashes.setdefault(e.step, set()).add(e.model_hash)
            elif isinstance(e, TrainEvent):
                trained.add(e.step)
    assert trained == set(range(1, 6)), trained
    assert len(hashes) == 7  # five trained rounds and two drain rounds, each applied by all
    assert all(len(h) == 1 for h in hashes.values()), hashes

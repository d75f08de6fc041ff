"""A whole run in one process: the real coordinator, N clients with real models, DisTrO payloads.

This is the default job until client processes talk over libp2p (the end-to-end milestone). It
exercises every protocol piece that does not need a network: the coordinator state machine on a
simulated clock, committee/witness election, deterministic data assignment, training with DisTrO,
the versioned payload format and its commitment hash (each payload is decoded and verified by
every client, as a download would be), bloom-filter witnesses, opportunistic round ends,
consensus selection at apply time, checkpointer election in Cooldown, and the central property:
after every apply all clients hold bit-identical weights (checked by hashing every parameter).

Time is simulated (the coordinator only ever sees the integer seconds we give it), so a run is
reproducible; the wall-clock time of each client's training is measured and reported.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from psyche.coordinator import Coordinator, RunState, Witness
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundState,
    bloom_seed_for,
    build_witness,
    results_to_apply,
    round_lrs,
    round_state_for,
    verify_result,
)
from psyche.data.local import LocalDataProvider
from psyche.distro import Distro, Payload, decode_payload
from psyche.distro.payload import payload_hash
from psyche.protocol.bloom import Bloom
from psyche.protocol.commitment import sha256
from psyche.protocol.committee import WitnessProof
from psyche.protocol.config import LLM, DistroOptimizer, HubCheckpoint, HubRepo
from psyche.protocol.identity import NodeIdentity, SecretKey
from psyche.protocol.runconfig import RunConfig
from psyche.training.hashing import model_hash
from psyche.training.loading import load_model
from psyche.training.trainer import Trainer, distro_config


@dataclass
class SimClient:
    identity: NodeIdentity
    trainer: Trainer
    distro: Distro
    model: torch.nn.Module
    data: LocalDataProvider
    prev_self: Payload | None = None
    losses: list[float] = field(default_factory=list)


@dataclass
class RoundReport:
    epoch: int
    step: int
    height: int
    trained: bool
    end_reason: str
    witnesses: int
    applied_batches: int
    loss: float | None
    payload_bytes: int
    compute_s: float
    model_hash: str
    hashes_agree: bool


@dataclass
class RunSummary:
    rounds: list[RoundReport] = field(default_factory=list)
    epochs_completed: int = 0
    checkpoints: list[str] = field(default_factory=list)
    final_state: str = ""

    def to_json(self) -> dict[str, Any]:
        losses = [r.loss for r in self.rounds if r.loss is not None]
        return {
            "rounds": [vars(r) for r in self.rounds],
            "epochs_completed": self.epochs_completed,
            "checkpoints": self.checkpoints,
            "final_state": self.final_state,
            "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None,
        }


class InProcessRun:
    """N honest clients and the coordinator of ``run``, stepped on a simulated clock."""

    def __init__(
        self,
        run: RunConfig,
        model_dir: Path,
        data_dir: Path,
        out_dir: Path,
        *,
        n_clients: int,
        micro_batch_size: int = 2,
        device: str = "cpu",
    ) -> None:
        assert isinstance(run.model, LLM) and isinstance(run.model.optimizer, DistroOptimizer)
        self.llm = run.model
        self.out_dir = out_dir
        self.model_dir = model_dir
        llm = dataclasses.replace(
            run.model, checkpoint=HubCheckpoint(HubRepo(repo_id=str(model_dir)))
        )
        self.coord = Coordinator(
            run_id=run.run_id or "demo",
            config=run.config,
            model=llm,
            run_state=RunState.WaitingForMembers,
        )
        self.now = 1_700_000_000
        self.coord.run_state_start_unix_timestamp = self.now
        dcfg = distro_config(run.model.optimizer)
        self.clients: list[SimClient] = []
        for i in range(n_clients):
            key = SecretKey.from_bytes(sha256(b"psyche-demo-client-%d" % i))
            model, _ = load_model(str(model_dir), device=torch.device(device), dtype=torch.float32)
            distro = Distro(model.named_parameters(), dcfg)
            trainer = Trainer(
                model, distro, micro_batch_size=micro_batch_size, device=torch.device(device)
            )
            data = LocalDataProvider(data_dir, self.llm.max_seq_len)
            self.clients.append(SimClient(key.node_identity(), trainer, distro, model, data))
        self.spec = self.clients[0].distro.payload_spec
        self.rounds: dict[int, RoundState] = {}
        """This epoch's rounds by height; every simulated client downloads every result, so one
        shared view stands for all of them."""
        self.summary = RunSummary()
        self._seed = 0

    # --- plumbing -------------------------------------------------------------------------------

    def _next_seed(self) -> int:
        self._seed += 1
        return int.from_bytes(sha256(b"demo-seed-%d" % self._seed)[:8], "little")

    def _client(self, who: NodeIdentity) -> SimClient:
        return next(c for c in self.clients if c.identity == who)

    def _tick(self) -> None:
        pending = [c.identity for c in self.clients]
        self.coord.tick(pending, self.now, self._next_seed())

    # --- one phase at a time --------------------------------------------------------------------

    def run(
        self, on_round: Callable[[RoundReport], None] | None = None, max_epochs: int = 10
    ) -> RunSummary:
        c = self.coord
        while c.run_state not in (RunState.Finished, RunState.Paused):
            if self.summary.epochs_completed >= max_epochs:
                break
            state = c.run_state
            if state is RunState.WaitingForMembers:
                self.now += c.config.waiting_for_members_extra_time
                self._tick()
                self.rounds.clear()
                for cl in self.clients:
                    cl.prev_self = None
            elif state is RunState.Warmup:
                self._warmup()
            elif state is RunState.RoundTrain:
                report = self._round()
                self.summary.rounds.append(report)
                if on_round is not None:
                    on_round(report)
            elif state is RunState.RoundWitness:
                self.now += c.config.round_witness_time
                self._tick()
            elif state is RunState.Cooldown:
                self._cooldown()
        self.summary.final_state = c.run_state.name
        return self.summary

    def _warmup(self) -> None:
        c = self.coord
        for cl in self.clients:
            i = c.index_of(cl.identity)
            if i is None or c.run_state is not RunState.Warmup:
                continue
            proof = WitnessProof(position=i, index=i, witness=False)
            c.warmup_witness(
                cl.identity,
                Witness(proof, Bloom.empty(), Bloom.empty()),
                self.now,
                self._next_seed(),
            )
        if c.run_state is RunState.Warmup:
            self.now += c.config.warmup_time
            self._tick()

    def _apply(self, step: int, height: int) -> int:
        """Apply round ``height − 2`` by witness consensus; returns the number of batches used."""
        applied = self.rounds.get(height - 2)
        prev = self.coord.previous_round()
        if height < 2 or applied is None or prev is None:
            return 0
        chosen = [r.payload for r in results_to_apply(applied, prev.witnesses, self.coord)]
        lr = round_lrs(self.coord, step, height).lr
        for cl in self.clients:
            # Every client decodes the bytes itself, as it would after a download.
            payloads = [decode_payload(b, self.spec) for b in chosen if b is not None]
            if payloads:
                cl.trainer.apply_step(payloads, lr=lr)
        return len(chosen)

    def _train(self, state: RoundState) -> tuple[float | None, int, float]:
        losses: list[float] = []
        sizes: list[int] = []
        compute = 0.0
        step = state.step
        lrs = round_lrs(self.coord, step, state.height)
        for batch, who in state.assignment.items():
            cl = self._client(who)
            tokens = cl.data.get_samples(batch)
            t0 = time.perf_counter()
            out = cl.trainer.train_step(
                tokens,
                step=step,
                lr=lrs.lr,
                prev_lr=lrs.prev_lr,
                prev_self_results=cl.prev_self,
                zero_optim=lrs.zero_optim,
                batch_id=(batch.start, batch.end),
            )
            compute = max(compute, time.perf_counter() - t0)
            cl.prev_self = out.self_result
            sizes.append(len(out.payload))
            digest = payload_hash(step, batch.start, batch.end, out.payload)
            result = ReceivedResult(who, batch, digest, out.payload)
            if verify_result(result, step, self.spec):
                state.results[batch] = result
            losses.append(out.loss)
            cl.losses.append(out.loss)
        trained = set(state.assignment.values())
        for cl in self.clients:
            if cl.identity not in trained:
                cl.prev_self = None
                if state.trains:
                    cl.trainer.sit_out(lr=lrs.lr)
        loss = sum(losses) / len(losses) if losses else None
        return loss, max(sizes, default=0), compute

    def _witness(self, height: int) -> int:
        """Elected witnesses attest the previous round's verified payloads."""
        c = self.coord
        rnd = c.current_round()
        sel = c.committee_selection(rnd)
        sent = 0
        for i, x in enumerate(list(c.epoch_state.clients)):
            proof = sel.get_witness(i)
            if not proof.witness or c.run_state is not RunState.RoundTrain:
                continue
            witness = build_witness(proof, self.rounds.get(height - 1), bloom_seed_for(x.id, rnd))
            c.witness(x.id, witness, self.now)
            sent += 1
        return sent

    def _round(self) -> RoundReport:
        c = self.coord
        step, height = c.progress.step, c.current_round().height
        applied = self._apply(step, height)
        hashes = {model_hash(cl.model) for cl in self.clients}
        state = round_state_for(c)
        self.rounds[height] = state
        trained = state.trains
        loss, size, compute = self._train(state) if trained else (None, 0, 0.0)
        self.now += max(1, round(compute))
        witnesses = self._witness(height)
        end_reason = "opportunistic"
        if c.run_state is RunState.RoundTrain:
            end_reason = "timeout"
            self.now += c.config.max_round_train_time
            self._tick()
        return RoundReport(
            epoch=c.progress.epoch,
            step=step,
            height=height,
            trained=trained,
            end_reason=end_reason,
            witnesses=witnesses,
            applied_batches=applied,
            loss=loss,
            payload_bytes=size,
            compute_s=round(compute, 4),
            model_hash=sorted(hashes)[0],
            hashes_agree=len(hashes) == 1,
        )

    def _cooldown(self) -> None:
        c = self.coord
        elected = c.checkpointer_indices()
        if elected:
            i = elected[0]
            who = c.epoch_state.clients[i].id
            cl = self._client(who)
            path = self.out_dir / "checkpoints" / f"{c.run_id}-step{c.progress.step - 1}"
            cl.model.save_pretrained(path, safe_serialization=True)  # type: ignore[operator]
            for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                src = self.model_dir / name
                if src.exists():
                    (path / name).write_bytes(src.read_bytes())
            result = c.checkpoint(who, i, HubCheckpoint(HubRepo(repo_id=str(path))), self.now + 1)
            self.summary.checkpoints.append(str(path))
            self.now += 1
        else:
            self.now += c.config.cooldown_time
            result = c.tick(None, self.now, self._next_seed())
        if result.epoch_end:
            self.summary.epochs_completed += 1

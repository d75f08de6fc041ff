"""Scripted honest clients: a deterministic driver that plays N honest clients against a
:class:`Coordinator`, for the shared vectors, the table-driven and property tests and the
simulated-run demo (not a client: no model, no network, no clock).

It sends what real clients would (warmup witnesses once loaded, round witnesses from the elected
witnesses with blooms of the previous round's trainers and payload hashes, health checks for
clients that stopped delivering) and records every call as a JSON event with the state after it.
Time advances only through ``advance``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from psyche.coordinator.consensus import participant_item
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.state_json import identity_obj, to_obj_state, witness_obj
from psyche.coordinator.types import CoordinatorException, RunState, TickResult, Witness
from psyche.protocol.bloom import Bloom
from psyche.protocol.commitment import sha256, sha256v
from psyche.protocol.committee import CommitteeProof, WitnessProof
from psyche.protocol.data_selection import assign_data_for_state
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.protocol.strict_obj import to_obj


def sim_identity(i: int) -> NodeIdentity:
    """A stable fake identity (not an ed25519 key; the coordinator only compares bytes)."""
    return NodeIdentity.from_single_key(sha256(b"psyche-sim-client-%d" % i))


def sim_result_hash(step: int, start: int, end: int) -> bytes:
    return sha256v(
        b"psyche-sim-result",
        step.to_bytes(4, "big"),
        start.to_bytes(8, "big"),
        end.to_bytes(8, "big"),
    )


def _result_obj(r: TickResult | int | None) -> str:
    if isinstance(r, TickResult):
        return "Ticked" if r.ticked else f"EpochEnd({str(r.epoch_end).lower()})"
    if isinstance(r, int):
        return f"Dropped({r})"
    return "Ok"


@dataclass
class Sim:
    coord: Coordinator
    now: int = 1_000_000
    seed_counter: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    silent: set[NodeIdentity] = field(default_factory=set)
    """Clients that stopped delivering results (witnesses leave them out of their blooms)."""

    # --- recording ------------------------------------------------------------------------------

    def _run(self, event: dict[str, Any], call: Callable[[], Any]) -> Any:
        try:
            result = call()
            outcome: dict[str, Any] = {"ok": _result_obj(result)}
        except CoordinatorException as e:
            result = e
            outcome = {"error": e.code.name}
        self.events.append({"event": event, **outcome, "state": to_obj_state(self.coord)})
        return result

    def next_seed(self) -> int:
        self.seed_counter += 1
        return int.from_bytes(sha256(b"seed%d" % self.seed_counter)[:8], "little")

    def advance(self, seconds: int) -> None:
        self.now += seconds

    # --- raw calls ------------------------------------------------------------------------------

    def tick(self, pending: Sequence[NodeIdentity] | None = None) -> Any:
        seed = self.next_seed()
        ev = {
            "op": "tick",
            "now": self.now,
            "seed": seed,
            "pending": None if pending is None else [identity_obj(p) for p in pending],
        }
        return self._run(ev, lambda: self.coord.tick(pending, self.now, seed))

    def warmup_witness(self, sender: NodeIdentity, witness: Witness) -> Any:
        seed = self.next_seed()
        ev = {"op": "warmup_witness", "now": self.now, "seed": seed,
              "from": identity_obj(sender), "witness": witness_obj(witness)}  # fmt: skip
        return self._run(ev, lambda: self.coord.warmup_witness(sender, witness, self.now, seed))

    def witness(self, sender: NodeIdentity, witness: Witness) -> Any:
        ev = {"op": "witness", "now": self.now, "from": identity_obj(sender),
              "witness": witness_obj(witness)}  # fmt: skip
        return self._run(ev, lambda: self.coord.witness(sender, witness, self.now))

    def health_check(
        self, sender: NodeIdentity, checks: list[tuple[NodeIdentity, CommitteeProof]]
    ) -> Any:
        ev = {
            "op": "health_check",
            "from": identity_obj(sender),
            "checks": [
                {
                    "id": identity_obj(i),
                    "proof": {
                        "committee": p.committee.name,
                        "position": p.position,
                        "index": p.index,
                    },
                }
                for i, p in checks
            ],
        }
        return self._run(ev, lambda: self.coord.health_check(sender, checks))

    def checkpoint(self, sender: NodeIdentity, index: int, ck: Checkpoint) -> Any:
        ev = {"op": "checkpoint", "now": self.now, "from": identity_obj(sender),
              "index": index, "checkpoint": to_obj(ck)}  # fmt: skip
        return self._run(ev, lambda: self.coord.checkpoint(sender, index, ck, self.now))

    def withdraw(self, index: int) -> Any:
        return self._run({"op": "withdraw", "index": index}, lambda: self.coord.withdraw(index))

    def pause(self) -> Any:
        return self._run({"op": "pause", "now": self.now}, lambda: self.coord.pause(self.now))

    def resume(self) -> Any:
        return self._run({"op": "resume", "now": self.now}, lambda: self.coord.resume(self.now))

    # --- honest behaviour -----------------------------------------------------------------------

    def healthy_clients(self) -> list[tuple[int, NodeIdentity]]:
        return [
            (i, c.id)
            for i, c in enumerate(self.coord.epoch_state.clients)
            if c.state.name == "Healthy"
        ]

    def send_warmup_witnesses(self, count: int | None = None) -> None:
        for i, who in self.healthy_clients()[:count]:
            if self.coord.run_state is not RunState.Warmup:
                break
            proof = WitnessProof(position=i, index=i, witness=False)
            self.warmup_witness(who, Witness(proof, Bloom.empty(), Bloom.empty()))

    def round_witness(self, index: int) -> Witness:
        """The witness an honest client at ``index`` sends this round."""
        c = self.coord
        rnd = c.current_round()
        sel = c.committee_selection(rnd)
        proof = sel.get_witness(index)
        seed = int.from_bytes(sha256v(b"bloom", rnd.random_seed.to_bytes(8, "little"),
                                      index.to_bytes(4, "little"))[:8], "little")  # fmt: skip
        participants, broadcasts = Bloom.empty(seed), Bloom.empty(seed ^ 1)
        prev = c.previous_round()
        if prev is not None and not c.epoch_state.first_round:
            prev_clients = c.previous_round_clients()
            psel = c.committee_selection(prev)
            assignment = assign_data_for_state(
                prev_clients,
                psel,
                prev.data_index,
                c.batch_size_for_round(prev),
                prev.random_seed,
                prev.retries,
            )
            step = c.progress.step - 1
            for batch, trainer in assignment.items():
                if trainer in self.silent:
                    continue
                participants.add(participant_item(trainer))
                broadcasts.add(sim_result_hash(step, batch.start, batch.end))
        return Witness(proof, participants, broadcasts)

    def send_round_witnesses(self, count: int | None = None) -> int:
        sent = 0
        sel = self.coord.committee_selection(self.coord.current_round())
        for i, who in self.healthy_clients():
            if count is not None and sent >= count:
                break
            if who in self.silent or not sel.get_witness(i).witness:
                continue
            self.witness(who, self.round_witness(i))
            sent += 1
        return sent

    def unhealthy_report(self) -> list[tuple[NodeIdentity, CommitteeProof]]:
        """Health-check entries an honest witness would send for silent clients."""
        c = self.coord
        prev = c.previous_round()
        if prev is None:
            return []
        sel = c.committee_selection(prev)
        out = []
        for i, who in enumerate(c.previous_round_clients()):
            if who in self.silent and c.trainer_ejectable(who):
                idx = c.index_of(who)
                if idx is not None and c.epoch_state.clients[idx].state.name == "Healthy":
                    out.append((who, sel.get_committee(i)))
        return out

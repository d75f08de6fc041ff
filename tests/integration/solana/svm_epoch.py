"""One whole epoch of a Solana run on the local SVM, driven with the client's own instruction
builders and no training: the clients join, the chain's clock is moved ahead
(``advance_time``) instead of waiting, the elected witnesses send their (empty) witnesses each
round, and the last tick of Cooldown ends the epoch successfully (``EpochEnd(true)``), which is
when the coordinator credits points (docs/protocol.md, "Rewards").

What to send and who is elected is read from the chain after every step: the account is decoded
into the Python ``Coordinator`` (``Session.run``), whose committee selection is the program's.
"""

from __future__ import annotations

from collections.abc import Sequence

from solders.keypair import Keypair

from psyche.coordinator import RunState, Witness, WitnessMetadata
from psyche.coordinator.types import ClientState
from psyche.localsvm import LocalSvmThread
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof
from psyche.protocol.identity import NodeIdentity
from psyche.solana.session import Endpoints, Session

MAX_ROUNDS = 20


def session(node: LocalSvmThread, wallet: Keypair) -> Session:
    return Session(Endpoints(node.url, node.ws_url), wallet)


async def state(node: LocalSvmThread, run_id: str) -> RunState:
    s = session(node, Keypair())
    try:
        _, snap = await s.run(run_id)
        return snap.coordinator.run_state
    finally:
        await s.close()


async def _send(
    node: LocalSvmThread, wallet: Keypair, run_id: str, what: str, *args: object
) -> None:
    s = session(node, wallet)
    try:
        ixs, _ = await s.run(run_id)
        build = getattr(ixs, what)
        ix = build(wallet.pubkey(), *args)
        await s.sender(s.coordinator).send([ix], label=what)
    finally:
        await s.close()


async def join(node: LocalSvmThread, run_id: str, clients: Sequence[Keypair]) -> None:
    """Every client joins through the run's permissionless authorization (which the run's join
    authority must have created)."""
    for kp in clients:
        s = session(node, kp)
        try:
            inst = await s.instance(run_id)
            from solders.pubkey import Pubkey

            authority = Pubkey.from_bytes(bytes(inst["join_authority"]))
            auth = s.join_authorization(authority, None)
            ixs, _ = await s.run(run_id)
            me = bytes(kp.pubkey())
            ix = ixs.join_run(kp.pubkey(), NodeIdentity(me, me), auth)
            await s.sender(s.coordinator).send([ix], label="join_run")
        finally:
            await s.close()


async def tick(node: LocalSvmThread, run_id: str, ticker: Keypair) -> None:
    await _send(node, ticker, run_id, "tick")


async def run_epoch(node: LocalSvmThread, run_id: str, clients: Sequence[Keypair]) -> None:
    """From WaitingForMembers (or the Warmup it starts) with ``clients`` joined to the end of a
    successful Cooldown. The config must let ``len(clients)`` clients start
    (``init_min_clients``), and its epoch is cut short by moving the clock past ``epoch_time``."""
    by_signer = {bytes(kp.pubkey()): kp for kp in clients}
    ticker = clients[0]
    s = session(node, Keypair())
    try:
        _, snap = await s.run(run_id)
        cfg = snap.coordinator.config
        if snap.coordinator.run_state is RunState.WaitingForMembers:
            # (The last join_run may have started the epoch itself, if enough time passed.)
            node.advance_time(cfg.waiting_for_members_extra_time + 1)
            await tick(node, run_id, ticker)
            _, snap = await s.run(run_id)
        assert snap.coordinator.run_state is RunState.Warmup, snap.coordinator.run_state
        # Warmup: every client has the model (warmup witnesses until training starts).
        for i, c in enumerate(snap.coordinator.epoch_state.clients):
            _, snap = await s.run(run_id)
            if snap.coordinator.run_state is not RunState.Warmup:
                break
            proof = WitnessProof(position=i, index=i, witness=False)
            w = Witness(proof, Bloom.empty(), Bloom.empty())
            await _send(node, by_signer[c.id.signer], run_id, "warmup_witness", w)
        _, snap = await s.run(run_id)
        assert snap.coordinator.run_state is RunState.RoundTrain, snap.coordinator.run_state
        # Wind the epoch down at once: two more rounds, then Cooldown.
        node.advance_time(cfg.epoch_time + 1)
        for _ in range(MAX_ROUNDS):
            _, snap = await s.run(run_id)
            coord = snap.coordinator
            if coord.run_state is RunState.Cooldown:
                break
            assert coord.run_state is RunState.RoundTrain, coord.run_state
            rnd = coord.current_round()
            sel = coord.committee_selection(rnd)
            for i, c in enumerate(coord.epoch_state.clients):
                proof = sel.get_witness(i)
                if c.state is not ClientState.Healthy or not proof.witness:
                    continue
                w = Witness(proof, Bloom.empty(rnd.random_seed), Bloom.empty(rnd.random_seed ^ 1))
                meta = WitnessMetadata(step=coord.progress.step)
                await _send(node, by_signer[c.id.signer], run_id, "witness", w, meta)
            node.advance_time(cfg.round_witness_time + 1)
            await tick(node, run_id, ticker)
        else:
            raise AssertionError(f"no Cooldown after {MAX_ROUNDS} rounds")
        node.advance_time(cfg.cooldown_time + 1)
        await tick(node, run_id, ticker)
        _, snap = await s.run(run_id)
        assert snap.coordinator.run_state in (RunState.WaitingForMembers, RunState.Finished)
    finally:
        await s.close()

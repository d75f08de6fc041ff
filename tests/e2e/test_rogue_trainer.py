"""A malicious trainer is caught by recompute verification, ejected and slashed, while the honest
clients finish the epoch with identical weights (issue 25). Real processes: a centralized server,
three honest client daemons and one ``rogue_trainer.py`` daemon that trains honestly but sends its
result with every sign flipped.

``verification_percent = 100`` samples every result of every round, so the rogue's first judged
result (round 0, judged by the verifiers of round 1) is its undoing whatever the server's seeds:
a quorum of the three verifiers (the honest ones among them: the rogue never judges itself)
recomputes its batch, scores the flipped result far below τ and votes mismatch.

The Solana case runs the same rogue among 4 ``psyche-solana-client`` processes against the SBF
programs in a local SVM, in a run created through the Treasurer: the verdicts travel in the
``witness`` instruction, the program ejects the rogue and slashes it at the epoch end (the
coordinator account credits it nothing and the honest clients their share), and the Treasurer
pays the rogue nothing when it claims.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from solders.pubkey import Pubkey

from psyche.backends.centralized.state_store import StateStore
from psyche.coordinator import ClientState
from psyche.coordinator.rewards import epoch_points
from psyche.coordinator.types import TickResult
from psyche.events import read_events
from psyche.localsvm import LocalSvmThread, deploy_programs
from psyche.testnet.base import Proc
from psyche.testnet.envfile import read_env_file
from psyche.testnet.launcher import TestnetOptions, make_testnet
from psyche.testnet.processes import container_env
from psyche.testnet.solana import SolanaTestnetOptions, make_solana_testnet
from support.net import free_port

from .conftest import TINY, write_run_dir
from .test_solana_local_testnet import solana_config
from .test_solana_rewards import BIN, balance, cli, keypair

pytestmark = pytest.mark.slow

ROGUE = Path(__file__).with_name("rogue_trainer.py")


@pytest.mark.parametrize(
    ("batch", "accused_on"), [(6, 0), (24, 3)], ids=["1-2-samples", "6-samples-escalated"]
)
def test_a_sign_flipping_trainer_is_ejected_and_slashed(
    tmp_path: Path,
    local_inputs: tuple[Path, Path],
    reap_children: list,
    batch: int,
    accused_on: int,
) -> None:
    """With 6 samples per trainer a verifier recomputes 1 of them, finds the flipped result far
    below τ and recomputes 3 (half the batch) before it accuses: the escalation runs in the real
    daemon, with the rogue's result already downloaded at the verifier's round start."""
    net, s, saved = centralized_run(
        tmp_path,
        local_inputs,
        "flip",
        global_batch_size_start=batch,
        global_batch_size_end=batch,
        total_steps=5,
        verification_percent=100,
        max_round_train_time=20,
    )
    rogue, honest = _rogue_caught(net, s, accused_on=accused_on)
    slashed_centrally(saved, rogue, honest)


def centralized_run(
    tmp_path: Path,
    inputs: tuple[Path, Path],
    attack: str,
    base: Path = TINY,
    **config: int,
) -> tuple[Any, dict[str, Any], Path]:
    """A centralized run of ``base`` with ``config`` over 4 clients (3 witnesses, at least 3
    to go on) whose client-4 is ``rogue_trainer.py`` with ``attack``; the run's summary and the
    directory of the states the server saved."""
    cfg = write_run_dir(
        tmp_path / "cfg",
        inputs,
        data_port=free_port(),
        base=base,
        **({"init_min_clients": 4, "min_clients": 3, "witness_nodes": 3, "cooldown_time": 3}
           | config),
    )  # fmt: skip
    saved = tmp_path / "saved"
    opts = TestnetOptions(
        config_path=cfg,
        num_clients=4,
        server_port=free_port(),
        out_dir=tmp_path / "net",
        timeout_s=600,
        server_args=("--save-state-dir", str(saved)),
    )
    net = make_testnet(opts, lambda m: None)
    spawn = net._spawn

    def spawn_rogue(label: str, args: list[str]) -> Proc:
        if label != "client-4":
            return spawn(label, args)
        env = {**os.environ, **net.client_settings(label), "PSYCHE_ROGUE_ATTACK": attack}
        return net.spawn(label, [sys.executable, str(ROGUE), *args], env=env)

    net._spawn = spawn_rogue  # type: ignore[method-assign]
    return net, net.run(lambda n: None).to_json(), saved


def slashed_centrally(saved: Path, rogue: str, honest: set[str], run_id: str = "tiny") -> None:
    """The epoch's end paid the honest clients and slashed the rogue: the state saved at that
    end names it Ejected, credits it nothing and slashes it ``slashing_rate_per_client``."""
    loaded = StateStore(saved, run_id).load_newest()
    assert loaded is not None
    coord = loaded[0]
    exited = {c.id.hex()[:8]: c.state for c in coord.epoch_state.exited_clients}
    assert exited.get(rogue) is ClientState.Ejected, exited
    points = epoch_points(coord, TickResult(epoch_end=True), 900, 50)
    assert {i.hex()[:8] for i in points.earned} == honest
    assert {i.hex()[:8]: n for i, n in points.slashed.items()} == {rogue: 50}


def test_a_sign_flipping_trainer_is_ejected_on_solana(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    solana_rogue_run(
        tmp_path, local_inputs, "flip", _rogue_caught, total_steps=5, verification_percent=100
    )


def solana_rogue_run(
    tmp_path: Path,
    inputs: tuple[Path, Path],
    attack: str,
    caught: Callable[[Any, dict[str, Any]], object],
    base: Path | None = None,
    **config: int,
) -> None:
    """A run of config/tiny-solana (or ``base``) with ``config`` over 4
    ``psyche-solana-client`` processes (3 witnesses, at least 3 to go on) in a local SVM, created
    through the Treasurer, whose client-4 is ``rogue_trainer.py`` with ``attack``: ``caught``
    checks the run, then the rogue must have been slashed and paid nothing."""
    config = {
        "init_min_clients": 4,
        "min_clients": 3,
        "witness_nodes": 3,
        "cooldown_time": 3,
    } | config
    extra = {} if base is None else {"base": base}
    cfg = solana_config(tmp_path / "cfg", inputs, **extra, **config)  # type: ignore[arg-type]
    # The chain outlives the launcher, so the test reads the epoch's points and claims after it.
    with LocalSvmThread(deploy_programs(), rpc_port=0) as svm:
        opts = SolanaTestnetOptions(
            config_path=cfg,
            num_clients=4,
            out_dir=tmp_path / "net",
            timeout_s=600,
            rpc=svm.url,
            ws_rpc=svm.ws_url,
            treasurer=True,
            earning_rate=3_000,
            slashing_rate=40,
            collateral_per_point=7,
        )
        net, s = solana_run_with_a_rogue(opts, attack)
        caught(net, s)
        rogue_paid_nothing(net, svm)


def solana_run_with_a_rogue(opts: SolanaTestnetOptions, attack: str) -> tuple[Any, dict[str, Any]]:
    net = make_solana_testnet(opts, lambda m: None)
    client_process = net.client_process

    def rogue_process(slot: int, label: str) -> Proc:
        if slot != 4:
            return client_process(slot, label)
        env = container_env(read_env_file(net.write_client_env(slot, label)))
        env.update({"PSYCHE_ROGUE_ATTACK": attack, "PSYCHE_ROGUE_CLI": "solana"})
        return net.spawn(label, [sys.executable, str(ROGUE), "train"], env=env)

    net.client_process = rogue_process  # type: ignore[method-assign]
    return net, net.run(lambda n: None).to_json()


def rogue_paid_nothing(net: Any, svm: LocalSvmThread) -> None:
    """The epoch's end credited the honest clients and slashed the rogue in the coordinator
    account, and the Treasurer pays the rogue nothing (it earned nothing to claim)."""
    run_id = net.run_id
    dump = cli(svm, None, "json-dump-run", "--run-id", run_id)
    ledger = {c["signer"]: (c["earned"], c["slashed"]) for c in dump["clients"]}
    wallets = {n: net.out / "keys" / f"delegate{n}.json" for n in (1, 2, 3, 4)}
    signer = {n: bytes(keypair(w).pubkey()).hex() for n, w in wallets.items()}
    earned, slashed = ledger[signer[4]]
    assert earned == 0 and slashed == 40, ledger
    assert all(ledger[signer[n]][0] > 0 and ledger[signer[n]][1] == 0 for n in (1, 2, 3)), ledger
    env = {"RPC": svm.url, "WS_RPC": svm.ws_url, "WALLET_PRIVATE_KEY_PATH": str(wallets[4])}
    claim = subprocess.run(
        [str(BIN / "psyche-solana-client"), "treasurer-claim-rewards", "--run-id", run_id],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "RAW_WALLET_PRIVATE_KEY"} | env,
        timeout=120,
    )
    assert "Traceback" not in claim.stderr, claim.stderr
    mint = Pubkey.from_string(json.loads((net.out / "treasurer.json").read_text())["mint"])
    assert balance(svm, keypair(wallets[4]).pubkey(), mint) == 0, claim.stdout + claim.stderr


def _rogue_caught(net: Any, s: dict[str, Any], accused_on: int = 0) -> tuple[str, set[str]]:
    """What both backends' flip runs must show: :func:`rogue_removed` by the end of round 1
    (the round whose verifiers judged its round-0 result); every honest verifier voted mismatch
    on it (a quorum of the three) and match on every honest result, so no honest client was ever
    accused. With ``accused_on`` samples per verifier and trainer (``⌈B/2⌉``, an escalation),
    every accusation was made on that many samples. Returns the rogue's and the honest clients'
    short ids."""
    rogue, honest, gone = rogue_removed(net, s, "flip")
    assert gone.height <= 2 and gone.step <= 3, (gone.height, gone.step)
    logs = net.out / "logs"
    verdicts = "".join((logs / f"client-{n}.log").read_text(errors="replace") for n in (1, 2, 3))
    scores = re.findall(
        r"verified step \d+ slot \d+ (\w+): (-?[\d.]+) on (\d+) samples (\w+)", verdicts
    )
    assert scores, verdicts[-3000:]
    for trainer, score, samples, word in scores:
        if trainer == rogue:
            assert word == "MISMATCH" and float(score) < 0, (trainer, score)
            assert not accused_on or int(samples) == accused_on, (trainer, samples)
        else:
            assert word != "MISMATCH", (trainer, score)  # no honest client is ever accused
    assert sum(1 for t, *_ in scores if t == rogue) >= 2  # a quorum of the three verifiers

    return rogue, honest


def rogue_removed(net: Any, s: dict[str, Any], attack: str) -> tuple[str, set[str], Any]:
    """What every rogue's run must show: the epoch finished; the rogue (client-4) forged results
    with ``attack`` and was removed from the epoch; the honest clients stayed Healthy throughout
    and held identical weights after every apply. Returns the rogue's and the honest clients'
    short ids and the first published state without the rogue."""
    assert s["final_state"] == "Finished", s
    logs = net.out / "logs"
    assert f"rogue: {attack} result" in (logs / "client-4.log").read_text(errors="replace")

    # Events and published states name clients by the first 8 bytes of their key, in hex.
    rogue = read_events(net.client_log("client-4"))[0].client
    honest = {read_events(net.client_log(f"client-{n}"))[0].client for n in (1, 2, 3)}
    states = [st for st in net.states() if st.epoch == 0 and st.run_state != "WaitingForMembers"]
    assert any(rogue in _short(st.clients) for st in states), "the rogue never joined"
    gone = [st for st in states if st.run_state != "Warmup" and rogue not in _short(st.clients)]
    assert gone, "the rogue trainer was never removed from the epoch"
    for who in honest:
        assert {_short(st.clients).get(who) for st in states} == {"Healthy"}, who

    rounds = s["rounds"]
    assert all(len(set(r["model_hash"].values())) <= 1 for r in rounds)
    assert max(len(r["model_hash"]) for r in rounds) >= 3
    return rogue, honest, gone[0]


def _short(clients: dict[str, str]) -> dict[str, str]:
    """A state's clients by the first 8 hex digits of their key, as events name them."""
    return {k[:8]: v for k, v in clients.items()}

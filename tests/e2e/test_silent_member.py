"""A member that stays connected but never delivers costs the run one timed-out round, not one
per round until a health check removes it (issue 12, finding 9). Real processes: a centralized
server, three honest client daemons and one silent daemon (``rogue_silent.py``).

Before: every round waited ``max_round_train_time`` for the silent member's Finished and result
until the health check, and even after its ejection (Ejected clients were still awaited), so every
round of the epoch timed out. Now the round that times out marks it a straggler, later rounds do
not wait for it, and a health check ejects it once the witnesses agree it is missing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from psyche.testnet.base import Proc
from psyche.testnet.launcher import TestnetOptions, make_testnet
from support.net import free_port

from .conftest import write_run_dir

pytestmark = pytest.mark.slow

ROGUE = Path(__file__).with_name("rogue_silent.py")


def test_a_silent_member_costs_one_timed_out_round(
    tmp_path: Path, local_inputs: tuple[Path, Path], reap_children: list
) -> None:
    cfg = write_run_dir(
        tmp_path / "cfg",
        local_inputs,
        data_port=free_port(),
        total_steps=10,
        init_min_clients=4,
        min_clients=3,
        witness_nodes=3,
        max_round_train_time=12,
    )
    opts = TestnetOptions(
        config_path=cfg,
        num_clients=4,
        server_port=free_port(),
        out_dir=tmp_path / "net",
        timeout_s=400,
    )
    net = make_testnet(opts, lambda m: None)
    spawn = net._spawn

    def spawn_rogue(label: str, args: list[str]) -> Proc:
        if label != "client-4":
            return spawn(label, args)
        return net.spawn(label, [sys.executable, str(ROGUE), *args])

    net._spawn = spawn_rogue  # type: ignore[method-assign]
    s = net.run(lambda n: None).to_json()
    assert s["final_state"] == "Finished", s
    rogue_log = (net.out / "logs" / "client-4.log").read_text(errors="replace")
    elected = {
        int(m.group(1))
        for m in re.finditer(r"rogue: silent round epoch=0 height=(\d+) elected=True", rogue_log)
    }
    assert "rogue: silent round" in rogue_log, rogue_log[-2000:]
    rounds = s["rounds"]
    timed_out = {r["height"] for r in rounds if r["end_reason"] == "timeout"}
    # Round 0 times out (nobody can know yet that the member is silent); after it only rounds in
    # which the silent member is an elected witness may (the coordinator waits for every elected
    # witness until the member is removed); a health check ejects it at round 2.
    assert 0 in timed_out, timed_out
    assert timed_out - {0} <= elected, (timed_out, elected)
    assert all(h <= 2 for h in timed_out), (timed_out, elected)
    seen = {v for st in net.states() for v in st.clients.values()}
    assert "Ejected" in seen, "the silent member was never ejected"
    assert all(len(set(r["model_hash"].values())) <= 1 for r in rounds)

"""End to end on an emulated internet: a Solana run whose clients sit behind NAT.

``psyche-solana-local-testnet start --emulate-internet --nat-clients 2,3``: every client runs in
its own network namespace (:mod:`psyche.testnet.internet`), clients 2 and 3 each behind their own
NAT router (nothing can dial in), links shaped to 20 Mbit/s up. No client is given another's
address: they read each other's peer records from the chain. The NAT'd clients notice they are
NAT'd (peers see them at their router's address), reserve circuit-relay slots on the public
client and publish the relayed addresses in their records. The run must complete its epoch with
identical weights on every client.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from psyche.testnet.internet import available

from .test_solana_local_testnet import run_solana_testnet, solana_config

pytestmark = pytest.mark.slow

_OK, _WHY = available()


@pytest.mark.skipif(not _OK, reason=f"no emulated internet here: {_WHY}")
def test_natd_solana_clients_train_through_relays_with_identical_weights(
    tmp_path: Path, local_inputs: tuple[Path, Path]
) -> None:
    cfg = solana_config(tmp_path / "cfg", local_inputs, total_steps=6)
    summary = tmp_path / "summary.json"
    out = tmp_path / "net"
    rc, text = run_solana_testnet(
        cfg,
        out,
        summary,
        "--emulate-internet",
        "--nat-clients",
        "2,3",
        "--uplink-mbps",
        "20",
        "--downlink-mbps",
        "100",
    )
    assert rc == 0, text[-4000:]
    assert "emulated internet" in text and "client-2 NAT" in text

    s = json.loads(summary.read_text())
    assert s["epochs_completed"] >= 1, s["epochs"]
    trained = [r for r in s["rounds"] if r["loss"]]
    assert len(trained) >= 4, s["rounds"]
    assert all(len(r["model_hash"]) == 3 for r in trained), trained
    assert all(len(set(r["model_hash"].values())) == 1 for r in s["rounds"]), s["rounds"]

    # The NAT'd clients published relayed addresses; nobody was handed bootstrap peers.
    for n in (2, 3):
        log = (out / "logs" / f"client-{n}.log").read_text()
        assert "behind a NAT: reachable through" in log, log[-3000:]
        assert "p2p-circuit" in log
    for env in (out / "env").glob("*.env"):
        assert "BOOTSTRAP_PEERS" not in env.read_text()
    # Every namespace the launcher made is gone.
    prefix = re.search(r"emulated internet (psytn\w+):", text)
    assert prefix is not None, text[:2000]
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix.group(1) not in left, left

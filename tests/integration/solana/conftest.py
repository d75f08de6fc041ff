"""``local_svm``: the local SVM (an SVM behind an RPC front, not a validator —
``psyche.localsvm``) running both programs from ``target/deploy``, on free loopback ports.

It runs in a background thread with its own event loop (:class:`LocalSvmThread`), so it serves
both kinds of tests: a synchronous test that drives the project's async client with
``asyncio.run(...)``, and a test that runs CLI commands as subprocesses against ``node.url`` /
``node.ws_url`` (the websocket port is the RPC port + 1, as the Solana tools derive it). The
node's methods (``airdrop``, ``get_account``, ``transaction``, ``advance_slots``, ``call``) may
be called from the test's thread.

Module-scoped (one chain per test module, state carried across its tests): give each test its
own keypairs and run ids. Without the ``.so`` files the fixture fails — the test scripts build
them first (scripts/build-sbf.sh).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from psyche.localsvm import LocalSvmThread, deploy_programs

ROOT = Path(__file__).resolve().parents[3]
DEPLOY_DIR = ROOT / "target" / "deploy"


@pytest.fixture(scope="module")
def local_svm() -> Iterator[LocalSvmThread]:
    programs = deploy_programs(DEPLOY_DIR)
    missing = [str(p) for p in programs.values() if not p.is_file()]
    if missing:
        pytest.fail(
            f"local_svm: no SBF build of the programs ({', '.join(missing)}); "
            "run scripts/build-sbf.sh first",
            pytrace=False,
        )
    with LocalSvmThread(programs) as node:
        yield node

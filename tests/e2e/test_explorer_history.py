"""A finished run's explorer reopened from its database alone (issue 42 item 2), in a real
Chromium: ``psyche explorer serve --database DB`` with no source serves the stored runs
read-only, and the page says it is not followed live.

The database is made by the real indexer code on a real source: a centralized server's status
endpoint on a socket, over a coordinator driven through a whole run to Finished (the scripted
clients of the coordinator tests, with a witness report per witness), polled by the explorer's
``CentralizedSource`` into SQLite. About 8 s, most of it Chromium (6 s more for the live page on
the same database).
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import CentralizedServer, ServerOptions
from psyche.backends.centralized.status_http import StatusEndpoint, WitnessReports
from psyche.coordinator.types import RunState, WitnessMetadata
from psyche.explorer.centralized import CentralizedSource
from psyche.explorer.schema import open_engine
from psyche.explorer.store import Store
from support.configs import four_client_config
from unit.coordinator import support

from .explorer_browser import ROOT, SCREENSHOTS, chromium_or_skip

pytestmark = pytest.mark.slow

TOTAL_STEPS = 5


async def _follow_a_whole_run(db: Path) -> dict[str, Any]:
    """Drive a 4-client run to Finished behind a real status endpoint while the explorer's
    centralized source stores it into ``db``; returns what the page must show."""
    sim = support.make_sim(four_client_config(total_steps=TOTAL_STEPS))
    sim.now = int(time.time()) - 600  # phase times in the recent past, as a real run's
    c = sim.coord
    hub = RunHost(c, first_seq=1)
    server = CentralizedServer(hub, ServerOptions(host="127.0.0.1", port=0))
    reports = WitnessReports()
    endpoint = StatusEndpoint(server, reports, min_interval=0.0)
    await server.start()
    await endpoint.start("127.0.0.1", 0)
    engine = open_engine(str(db))
    source = CentralizedSource(Store(engine), f"http://127.0.0.1:{endpoint.port}")

    async def publish() -> None:
        hub._commit()
        await source.poll()

    trained: list[int] = []
    rounds = 0
    try:
        await publish()
        support.to_warmup(sim)
        await publish()
        sim.send_warmup_witnesses()
        while c.run_state is not RunState.Cooldown:
            await publish()  # RoundTrain
            rnd = c.current_round()
            step = c.epoch_state.start_step + rnd.height
            sel = c.committee_selection(rnd)
            for i, who in sim.healthy_clients():
                if sel.get_witness(i).witness:  # what a witness's client reports beside it
                    meta = WitnessMetadata(step=step, loss=5.0 - 0.5 * step, tokens_per_sec=900.0)
                    reports.add(who, meta)
            sim.send_round_witnesses()
            await publish()  # RoundWitness (the witnesses ended training early)
            sim.advance(c.config.round_witness_time)
            sim.tick()
            rounds += 1
            if c.round_trained(rnd):
                trained.append(step)
        await publish()
        sim.advance(c.config.cooldown_time)
        sim.tick()
        await publish()
        assert c.run_state is RunState.Finished
    finally:
        await source.close()
        await endpoint.close()
        await server.close()
        engine.dispose()  # the writer closes: its WAL is checkpointed into the file
    return {"trained": trained, "rounds": rounds}


def _serve(db: Path, out: Path, *follow: str) -> tuple[subprocess.Popen[bytes], str]:
    ready = out / "url.txt"
    cmd = [sys.executable, "-m", "psyche.cli.main", "explorer", "serve", "--database", str(db),
           "--port", "0", "--ready-file", str(ready), *follow]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None:
            err = proc.communicate()[1].decode()
            raise AssertionError(f"the explorer exited {proc.returncode}:\n{err[-2000:]}")
        assert time.monotonic() < deadline, "the explorer never listened"
        time.sleep(0.2)
    return proc, ready.read_text().strip()


def _page(url: str, name: str = "history") -> dict[str, Any]:
    """What Chromium shows of the stored run: the runs list, then the run's page."""
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    seen: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_or_skip(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        link = page.locator("a.run-link", has_text="test")
        link.wait_for(timeout=60_000)
        seen["banner"] = page.locator("#history").inner_text(timeout=10_000)
        seen["banner_visible"] = page.locator("#history").is_visible()
        seen["live_dot_visible"] = page.locator("#live").is_visible()
        seen["listed_progress"] = page.locator("tr", has=link).first.locator(".run-progress")
        seen["listed_progress"] = seen["listed_progress"].inner_text()
        page.screenshot(path=str(SCREENSHOTS / f"{name}-runs.png"), full_page=True)
        link.first.click()
        try:
            page.locator("#phase").wait_for(timeout=30_000)
        except Exception as e:  # say what the page showed (CI once timed out here under load)
            shown = page.locator("#error").inner_text(timeout=1_000), page.url
            raise AssertionError(f"no run page after the click: error line, url {shown}") from e
        page.wait_for_function(
            "document.getElementById('loss-chart')?.dataset.points !== undefined"
        )
        seen["phase"] = page.locator("#phase").inner_text()
        seen["phase_card"] = page.locator(".card", has=page.locator("#phase")).inner_text()
        seen["stored_at"] = page.locator("#stored-at").count()
        seen["in_phase"] = page.locator("#in-phase").count()
        seen["progress_text"] = page.locator("#progress-text").inner_text()
        seen["loss_points"] = int(page.locator("#loss-chart").get_attribute("data-points") or -1)
        rows = page.locator("h3:has-text('rounds') + table tr")
        seen["round_rows"] = [r.split("\t") for r in rows.all_inner_texts()[1:]]
        seen["body"] = page.locator("main").inner_text()
        seen["banner_on_run"] = page.locator("#history").is_visible()
        page.screenshot(path=str(SCREENSHOTS / f"{name}-run.png"), full_page=True)
        browser.close()
    return seen


def test_a_finished_runs_database_is_served_read_only_with_its_history(tmp_path: Path) -> None:
    chromium_or_skip()
    db = tmp_path / "explorer.sqlite"
    made = asyncio.run(_follow_a_whole_run(db))
    assert made["trained"] == list(range(1, TOTAL_STEPS)) and made["rounds"] >= TOTAL_STEPS
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    files = sorted(p.name for p in tmp_path.iterdir())
    proc, url = _serve(db, tmp_path)
    try:
        seen = _page(url)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "read-only (not followed live)" in err.decode(), err.decode()[-2000:]
    # The page says plainly that this is history, and nothing on it claims to be live.
    assert seen["banner_visible"] and seen["banner_on_run"], seen
    assert "history: not followed live" in seen["banner"], seen["banner"]
    assert not seen["live_dot_visible"], seen
    assert seen["phase"] == "Finished", seen
    assert seen["phase_card"].startswith("last phase stored"), seen["phase_card"]
    assert seen["stored_at"] == 1 and seen["in_phase"] == 0, seen
    assert "in progress" not in seen["body"], seen["body"]
    # The stored run, its rounds and its trained steps.
    steps = len(made["trained"])
    want = f"finished · {steps} of {TOTAL_STEPS - 1} steps trained"
    assert seen["listed_progress"] == want and seen["progress_text"] == want, seen
    assert seen["loss_points"] == steps, seen
    shown_steps = sorted(int(r[2]) for r in seen["round_rows"])
    assert shown_steps == list(range(1, made["rounds"] + 1)), seen["round_rows"]
    assert all(r[7] == "opportunistic" for r in seen["round_rows"]), seen["round_rows"]
    # Read-only: the database is byte-identical and nothing was created beside it but the
    # ready file.
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*files, "url.txt"])


def test_the_same_database_followed_is_shown_live_without_the_banner(tmp_path: Path) -> None:
    """The page's live branch, on the same stored run: an explorer following a source (one that
    does not answer: nothing new is stored) shows the live dot and time in phase, no banner."""
    chromium_or_skip()
    db = tmp_path / "explorer.sqlite"
    asyncio.run(_follow_a_whole_run(db))
    proc, url = _serve(db, tmp_path, "--centralized", "http://127.0.0.1:9")
    try:
        seen = _page(url, "history-followed")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert not seen["banner_visible"] and not seen["banner_on_run"], seen
    assert seen["live_dot_visible"], seen
    assert seen["phase"] == "Finished" and seen["phase_card"].startswith("phase"), seen
    assert seen["in_phase"] == 1 and seen["stored_at"] == 0, seen
    assert seen["loss_points"] == TOTAL_STEPS - 1, seen

"""Watching a run's explorer page with a real headless Chromium (Debian's ``chromium``, driven by
Playwright): what the browser tests of both backends share."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("PSYCHE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "runs" / "explorer-screenshots"


def chromium_or_skip() -> str:
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (scripts/system-deps.sh installs Debian's)")
    return CHROMIUM


def have_chromium() -> bool:
    """Whether the browser checks can run; without Chromium they are left out (with a note) so
    the e2e test they ride on still runs, except in CI (``CI`` set), where that is a failure."""
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return True
    if os.environ.get("CI"):
        pytest.fail(f"no Chromium at {CHROMIUM}: CI installs it (scripts/system-deps.sh)")
    print(f"explorer browser checks left out: no Chromium at {CHROMIUM}")
    return False


class BrowserWatch:
    """Watch a testnet's explorer in a real Chromium, in a thread, while the test drives the
    testnet: ``with BrowserWatch(out, run_id, name) as w: <run the testnet>``; then
    ``w.result()``. The explorer checks thus ride on a run an e2e test makes anyway."""

    def __init__(self, out: Path, run_id: str, name: str, url_timeout: float = 400) -> None:
        self.out, self.run_id, self.name, self.url_timeout = out, run_id, name, url_timeout
        self.finished = threading.Event()
        self.enabled = have_chromium()
        self._seen: list[Watched] = []
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._watch, daemon=True)

    class _Launcher:
        def __init__(self, finished: threading.Event) -> None:
            self.finished = finished

        def poll(self) -> int | None:
            return 0 if self.finished.is_set() else None

    def _watch(self) -> None:
        try:
            url = wait_for_url(self.out, self._Launcher(self.finished), self.url_timeout)
            self._seen.append(watch(url, self.run_id, self.name, self.finished.is_set))
        except BaseException as e:  # reported by result()
            self._errors.append(e)

    def __enter__(self) -> BrowserWatch:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finished.set()
        if self.enabled:
            self._thread.join(timeout=120)

    def result(self) -> Watched | None:
        """What the browser saw (None when Chromium is absent outside CI)."""
        if not self.enabled:
            return None
        assert not self._errors, self._errors
        (seen,) = self._seen
        return seen


@dataclass
class Watched:
    phases: list[str] = field(default_factory=list)
    loss_points: int = -1
    steps: list[Any] = field(default_factory=list)
    """The run's ``/api/runs/{id}/steps`` at the end (for the failure message)."""
    rounds: list[Any] = field(default_factory=list)
    """The run's ``/api/runs/{id}/rounds`` at the end."""
    shots: list[Path] = field(default_factory=list)
    progress_text: str = ""
    """The run page's progress card at the end (``#progress-text``)."""
    bar: float = -1.0
    """The progress bar's filled width over its track's, at the end."""
    listed_progress: str = ""
    """The runs list's progress cell at the end ('' if the explorer had stopped)."""
    api_progress: dict[str, Any] = field(default_factory=dict)
    """``/api/runs/{id}``'s ``progress`` at the end."""


def wait_for_url(out: Path, proc: Any, timeout: float = 180.0) -> str:
    ready = out / "explorer-url.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready.exists() and ready.read_text().strip():
            return ready.read_text().strip()
        assert proc.poll() is None, "the testnet exited before its explorer listened"
        time.sleep(0.3)
    raise AssertionError("the explorer never listened")


def watch(
    url: str, run_id: str, name: str, done: Callable[[], bool], timeout: float = 420.0
) -> Watched:
    """Open the runs list, then the run's page; follow its phase (the page updates itself) until
    the run is Finished or ``done()``; screenshots go to runs/explorer-screenshots/."""
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    seen = Watched()

    def shot(page: Any, what: str) -> None:
        path = SCREENSHOTS / f"{name}-{what}.png"
        page.screenshot(path=str(path), full_page=True)
        seen.shots.append(path)
        print(f"screenshot: {path}")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_or_skip(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        link = page.locator("a.run-link", has_text=run_id)
        link.wait_for(timeout=120_000)
        shot(page, "runs")
        link.first.click()
        # Generous: on a loaded CI machine the explorer shares 2 cores with a whole testnet.
        page.locator("#phase").wait_for(timeout=120_000)
        deadline = time.monotonic() + timeout
        mid_shot = False
        while time.monotonic() < deadline:
            phase = page.locator("#phase").inner_text(timeout=60_000)
            if not seen.phases or seen.phases[-1] != phase:
                seen.phases.append(phase)
            points = page.locator("#loss-chart").get_attribute("data-points")
            seen.loss_points = int(points) if points else -1
            _api(page, seen)
            if not mid_shot and seen.loss_points >= 2:
                shot(page, "run-training")
                mid_shot = True
            if phase == "Finished" or done():
                _runs_list(browser, url, run_id, seen)
                break
            page.wait_for_timeout(500)
        page.wait_for_timeout(2500)  # the last witness reports of the run
        points = page.locator("#loss-chart").get_attribute("data-points")
        seen.loss_points = int(points) if points else -1
        shot(page, "run-end")
        _api(page, seen)
        seen.progress_text = page.locator("#progress-text").inner_text()
        seen.bar = float(
            page.evaluate(
                "(() => { const b = document.getElementById('progress');"
                " return b.getBoundingClientRect().width"
                " / b.parentElement.getBoundingClientRect().width; })()"
            )
        )
        browser.close()
    return seen


def _api(page: Any, seen: Watched) -> None:
    """The run's steps, rounds and progress from the API, kept from the last time the explorer
    answered (it stops with the testnet)."""
    run = page.url.rsplit("/", 1)[-1]
    for what in ("steps", "rounds"):
        got = page.evaluate(f"fetch('/api/runs/{run}/{what}').then(r => r.json()).catch(() => [])")
        if got:
            setattr(seen, what, got)
    got = page.evaluate(f"fetch('/api/runs/{run}').then(r => r.json()).catch(() => null)")
    if got and got.get("progress"):
        seen.api_progress = dict(got["progress"])


def _runs_list(browser: Any, url: str, run_id: str, seen: Watched) -> None:
    """The runs list's progress cell, in a second tab, while the explorer is still up."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(url)
        link = page.locator("a.run-link", has_text=run_id)
        link.wait_for(timeout=30_000)
        seen.listed_progress = (
            page.locator("tr", has=link).first.locator(".run-progress").inner_text()
        )
    except Exception:  # the testnet (and its explorer) already stopped
        seen.listed_progress = ""
    finally:
        page.close()


def pool_page(url: str, name: str) -> dict[str, str]:
    """The pool page's figures (cap, deposited, extracted, redeemable, frozen, lenders' claims)."""
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_or_skip(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "#/pools")
        page.locator(".pool-cap").first.wait_for(timeout=60_000)
        out = {
            k: page.locator(f".pool-{k}").first.inner_text()
            for k in ("cap", "deposited", "extracted", "redeemable", "frozen")
        }
        out["claims"] = "|".join(page.locator(".lender-claimed").all_inner_texts())
        out["treasurer_claimed"] = "|".join(page.locator(".tr-claimed-points").all_inner_texts())
        path = SCREENSHOTS / f"{name}-pools.png"
        page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        browser.close()
    return out


def assert_progress_agrees(
    seen: Watched, trained: int, *, total_steps: int, finished: bool
) -> None:
    """The run page's progress card and bar (and the runs list's cell, when the explorer was
    still up) agree with ``summary.json``'s ``trained`` steps: drain rounds move the
    coordinator's step past ``total_steps`` without training, and the page must not count them."""
    text = f"{trained} of {total_steps - 1} steps trained"
    assert text in seen.progress_text, (seen.progress_text, text)
    assert seen.progress_text.startswith("finished") == finished, seen.progress_text
    assert seen.api_progress.get("trained_steps") == trained, seen.api_progress
    want = 1.0 if finished else min(1.0, float(seen.api_progress["fraction"]))
    assert abs(seen.bar - want) < 0.02, (seen.bar, want, seen.api_progress)
    if not finished:
        assert seen.bar <= 1.0 and seen.bar >= 0.0, seen.bar
    # Read as soon as the page said Finished; '' when the testnet had already stopped its
    # explorer by then (a race CI lost once: the run page read, the runs list no longer served).
    if finished and seen.listed_progress:
        assert seen.listed_progress == seen.progress_text, (seen.listed_progress, text)


def check_run_watched(seen: Watched, summary: dict[str, Any], *, total_steps: int) -> None:
    """What issue 29 asks of the run page, against the testnet's ``summary.json``: the phase
    changed while the browser watched, the loss chart has one point per trained step, the
    progress card and bar agree with the trained steps, the screenshots are real PNGs."""
    assert len(seen.phases) >= 3, seen.phases
    trained = [r for r in summary["rounds"] if r["loss"]]
    steps = [(s["step"], s["reports"]) for s in seen.steps]
    assert trained and seen.loss_points == len(trained), ([r["step"] for r in trained], steps)
    assert seen.shots and all(
        p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000 for p in seen.shots
    ), seen.shots
    finished = seen.phases[-1] == "Finished"
    assert_progress_agrees(seen, len(trained), total_steps=total_steps, finished=finished)


def check_rounds_timeline(seen: Watched, summary: dict[str, Any]) -> None:
    """The rounds timeline agrees with the summary on how each round it saw end ended."""
    summary_end = {r["step"]: r["end_reason"] for r in summary["rounds"]}
    shown_end = {
        r["step"]: "opportunistic" if r["opportunistic"] else "timeout"
        for r in seen.rounds
        if r["witness_at"] is not None and r["trained"]
    }
    assert shown_end and all(summary_end[s] == e for s, e in shown_end.items()), (
        summary_end,
        shown_end,
    )


def explorer_pool_page(rpc: str, ws: str, run_id: str, pool: int, out: Path) -> dict[str, str]:
    """``psyche explorer serve`` started on ``rpc`` following ``run_id`` and Mining Pool
    ``pool``; what its pool page shows (:func:`pool_page`), then it is stopped."""
    import subprocess
    import sys

    out.mkdir(parents=True, exist_ok=True)
    ready = out / "url.txt"
    cmd = [
        sys.executable, "-m", "psyche.cli.main", "explorer", "serve",
        "--database", str(out / "explorer.sqlite"), "--port", "0", "--rpc", rpc,
        "--ws-rpc", ws, "--run-id", run_id, "--pool", str(pool), "--ready-file", str(ready),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None, "the explorer exited"
            assert time.monotonic() < deadline, "the explorer never listened"
            time.sleep(0.2)
        return pool_page(ready.read_text().strip(), "solana")
    finally:
        proc.terminate()
        proc.wait(timeout=30)

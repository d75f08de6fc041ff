"""Running documented commands as a user types them: ``bash -c TEXT`` in the fresh copy.

:class:`Shell` runs a command to its end (``run``) or starts one that keeps running (``start``:
a server, a client, a launcher) and waits for one line of its output. Each command is checked
against the catalog (``tests/docs/catalog.py``): a scene runs only the commands the catalog gives
it, and says at its end that it ran them all (:meth:`Shell.ran_all`). Output goes to one log file
per command under the scene's log folder, and the failure message quotes its tail.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .catalog import SCENES

TAIL = 3000
STACKS_TAIL = 16000  # a hang's thread stacks


@dataclass
class Background:
    """A documented command that keeps running (started by :meth:`Shell.start`)."""

    text: str
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of ``pattern`` in the output (multiline), waiting up to ``timeout``."""
        rx = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        while True:
            text = self.output()
            m = rx.search(text)
            if m:
                return m
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"`{self.text}` exited {self.popen.returncode} before printing "
                    f"/{pattern}/:\n{text[-TAIL:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"`{self.text}` printed no /{pattern}/ within {timeout:.0f} s:\n{text[-TAIL:]}"
                )
            time.sleep(0.3)

    def finish(self, timeout: float, code: int = 0, expect: str | None = None) -> str:
        """Wait for it to end by itself; check its exit code (and a line)."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"`{self.text}` did not end within {timeout:.0f} s:\n{self.output()[-TAIL:]}"
            ) from None
        return self._check(code, expect)

    def stop(self, sig: int = signal.SIGTERM, code: int = 143, expect: str | None = None) -> str:
        """Send ``sig`` (as a supervisor or Ctrl-C would) and check the clean exit."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            self.kill()
            raise AssertionError(
                f"`{self.text}` did not stop within 60 s of signal {sig}:\n"
                f"{self.output()[-STACKS_TAIL:]}"
            ) from None
        return self._check(code, expect)

    def dump_stacks(self) -> None:
        """A hung Python process writes every thread's stack to its log (SIGABRT, answered by
        the faulthandler that ``PYTHONFAULTHANDLER`` enables), so a hang that shows once under
        load says where it waited."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGABRT)  # the client and its p2p host
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def _check(self, code: int, expect: str | None) -> str:
        out = self.output()
        rc = self.popen.returncode
        assert rc == code, f"`{self.text}` exited {rc}, expected {code}:\n{out[-TAIL:]}"
        if expect is not None:
            assert re.search(expect, out, re.MULTILINE), (
                f"`{self.text}` printed no /{expect}/:\n{out[-TAIL:]}"
            )
        return out


@dataclass
class Shell:
    """The user's shell in the fresh copy: ``.venv/bin`` first on PATH, as after
    ``source .venv/bin/activate``."""

    root: Path
    scene: str
    logs: Path
    env: dict[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    background: list[Background] = field(default_factory=list)

    def _popen(self, text: str, extra: str, env: Mapping[str, str] | None) -> Background:
        allowed = SCENES[self.scene]
        assert text in allowed, f"scene {self.scene!r} does not list `{text}` in the catalog"
        self.ran.append(text)
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{len(self.ran):02d}.log"
        base = {**os.environ, **self.env, **(env or {})}
        base["PATH"] = f"{self.root / '.venv' / 'bin'}{os.pathsep}{base.get('PATH', '')}"
        base["PYTHONFAULTHANDLER"] = "1"  # for dump_stacks
        with log.open("wb") as f:
            f.write(f"$ {text}{extra}\n".encode())
        popen = subprocess.Popen(
            ["bash", "-c", text + extra],
            cwd=self.root,
            env=base,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return Background(text, popen, log)

    def run(
        self,
        text: str,
        expect: str | None,
        *,
        code: int = 0,
        extra: str = "",
        timeout: float = 300,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Run ``text`` (plus ``extra``, documented flags that shorten it) to its end; check its
        exit code and that one line matches ``expect``."""
        proc = self._popen(text, extra, env)
        return proc.finish(timeout, code, expect)

    def start(
        self,
        text: str,
        expect: str,
        *,
        extra: str = "",
        timeout: float = 120,
        env: Mapping[str, str] | None = None,
    ) -> tuple[Background, re.Match[str]]:
        """Start ``text``, which keeps running, and wait for a line matching ``expect``."""
        proc = self._popen(text, extra, env)
        self.background.append(proc)
        try:
            return proc, proc.wait_for(expect, timeout)
        except AssertionError:
            proc.kill()
            raise

    def ran_all(self) -> None:
        missing = [t for t in SCENES[self.scene] if t not in self.ran]
        assert not missing, f"scene {self.scene!r} did not run: {missing}"

    def close(self) -> None:
        for proc in self.background:
            if proc.popen.poll() is None:
                proc.kill()

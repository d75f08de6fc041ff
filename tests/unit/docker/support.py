"""What the Docker tests share: the image's environment as the Dockerfile sets it, the files
around the image, and a sandbox that runs docker/entrypoint.sh the way the container does, with
a fake client and a fake nvidia-smi.

No Docker engine is needed: the entrypoint is a bash script, run here with the environment the
container gets (the Dockerfile's ENV, then the env file, then `-e`), on a PATH holding only
symlinks to the few tools it uses plus the fakes, so a real nvidia-smi or client on the test
machine never leaks in.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
ENV_EXAMPLE = ROOT / ".env.example"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERIGNORE = ROOT / ".dockerignore"
DOCS = ROOT / "docs" / "docker.md"
_DEFAULT_SIGINT = ["env", "--default-signal=INT,QUIT"]
"""Prefix that starts a command with SIGINT and SIGQUIT at their defaults (coreutils ≥ 8.31)."""

LOG_LINE = re.compile(r"^\[psyche-entrypoint\] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


# --- the Dockerfile ------------------------------------------------------------------------------


def dockerfile_instructions(text: str | None = None) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text() if text is None else text
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _substitute(value: str, known: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return known.get(name, m.group(0))

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", one, value)


def dockerfile_args() -> dict[str, str]:
    """Every ARG with a default, as declared (global and stage ARGs alike)."""
    args: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
    return args


def image_env() -> dict[str, str]:
    """The final stage's ENV with the ARG defaults substituted (PATH left out: the tests choose
    their own)."""
    args = dockerfile_args()
    env: dict[str, str] = {}
    stages = [i for i, (word, _) in enumerate(dockerfile_instructions()) if word == "FROM"]
    for word, rest in dockerfile_instructions()[stages[-1] :]:
        if word != "ENV":
            continue
        for item in shlex.split(rest):
            name, _, value = item.partition("=")
            env[name] = _substitute(value, {**args, **env})
    env.pop("PATH", None)
    return env


# --- env files -----------------------------------------------------------------------------------


def docker_env_file(path: Path) -> dict[str, str]:
    """An env file read as `docker run --env-file` reads it: `NAME=value` lines, the value taken
    literally (quotes included), `#` lines and blank lines skipped."""
    env: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep:
            env[name] = value
    return env


def active_names(text: str) -> list[str]:
    return re.findall(r"^([A-Z][A-Z0-9_]*)=", text, re.M)


def commented_names(text: str) -> list[str]:
    return re.findall(r"^#\s*([A-Z][A-Z0-9_]*)=", text, re.M)


# --- the entrypoint sandbox ----------------------------------------------------------------------

FAKE_CLIENT = """#!{python} -S
# A stand-in for psyche-solana-client: records its argv and environment, then exits with the
# next code of FAKE_CODES (comma separated; the last one repeats). "C@S": exit C after S seconds;
# "hang": wait for a signal, record it, exit 128 + its number.
import json, os, signal, sys, time

log = os.environ["FAKE_LOG"]
with open(log, "a+") as f:
    f.seek(0)
    index = sum(1 for _ in f)
codes = os.environ.get("FAKE_CODES", "0").split(",")
code = codes[min(index, len(codes) - 1)]

def on_signal(signum, frame):
    with open(os.environ["FAKE_SIGNALS"], "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
    sys.exit(128 + signum)

signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
with open(log, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "start": time.time()}}))
    f.write("\\n")
if code == "hang":
    while True:
        time.sleep(0.05)
value, _, delay = code.partition("@")
if delay:
    time.sleep(float(delay))
sys.exit(int(value))
"""

FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
# A stand-in for nvidia-smi: FAKE_GPUS GPUs, driver FAKE_DRIVER supporting CUDA FAKE_DRIVER_CUDA;
# FAKE_SMI_FAIL: fail as nvidia-smi does when it cannot talk to the driver.
if [[ -n ${FAKE_SMI_FAIL:-} ]]; then
    echo "Failed to initialize NVML: Driver/library version mismatch"
    exit 18
fi
n=${FAKE_GPUS:-1}
if ((n == 0)); then
    echo "No devices were found"
    exit 6
fi
case ${1:-} in
    --query-gpu=driver_version)
        for ((i = 0; i < n; i++)); do echo "${FAKE_DRIVER:-570.86.15}"; done ;;
    -L)
        for ((i = 0; i < n; i++)); do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done ;;
    *)
        echo "| NVIDIA-SMI ${FAKE_DRIVER:-570.86.15}   Driver Version: ${FAKE_DRIVER:-570.86.15}" \\
            "  CUDA Version: ${FAKE_DRIVER_CUDA:-12.8}     |" ;;
esac
"""

# What the entrypoint (and `#!/usr/bin/env bash`) runs from PATH.
TOOLS = ("bash", "env", "awk", "sleep", "mktemp", "mkfifo", "rm")

# A joiner's minimum: what the entrypoint requires.
JOINER = {
    "RPC": "https://api.devnet.solana.com",
    "RUN_ID": "run-1",
    "RAW_WALLET_PRIVATE_KEY": "[" + ",".join(["7"] * 64) + "]",
}


@dataclass
class Result:
    rc: int
    stderr: str
    runs: list[dict[str, Any]]
    signals: list[str]
    elapsed: float

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    def errors(self) -> list[str]:
        return [line for line in self.lines if "] " in line and " error: " in line]


class Sandbox:
    """A directory with the fakes, a PATH made of them, and the container's environment."""

    def __init__(self, root: Path, *, gpu: bool = True) -> None:
        self.root = root
        self.tools = root / "tools"
        self.client_bin = root / "client-bin"
        self.gpu_bin = root / "gpu-bin"
        for d in (self.tools, self.client_bin, self.gpu_bin):
            d.mkdir(parents=True, exist_ok=True)
        for tool in TOOLS:
            found = shutil.which(tool)
            assert found, f"{tool} not found"
            (self.tools / tool).symlink_to(found)
        client = self.client_bin / "psyche-solana-client"
        client.write_text(FAKE_CLIENT.format(python=sys.executable))
        client.chmod(0o755)
        smi = self.gpu_bin / "nvidia-smi"
        smi.write_text(FAKE_NVIDIA_SMI)
        smi.chmod(0o755)
        self.log = root / "runs.jsonl"
        self.signals = root / "signals.txt"
        self.gpu = gpu

    def env(
        self, overrides: Mapping[str, str | None] | None = None, *, joiner: bool = True
    ) -> dict:
        """The container's environment: the image's ENV, then (joiner) a valid joiner config,
        then ``overrides`` (None removes a variable)."""
        path = [self.client_bin] + ([self.gpu_bin] if self.gpu else []) + [self.tools]
        env: dict[str, str] = {
            **image_env(),
            "PATH": os.pathsep.join(str(p) for p in path),
            "HOME": str(self.root),
            "FAKE_LOG": str(self.log),
            "FAKE_SIGNALS": str(self.signals),
            "PSYCHE_RESTART_BACKOFF_S": "0.01",
        }
        if joiner:
            env.update(JOINER)
        for name, value in (overrides or {}).items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def start(
        self, env: Mapping[str, str], args: Sequence[str] = (), *, command: Sequence[str] = ()
    ) -> subprocess.Popen[str]:
        # As in a container, the entrypoint starts with SIGINT at its default disposition. A
        # test run started in the background by a non-interactive shell inherits SIGINT ignored,
        # and bash can never trap a signal ignored at its start: the SIGINT test then hung.
        return subprocess.Popen(
            [*_DEFAULT_SIGINT, *(command or [str(ENTRYPOINT)]), *args],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.root,
        )

    def run(
        self,
        overrides: Mapping[str, str | None] | None = None,
        args: Sequence[str] = (),
        *,
        joiner: bool = True,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = (),
        timeout: float = 20,
    ) -> Result:
        t0 = time.monotonic()
        proc = self.start(
            self.env(overrides, joiner=joiner) if env is None else env, args, command=command
        )
        try:
            _, stderr = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return self.result(proc.returncode, stderr, time.monotonic() - t0)

    def result(self, rc: int, stderr: str, elapsed: float) -> Result:
        runs = (
            [json.loads(line) for line in self.log.read_text().splitlines()]
            if self.log.exists()
            else []
        )
        signals = self.signals.read_text().split() if self.signals.exists() else []
        return Result(rc, stderr, runs, signals, elapsed)

    def wait_for_runs(self, proc: subprocess.Popen[str], n: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log.exists() and len(self.log.read_text().splitlines()) >= n:
                return
            assert proc.poll() is None, f"entrypoint exited early: {proc.communicate()[1]}"
            time.sleep(0.02)
        raise AssertionError(f"the client did not start {n} time(s)")

    def wait_for_child(self, proc: subprocess.Popen[str], name: str, timeout: float = 10) -> None:
        """Until the entrypoint has a child process called ``name`` (Linux /proc)."""
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in children.read_text().split():
                try:
                    if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                        return
                except (FileNotFoundError, ProcessLookupError):
                    # The child exited between the listing and the read: the kernel answers
                    # ENOENT or, for one just being reaped, ESRCH (a CI failure of 2026-11-29).
                    pass
            assert proc.poll() is None, f"entrypoint exited early: {proc.communicate()[1]}"
            time.sleep(0.02)
        raise AssertionError(f"no {name} child appeared")

    def signal_and_wait(
        self, proc: subprocess.Popen[str], sig: signal.Signals, timeout: float = 10
    ) -> Result:
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=timeout)
        return self.result(proc.returncode, stderr, time.monotonic() - t0)

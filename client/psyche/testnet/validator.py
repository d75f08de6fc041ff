"""A real Solana validator for the local testnet and the validator tests: agave's
``solana-test-validator`` (built by ``scripts/validator.sh``) with the four SBF programs loaded at
their ids, on loopback ports chosen free, its ledger in a folder of the caller's.

Why it exists beside the local SVM (:mod:`psyche.localsvm`): the local SVM runs the same SBF
programs but answers the RPC itself; a validator adds what a real cluster does between the client
and the program (its banking stage, blockhash expiry, the faucet behind ``requestAirdrop``, its
own RPC and PubSub services). Which binary: ``PSYCHE_VALIDATOR_BIN``, else the one
``scripts/validator.sh`` left in the cache, else ``solana-test-validator`` on PATH.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "AGAVE_VERSION",
    "ValidatorMissing",
    "ValidatorPorts",
    "ValidatorProcess",
    "cached_validator",
    "find_validator",
    "start_validator",
    "validator_command",
    "wait_until_ready",
]

AGAVE_VERSION = "4.2.2"
"""The version ``scripts/validator.sh`` pins (kept equal to it: tests/unit checks)."""
PORT_RANGE_WIDTH = 64
"""Ports the validator may bind for gossip, TPU, TVU, repair and QUIC (its minimum is 25)."""


class ValidatorMissing(RuntimeError):
    """No ``solana-test-validator`` where one was looked for."""


def cached_validator() -> Path:
    """Where ``scripts/validator.sh`` installs the binary (its default cache)."""
    cache = Path(os.environ.get("PSYCHE_CACHE_DIR", Path.home() / ".cache" / "psyche"))
    root = Path(os.environ.get("VALIDATOR_WORK", cache / "validator"))
    return root / f"agave-{AGAVE_VERSION}" / "bin" / "solana-test-validator"


def find_validator(explicit: str | None = None) -> Path:
    """The binary to run: ``explicit``, ``PSYCHE_VALIDATOR_BIN``, the cache's, or PATH's."""
    for given in (explicit, os.environ.get("PSYCHE_VALIDATOR_BIN")):
        if given:
            path = Path(given)
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise ValidatorMissing(f"{given} is not an executable solana-test-validator")
            return path
    cached = cached_validator()
    if cached.is_file():
        return cached
    on_path = shutil.which("solana-test-validator")
    if on_path:
        return Path(on_path)
    raise ValidatorMissing(
        "no solana-test-validator: build one with `bash scripts/validator.sh` (hours the first "
        "time, cached after) or set PSYCHE_VALIDATOR_BIN"
    )


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        try:
            u.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True, slots=True)
class ValidatorPorts:
    rpc: int
    """JSON-RPC; the websocket is ``rpc + 1``, as the Solana tools derive it."""
    faucet: int
    gossip: int
    dynamic: tuple[int, int]
    """The half-open range the validator's other sockets come from."""

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.rpc}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.rpc + 1}"

    @classmethod
    def pick(cls, rng: random.Random | None = None, tries: int = 200) -> ValidatorPorts:
        """A block of ports free now (TCP and UDP), away from the kernel's ephemeral range so
        that other programs' outgoing connections rarely take one before the validator binds."""
        rng = rng or random.Random()
        width = PORT_RANGE_WIDTH + 4
        for _ in range(tries):
            base = rng.randrange(20_000, 32_000 - width)
            if all(_free(p) for p in range(base, base + width)):
                return cls(base, base + 2, base + 3, (base + 4, base + width))
        raise RuntimeError(f"no block of {width} free ports for the validator")


def validator_command(
    binary: Path,
    ledger: Path,
    ports: ValidatorPorts,
    programs: Mapping[str, Path],
    *,
    reset: bool = True,
) -> list[str]:
    """``solana-test-validator`` on loopback with ``programs`` (id → .so) loaded at their ids;
    ``reset=False`` continues an existing ledger (a restart)."""
    argv = [
        str(binary),
        "--ledger",
        str(ledger.resolve()),
        *(["--reset"] if reset else []),
        "--quiet",
        "--bind-address",
        "127.0.0.1",
        "--rpc-port",
        str(ports.rpc),
        "--faucet-port",
        str(ports.faucet),
        "--gossip-port",
        str(ports.gossip),
        "--dynamic-port-range",
        f"{ports.dynamic[0]}-{ports.dynamic[1]}",
        "--limit-ledger-size",
        "50000000",
    ]
    for program_id, so in programs.items():
        # Absolute: the validator runs in its own folder.
        argv += ["--bpf-program", program_id, str(Path(so).resolve())]
    return argv


def _rpc(url: str, method: str, params: list[object] | None = None) -> object:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
    answer = httpx.post(url, json=body, timeout=5.0).json()
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


def wait_until_ready(
    url: str,
    program_ids: list[str],
    proc: subprocess.Popen[bytes] | None = None,
    timeout: float = 120.0,
) -> None:
    """Until the RPC answers healthy, a slot has passed and every program is executable."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"solana-test-validator exited with {proc.returncode}")
        try:
            if _rpc(url, "getHealth") == "ok" and int(str(_rpc(url, "getSlot"))) >= 1:
                infos = _rpc(url, "getMultipleAccounts", [program_ids, {"encoding": "base64"}])
                values = infos["value"] if isinstance(infos, dict) else []
                if values and all(v is not None and v["executable"] for v in values):
                    return
                last = "programs not yet executable"
        except (httpx.HTTPError, RuntimeError, ValueError) as e:
            last = str(e) or type(e).__name__
        time.sleep(0.25)
    raise RuntimeError(f"solana-test-validator at {url} not ready within {timeout:.0f} s ({last})")


@dataclass
class ValidatorProcess:
    """A running validator: its URLs and process (:func:`start_validator`)."""

    ports: ValidatorPorts
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return self.ports.rpc_url

    @property
    def ws_url(self) -> str:
        return self.ports.ws_url

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@contextlib.contextmanager
def start_validator(
    workdir: Path, programs: Mapping[str, Path], binary: Path | None = None
) -> Iterator[ValidatorProcess]:
    """A validator in ``workdir`` (ledger and ``validator.log``) until the block ends."""
    binary = binary or find_validator()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "validator.log"
    ports = ValidatorPorts.pick()
    argv = validator_command(binary, workdir / "ledger", ports, programs)
    with log.open("ab") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    node = ValidatorProcess(ports, popen, log)
    try:
        wait_until_ready(node.url, list(programs), popen)
        yield node
    finally:
        node.stop()

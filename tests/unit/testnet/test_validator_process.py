"""``psyche.testnet.validator``: how the real validator is found, started and waited for, checked
without one (the runs against it are tests/validator, in scripts/test-validator.sh)."""

from __future__ import annotations

import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from psyche.testnet import validator as v

ROOT = Path(__file__).resolve().parents[3]


def test_the_pinned_version_is_the_build_scripts() -> None:
    script = (ROOT / "scripts" / "validator.sh").read_text()
    (pinned,) = re.findall(r"(?m)^AGAVE_VERSION=(\S+)", script)
    assert pinned == v.AGAVE_VERSION


def test_the_command_loads_every_program_at_its_id_on_loopback(tmp_path: Path) -> None:
    ports = v.ValidatorPorts.pick()
    programs = {"Prog1111": tmp_path / "a.so", "Prog2222": Path("rel/b.so")}
    argv = v.validator_command(Path("/bin/stv"), tmp_path / "ledger", ports, programs)
    assert argv[0] == "/bin/stv"
    pairs = [argv[i + 1 : i + 3] for i, a in enumerate(argv) if a == "--bpf-program"]
    # Absolute: the validator runs in its own folder.
    b = str(Path.cwd() / "rel" / "b.so")
    assert pairs == [["Prog1111", str((tmp_path / "a.so").resolve())], ["Prog2222", b]]
    assert argv[argv.index("--bind-address") + 1] == "127.0.0.1"
    assert argv[argv.index("--rpc-port") + 1] == str(ports.rpc)
    assert ports.ws_url == f"ws://127.0.0.1:{ports.rpc + 1}"
    lo, hi = ports.dynamic
    assert hi - lo >= 25 and lo > ports.gossip > ports.faucet > ports.rpc + 1


def test_picked_ports_are_free_for_tcp_and_udp() -> None:
    ports = v.ValidatorPorts.pick()
    for port in (ports.rpc, ports.rpc + 1, ports.faucet, ports.gossip, *range(*ports.dynamic)):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_missing_binary_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PSYCHE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PSYCHE_VALIDATOR_BIN", raising=False)
    monkeypatch.delenv("VALIDATOR_WORK", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(v.ValidatorMissing, match=r"scripts/validator\.sh"):
        v.find_validator()
    monkeypatch.setenv("PSYCHE_VALIDATOR_BIN", str(tmp_path / "nope"))
    with pytest.raises(v.ValidatorMissing, match="not an executable"):
        v.find_validator()


def test_the_cached_build_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSYCHE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PSYCHE_VALIDATOR_BIN", raising=False)
    monkeypatch.delenv("VALIDATOR_WORK", raising=False)
    binary = v.cached_validator()
    assert binary == tmp_path / "validator" / f"agave-{v.AGAVE_VERSION}" / "bin" / (
        "solana-test-validator"
    )
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    assert v.find_validator() == binary


def test_a_validator_that_exits_is_reported_not_waited_for() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(RuntimeError, match="exited with 3"):
        v.wait_until_ready("http://127.0.0.1:9", ["x"], proc, timeout=5)


def test_the_testnet_without_a_validator_says_how_to_build_one(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "PSYCHE_CACHE_DIR": str(tmp_path), "HOME": str(tmp_path),
           "COLUMNS": "400"}  # fmt: skip
    res = subprocess.run(
        [str(Path(sys.executable).parent / "psyche-solana-local-testnet"), "start",
         "--validator", "real", "--out", str(tmp_path / "net"), "--tui", "false"],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    out = " ".join((res.stdout + res.stderr).split())
    assert (
        "cannot start: no solana-test-validator: build one with `bash scripts/validator.sh`" in out
    )
    assert "Traceback" not in out
    assert not (tmp_path / "runs").exists()  # nothing was made before the check

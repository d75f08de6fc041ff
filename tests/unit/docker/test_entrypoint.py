"""docker/entrypoint.sh, run for real by bash with the environment the container gets: the
configuration checks (exit 64), the restart policy, signal forwarding, and the arguments and
environment that reach the client. The client and nvidia-smi are fakes (support.py)."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from .support import ENTRYPOINT, ENV_EXAMPLE, JOINER, LOG_LINE, Sandbox, docker_env_file

EX_USAGE = 64


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def backoffs(stderr: str) -> list[float]:
    return [float(s) for s in re.findall(r"restart \d+/\d+ in ([0-9.]+)s", stderr)]


# --- the script itself ---------------------------------------------------------------------------


def test_script_is_executable_bash_and_parses() -> None:
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in ENTRYPOINT.read_text()
    subprocess.run(["bash", "-n", str(ENTRYPOINT)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_clean() -> None:
    out = subprocess.run(["shellcheck", str(ENTRYPOINT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


# --- configuration checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"RPC": None}, "error: RPC is not set"),
        ({"RPC": ""}, "error: RPC is not set"),
        ({"RUN_ID": None}, "error: RUN_ID is not set"),
        ({"RUN_ID": '""'}, "error: RUN_ID is not set"),  # docker --env-file keeps the quotes
        ({"RAW_WALLET_PRIVATE_KEY": None}, "error: no wallet: set RAW_WALLET_PRIVATE_KEY"),
        (
            {"RAW_WALLET_PRIVATE_KEY": "", "WALLET_PRIVATE_KEY_PATH": "/nonexistent/key.json"},
            "error: WALLET_PRIVATE_KEY_PATH=/nonexistent/key.json is not a readable file",
        ),
        ({"DATA_PARALLELISM": "0"}, "error: DATA_PARALLELISM=0 must be a whole number ≥ 1"),
        ({"TENSOR_PARALLELISM": "two"}, "error: TENSOR_PARALLELISM=two must be a whole number"),
        ({"MICRO_BATCH_SIZE": "-1"}, "error: MICRO_BATCH_SIZE=-1 must be a whole number ≥ 1"),
        ({"MICRO_BATCH_SIZE": "1.5"}, "error: MICRO_BATCH_SIZE=1.5 must be a whole number"),
        ({"PSYCHE_MAX_RESTARTS": "many"}, "error: PSYCHE_MAX_RESTARTS=many is not a whole number"),
        ({"PSYCHE_RESTART_BACKOFF_S": "5s"}, "error: PSYCHE_RESTART_BACKOFF_S=5s is not a number"),
        ({"PSYCHE_CLIENT_CMD": "no-such-client train"}, "error: client command 'no-such-client'"),
    ],
)
def test_each_problem_is_one_line_and_exit_64(
    box: Sandbox, overrides: dict[str, str | None], message: str
) -> None:
    result = box.run(overrides)
    assert result.rc == EX_USAGE, result.stderr
    assert result.runs == [], "the client must not start"
    errors = result.errors()
    assert len(errors) == 1, result.stderr
    assert message in errors[0]
    assert LOG_LINE.match(errors[0])
    assert "not starting the client (exit 64)" in result.lines[-1]


def test_every_problem_is_reported_at_once(box: Sandbox) -> None:
    result = box.run({"DATA_PARALLELISM": "x"}, joiner=False)
    assert result.rc == EX_USAGE
    messages = " | ".join(result.errors())
    for part in ("RPC is not set", "RUN_ID is not set", "no wallet", "DATA_PARALLELISM=x"):
        assert part in messages
    assert len(result.errors()) == 4
    assert "4 problem(s)" in result.lines[-1]


def test_every_line_is_prefixed_and_timestamped_in_utc(box: Sandbox) -> None:
    result = box.run({"FAKE_CODES": "1,0"})
    assert result.rc == 0
    assert result.lines and all(LOG_LINE.match(line) for line in result.lines), result.stderr


def test_wallet_from_a_key_file(box: Sandbox, tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    key.write_text(JOINER["RAW_WALLET_PRIVATE_KEY"])
    result = box.run({"RAW_WALLET_PRIVATE_KEY": None, "WALLET_PRIVATE_KEY_PATH": str(key)})
    assert result.rc == 0, result.stderr
    assert f"wallet: key file {key}" in result.stderr
    assert result.runs[0]["env"]["WALLET_PRIVATE_KEY_PATH"] == str(key)


def test_wallet_raw_key_wins_over_the_path(box: Sandbox) -> None:
    # As in the client: RAW_WALLET_PRIVATE_KEY is used, the (absent) file is never read.
    result = box.run({"WALLET_PRIVATE_KEY_PATH": "/nonexistent/key.json"})
    assert result.rc == 0, result.stderr
    assert "wallet: RAW_WALLET_PRIVATE_KEY" in result.stderr
    assert JOINER["RAW_WALLET_PRIVATE_KEY"] not in result.stderr, "the key is never logged"


def test_a_key_file_flag_wins_over_the_raw_key(box: Sandbox) -> None:
    result = box.run({}, ["-w", "/nonexistent/key.json"])
    assert result.rc == EX_USAGE
    assert "WALLET_PRIVATE_KEY_PATH=/nonexistent/key.json is not a readable file" in result.stderr


def test_flags_given_as_arguments_satisfy_the_checks(box: Sandbox) -> None:
    result = box.run(
        {"RPC": None, "RUN_ID": None, "DATA_PARALLELISM": "zero"},
        ["--rpc", "devnet", "--run-id=run-9", "--data-parallelism", "1"],
    )
    assert result.rc == 0, result.stderr
    assert result.runs[0]["argv"] == [
        "train",
        "--rpc",
        "devnet",
        "--run-id=run-9",
        "--data-parallelism",
        "1",
    ]


def test_help_skips_the_checks(box: Sandbox) -> None:
    result = box.run({}, ["--help"], joiner=False)
    assert result.rc == 0, result.stderr
    assert [r["argv"] for r in result.runs] == [["train", "--help"]]


def test_skip_checks(box: Sandbox) -> None:
    result = box.run({"PSYCHE_SKIP_CHECKS": "1"}, joiner=False)
    assert result.rc == 0
    assert "PSYCHE_SKIP_CHECKS=1" in result.stderr
    assert len(result.runs) == 1


# --- GPUs ----------------------------------------------------------------------------------------


def test_gpu_line_prints_the_driver(box: Sandbox) -> None:
    result = box.run({"FAKE_GPUS": "4", "DATA_PARALLELISM": "2", "TENSOR_PARALLELISM": "2"})
    assert result.rc == 0, result.stderr
    gpu = [line for line in result.lines if "GPU: driver" in line]
    assert len(gpu) == 1
    assert "driver 570.86.15 (CUDA 12.8), 4 GPU(s) listed, 4 usable" in gpu[0]
    assert "PyTorch built for CUDA 12.8" in gpu[0]
    assert "= 4" in gpu[0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"FAKE_GPUS": "1", "DATA_PARALLELISM": "2"},
            "DATA_PARALLELISM × TENSOR_PARALLELISM = 2 needs 2 GPUs; 1 visible",
        ),
        (
            {"FAKE_GPUS": "4", "TENSOR_PARALLELISM": "2", "CUDA_VISIBLE_DEVICES": "3"},
            "= 2 needs 2 GPUs; 1 visible",
        ),
        ({"FAKE_GPUS": "0"}, "nvidia-smi fails: No devices were found"),
        ({"FAKE_SMI_FAIL": "1"}, "nvidia-smi fails: Failed to initialize NVML"),
        (
            {"FAKE_DRIVER": "550.54.15", "FAKE_DRIVER_CUDA": "12.4", "PSYCHE_TORCH_CUDA": "13.0"},
            "supports CUDA 12.4; this image's PyTorch needs a CUDA 13 driver",
        ),
    ],
)
def test_gpu_problems(box: Sandbox, overrides: dict[str, str], message: str) -> None:
    result = box.run(overrides)
    assert result.rc == EX_USAGE, result.stderr
    assert result.runs == []
    assert len(result.errors()) == 1 and message in result.errors()[0], result.stderr


def test_older_cuda_12_driver_runs_on_minor_version_compatibility(box: Sandbox) -> None:
    result = box.run({"FAKE_DRIVER": "535.183.01", "FAKE_DRIVER_CUDA": "12.2"})
    assert result.rc == 0, result.stderr
    assert "driver CUDA 12.2 < 12.8: running on CUDA minor-version compatibility" in result.stderr


def test_cuda_without_nvidia_smi_warns_and_starts(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, gpu=False)
    result = box.run()
    assert result.rc == 0, result.stderr
    assert "warning: PSYCHE_DEVICE=cuda but nvidia-smi is not in the container" in result.stderr


def test_cpu_device_with_gpus_warns(box: Sandbox) -> None:
    result = box.run({"PSYCHE_DEVICE": "cpu", "FAKE_GPUS": "1", "DATA_PARALLELISM": "8"})
    assert result.rc == 0, result.stderr  # no GPU count check off CUDA
    assert "warning: PSYCHE_DEVICE=cpu although 1 GPU(s) are visible" in result.stderr


def test_empty_device_warns(box: Sandbox) -> None:
    result = box.run({"PSYCHE_DEVICE": ""})
    assert result.rc == 0, result.stderr
    assert "warning: PSYCHE_DEVICE is empty" in result.stderr


# --- the client's arguments and environment ------------------------------------------------------


def test_exit_0_stops_and_extra_args_reach_train(box: Sandbox) -> None:
    args = ["--bootstrap-peers", "/ip4/10.0.0.2/tcp/4001/p2p/QmPeer", "--logs", "json"]
    result = box.run({"FAKE_CODES": "0"}, args)
    assert result.rc == 0, result.stderr
    assert [r["argv"] for r in result.runs] == [["train", *args]]
    assert "client exited with code 0: the run is finished" in result.lines[-1]


def test_client_command_override(box: Sandbox) -> None:
    result = box.run({"PSYCHE_CLIENT_CMD": "psyche-solana-client can-join --pubkey X"}, ["-v"])
    assert result.rc == 0, result.stderr
    assert result.runs[0]["argv"] == ["can-join", "--pubkey", "X", "-v"]


@pytest.mark.parametrize("source", ["bash set -a", "docker --env-file"])
def test_env_example_reaches_the_client(box: Sandbox, source: str) -> None:
    """The joiner's flow: .env.example (copied to .env, RPC, RUN_ID and the wallet filled in) on
    top of the image's environment. Read as a shell reads it, and as `docker run --env-file`."""
    joiner = {**JOINER, "RPC": '"https://api.devnet.solana.com"'}  # quoted, as users write it
    if source == "docker --env-file":
        env = {**box.env(joiner=False), **docker_env_file(ENV_EXAMPLE), **joiner}
        result = box.run(env=env)
    else:
        exports = " ".join(f"{name}={value!r}" for name, value in joiner.items())
        script = f"set -a; . {ENV_EXAMPLE}; {exports}; set +a; exec {ENTRYPOINT}"
        result = box.run(command=["bash", "-c", script], joiner=False)
    assert result.rc == 0, result.stderr
    [run] = result.runs
    env = run["env"]
    assert run["argv"] == ["train"]
    assert env["DATA_PARALLELISM"] == "1"
    assert env["TENSOR_PARALLELISM"] == "1"
    assert env["MICRO_BATCH_SIZE"] == "2"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "all"
    assert env["RUN_ID"] == "run-1"
    assert env["PSYCHE_DEVICE"] == "cuda", "the env file must not override the image's device"
    assert "GPU: driver 570.86.15" in result.stderr


# --- restarts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "why"),
    [
        (10, "its version differs from the run's; a new image is needed"),
        (2, "the join was rejected (authorization)"),
    ],
)
def test_codes_that_are_not_restarted(box: Sandbox, code: int, why: str) -> None:
    result = box.run({"FAKE_CODES": f"{code},0"})
    assert result.rc == code
    assert len(result.runs) == 1
    assert why in result.lines[-1] and "not restarting" in result.lines[-1]


def test_crash_loop_doubles_the_backoff_then_gives_up(box: Sandbox) -> None:
    result = box.run(
        {
            "FAKE_CODES": "3",
            "PSYCHE_RESTART_BACKOFF_S": "0.05",
            "PSYCHE_RESTART_BACKOFF_MAX_S": "0.2",
            "PSYCHE_MAX_RESTARTS": "4",
        }
    )
    assert result.rc == 3
    assert len(result.runs) == 5  # the first run and 4 restarts
    assert backoffs(result.stderr) == [0.05, 0.1, 0.2, 0.2]
    starts = [r["start"] for r in result.runs]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    for gap, backoff in zip(gaps, backoffs(result.stderr), strict=True):
        assert gap >= backoff
    assert "not restarting: 4 restart(s) done, PSYCHE_MAX_RESTARTS=4" in result.lines[-1]


def test_crash_then_success(box: Sandbox) -> None:
    result = box.run({"FAKE_CODES": "1,137,0"})
    assert result.rc == 0
    assert len(result.runs) == 3
    assert "code 137 (killed by signal 9)" in result.stderr


def test_max_restarts_zero_never_restarts(box: Sandbox) -> None:
    result = box.run({"FAKE_CODES": "1,0", "PSYCHE_MAX_RESTARTS": "0"})
    assert result.rc == 1
    assert len(result.runs) == 1


def test_a_long_run_resets_the_backoff_and_the_count(box: Sandbox) -> None:
    result = box.run(
        {
            # crash, crash, run 0.5 s then crash (reset), crash, crash: gives up
            "FAKE_CODES": "1,1,1@0.5,1",
            "PSYCHE_RESTART_BACKOFF_S": "0.02",
            "PSYCHE_RESTART_BACKOFF_MAX_S": "1",
            "PSYCHE_RESTART_RESET_S": "0.3",
            "PSYCHE_MAX_RESTARTS": "2",
        }
    )
    assert result.rc == 1
    assert len(result.runs) == 5
    assert backoffs(result.stderr) == [0.02, 0.04, 0.02, 0.04]
    assert re.findall(r"restart (\d+)/2", result.stderr) == ["1", "2", "1", "2"]
    assert "backoff and restart count reset" in result.stderr


def test_default_backoff_settings(box: Sandbox) -> None:
    # The first restart waits the default 5 s: check the announcement, then stop the wait.
    proc = box.start(box.env({"FAKE_CODES": "1", "PSYCHE_RESTART_BACKOFF_S": None}))
    box.wait_for_child(proc, "sleep")
    result = box.signal_and_wait(proc, signal.SIGTERM)
    assert "restart 1/10 in 5s" in result.stderr
    assert result.rc == 143 and len(result.runs) == 1


# --- signals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_reaches_the_client_and_nothing_restarts(
    box: Sandbox, sig: signal.Signals, code: int
) -> None:
    proc = box.start(box.env({"FAKE_CODES": "hang"}))
    box.wait_for_runs(proc, 1)
    result = box.signal_and_wait(proc, sig)
    assert result.signals == [sig.name], result.stderr
    assert result.rc == code
    assert len(result.runs) == 1
    assert result.elapsed < 3
    assert f"SIG{sig.name[3:]}: forwarding it to the client" in result.stderr
    assert "not restarting" in result.lines[-1]


def test_sigterm_during_the_backoff_stops_at_once(box: Sandbox) -> None:
    proc = box.start(box.env({"FAKE_CODES": "1", "PSYCHE_RESTART_BACKOFF_S": "60"}))
    box.wait_for_runs(proc, 1)
    box.wait_for_child(proc, "sleep")
    result = box.signal_and_wait(proc, signal.SIGTERM)
    assert result.rc == 143
    assert result.elapsed < 3
    assert len(result.runs) == 1
    assert "restart 1/10 in 60s" in result.stderr
    assert "stopped by SIGTERM" in result.lines[-1]

"""Every flag the user documentation lists parses, under its documented name, into the value the
command acts on; and the commands around them (identities, print-all-help) behave as documented.

The flag lists below are the documentation's (its command-line pages for the centralized client,
server and local testnet, and the Solana client's), not read from the code, so a flag renamed
or dropped fails here.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from psyche.cli.checks import bind_address
from psyche.cli.client import client
from psyche.cli.daemon_options import take_training_flags
from psyche.cli.logs import apply_log_spec
from psyche.cli.server import server
from psyche.cli.solana import solana
from psyche.cli.solana_testnet import solana_testnet
from psyche.cli.testnet import testnet as centralized_testnet
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.identity import SecretKey

from .programs import PROGRAMS

# The client's train flags with a value each, as the documentation names them (shared by the
# centralized and the Solana client).
TRAIN_FLAGS: list[tuple[list[str], str, Any]] = [
    (["--bind-p2p-port", "4001"], "bind_p2p_port", 4001),
    (["--bind-p2p-interface", "lo"], "bind_p2p_host", "127.0.0.1"),
    (["--logs", "json"], "logs", "json"),
    (["--data-parallelism", "2"], "data_parallelism", 2),
    (["--tensor-parallelism", "4"], "tensor_parallelism", 4),
    (["--micro-batch-size", "8"], "micro_batch_size", 8),
    (["--write-gradients-dir", "grads"], "write_gradients_dir", Path("grads").absolute()),
    (["--eval-tasks", "hellaswag,arc_easy"], "eval_tasks", "hellaswag,arc_easy"),
    (["--eval-fewshot", "5"], "eval_fewshot", 5),
    (["--eval-seed", "7"], "eval_seed", 7),
    (["--eval-task-max-docs", "100"], "eval_task_max_docs", 100),
    (["--checkpoint-dir", "ckpt"], "checkpoint_dir", "ckpt"),
    (["--hub-repo", "me/model"], "hub_repo", "me/model"),
    (["--wandb-project", "p"], "wandb_project", "p"),
    (["--wandb-run", "r"], "wandb_run", "r"),
    (["--wandb-group", "g"], "wandb_group", "g"),
    (["--wandb-entity", "e"], "wandb_entity", "e"),
    (["--write-log", "client.log"], "write_log", Path("client.log").absolute()),
    (["--optim-stats-steps", "10"], "optim_stats_steps", 10),
    (["--grad-accum-in-fp32"], "grad_accum_in_fp32", True),
    (["--dummy-training-delay-secs", "3"], "dummy_training_delay_secs", 3.0),
    (["--max-concurrent-parameter-requests", "4"], "max_concurrent_parameter_requests", 4),
    (["--max-concurrent-downloads", "2"], "max_concurrent_downloads", 2),
    (["--compression", "2"], "compression", 2),
    (["--keep-steps", "5"], "keep_steps", 5),
    (["--device", "cpu"], "device", "cpu"),
    (["--device", "mps"], "device", "mps"),  # parsed; only usable where torch reports MPS
]

CENTRALIZED_TRAIN = ["--run-id", "r", "--server-addr", "127.0.0.1:1"]


def _parse(cmd: click.Command, args: list[str]) -> dict[str, Any]:
    """The parameters ``cmd`` would be called with (nothing runs)."""
    ctx = cmd.make_context(cmd.name or "cmd", list(args), resilient_parsing=False)
    return dict(ctx.params)


def _sub(group: click.Group, name: str) -> click.Command:
    cmd = group.commands.get(name)
    assert cmd is not None, f"{group.name} has no {name!r} command"
    return cmd


@pytest.mark.parametrize(("args", "param", "value"), TRAIN_FLAGS, ids=lambda v: str(v))
def test_centralized_train_flag(args: list[str], param: str, value: Any) -> None:
    assert _parse(_sub(client, "train"), [*CENTRALIZED_TRAIN, *args])[param] == value


@pytest.mark.parametrize(("args", "param", "value"), TRAIN_FLAGS, ids=lambda v: str(v))
def test_solana_train_flag(args: list[str], param: str, value: Any) -> None:
    assert _parse(_sub(solana, "train"), ["--run-id", "r", *args])[param] == value


@pytest.mark.parametrize("short", ["-i", "--identity-secret-key-path"])
def test_centralized_identity_short_and_long(short: str) -> None:
    params = _parse(_sub(client, "train"), [*CENTRALIZED_TRAIN, short, "k.key"])
    assert params["identity_secret_key_path"] == "k.key"
    assert _parse(_sub(client, "show-identity"), [short, "k.key"])["identity_secret_key_path"]


@pytest.mark.parametrize(
    ("args", "param", "value"),
    [
        (["-r", "devnet"], "rpc", "devnet"),
        (["--rpc", "devnet"], "rpc", "devnet"),
        (["--ws-rpc", "wss://x"], "ws_rpc", "wss://x"),
        (["--rpc-2", "testnet"], "rpc_2", "testnet"),
        (["--ws-rpc-2", "wss://y"], "ws_rpc_2", "wss://y"),
        (["--rpc-3", "localnet"], "rpc_3", "localnet"),
        (["--ws-rpc-3", "wss://z"], "ws_rpc_3", "wss://z"),
        (["-w", "id.json"], "wallet_private_key_path", "id.json"),
        (["--wallet-private-key-path", "id.json"], "wallet_private_key_path", "id.json"),
        (["--authorizer", "A"], "authorizer", "A"),
        (["-i", "p2p.key"], "identity_secret_key_path", "p2p.key"),
    ],
    ids=lambda v: str(v),
)
def test_solana_train_endpoint_and_wallet_flags(args: list[str], param: str, value: Any) -> None:
    assert _parse(_sub(solana, "train"), ["--run-id", "r", *args])[param] == value


def test_centralized_train_run_and_server() -> None:
    params = _parse(_sub(client, "train"), ["--run-id", "run1", "--server-addr", "10.0.0.1:20000"])
    assert (params["run_id"], params["server_addr"]) == ("run1", "10.0.0.1:20000")
    res = CliRunner().invoke(client, ["train", "--run-id", "r"], env={"SERVER_ADDR": None})
    assert res.exit_code == 2 and "--server-addr" in res.output


def test_show_identity_reads_the_raw_key_from_the_environment() -> None:
    key = SecretKey.generate()
    res = CliRunner().invoke(
        client,
        ["show-identity"],
        env={"RAW_IDENTITY_SECRET_KEY": key.to_bytes().hex(), "IDENTITY_SECRET_KEY_PATH": None},
    )
    assert res.exit_code == 0, res.output
    assert res.output.strip() == peer_id_for(key.public_key())


# The Solana client's commands as "Joining a training run" and "Creating a run" invoke them.
SOLANA_DOCUMENTED: list[tuple[str, list[str], dict[str, Any]]] = [
    (
        "check-authorization",
        ["--run-id", "r", "--authorizer", "A", "--pubkey", "P"],
        {"run_id": "r", "authorizer": "A", "pubkey": "P"},
    ),
    (
        "create-run",
        ["--rpc", "devnet", "--ws-rpc", "wss://x", "--run-id", "r", "--name", "N",
         "--description", "D"],
        {"rpc": "devnet", "ws_rpc": "wss://x", "run_id": "r", "name": "N", "description": "D"},
    ),
    (
        "update-config",
        ["--rpc", "devnet", "--ws-rpc", "wss://x", "--run-id", "r", "--config-path", "c.toml"],
        {"rpc": "devnet", "ws_rpc": "wss://x", "run_id": "r", "config_path": "c.toml"},
    ),
    (
        "set-paused",
        ["--rpc", "devnet", "--ws-rpc", "wss://x", "--run-id", "r", "resume"],
        {"rpc": "devnet", "ws_rpc": "wss://x", "run_id": "r", "action": "resume"},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "args", "want"), SOLANA_DOCUMENTED, ids=[c[0] for c in SOLANA_DOCUMENTED]
)
def test_solana_documented_commands_parse(
    name: str,
    args: list[str],
    want: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text("")  # --config-path is read where it is parsed
    params = _parse(_sub(solana, name), args)
    got = {k: params[k] for k in want}
    if "config_path" in got:
        got["config_path"] = str(got["config_path"])
    assert got == want


def test_server_validate_config_flags(tmp_path: Path) -> None:
    state, data = tmp_path / "state.toml", tmp_path / "data.toml"
    state.write_text("")
    data.write_text("")
    params = _parse(
        _sub(server, "validate-config"), ["--state", str(state), "--data-config", str(data)]
    )
    assert (Path(params["state_path"]), Path(params["data_path"])) == (state, data)


@pytest.mark.parametrize(
    ("args", "param", "value"),
    [
        (["-s", "7000"], "server_port", 7000),
        (["--server-port", "7000"], "server_port", 7000),
        (["--tui", "false"], "tui", False),
        (["--data-config", "DATA"], "data_config", "DATA"),
        (["--save-state-dir", "saved"], "save_state_dir", Path("saved")),
        (["--init-warmup-time", "9"], "init_warmup_time", 9),
        (["--withdraw-on-disconnect", "false"], "withdraw_on_disconnect", False),
    ],
    ids=lambda v: str(v),
)
def test_server_run_flag(tmp_path: Path, args: list[str], param: str, value: Any) -> None:
    state = tmp_path / "state.toml"
    state.write_text("")
    data = tmp_path / "data.toml"
    data.write_text("")
    args = [data.as_posix() if a == "DATA" else a for a in args]
    got = _parse(_sub(server, "run"), ["--state", str(state), *args])[param]
    assert got == (data if value == "DATA" else value)


def test_server_port_defaults_to_a_free_port(tmp_path: Path) -> None:
    state = tmp_path / "state.toml"
    state.write_text("")
    assert _parse(_sub(server, "run"), ["--state", str(state)])["server_port"] == 0


TESTNET_FLAGS: list[tuple[list[str], str, Any]] = [
    (["--num-clients", "2"], "num_clients", 2),
    (["--config-path", "cfg"], "config_path", Path("cfg")),
    (["--write-distro-data", "distro"], "write_distro_data", Path("distro")),
    (["--tui", "false"], "tui", False),
    (["--random-kill-num", "1"], "random_kill_num", 1),
    (["--allowed-to-kill", "1,2"], "allowed_to_kill", "1,2"),
    (["--random-kill-interval", "30"], "random_kill_interval", 30.0),
    (["--log", "warn,psyche=debug"], "log", "warn,psyche=debug"),
    (["--first-client-checkpoint", "me/model"], "first_client_checkpoint", "me/model"),
    (["--hf-token", "hf_x"], "hf_token", "hf_x"),
    (["--write-log"], "write_log", True),
    (["--wandb-project", "p"], "wandb_project", "p"),
    (["--wandb-group", "g"], "wandb_group", "g"),
    (["--wandb-entity", "e"], "wandb_entity", "e"),
    (["--optim-stats", "5"], "optim_stats", 5),
    (["--eval-tasks", "hellaswag"], "eval_tasks", "hellaswag"),
]


@pytest.mark.parametrize(("args", "param", "value"), TESTNET_FLAGS, ids=lambda v: str(v))
def test_testnet_flag(
    args: list[str], param: str, value: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "state.toml").write_text("")  # --config-path is read where parsed
    want = tmp_path / value if isinstance(value, Path) else value  # paths: made absolute
    assert _parse(_sub(centralized_testnet, "start"), args)[param] == want
    assert _parse(_sub(solana_testnet, "start"), args)[param] == want


def test_testnet_server_port_defaults_to_a_free_port() -> None:
    assert _parse(_sub(centralized_testnet, "start"), [])["server_port"] == 0
    assert (
        _parse(_sub(centralized_testnet, "start"), ["--server-port", "20000"])["server_port"]
        == 20000
    )


def test_training_flags_become_options() -> None:
    kw = _parse(
        _sub(client, "train"),
        [*CENTRALIZED_TRAIN, "--eval-tasks", "t.jsonl", "--eval-fewshot", "2",
         "--eval-task-max-docs", "3", "--wandb-project", "p", "--wandb-run", "r",
         "--optim-stats-steps", "4", "--dummy-training-delay-secs", "1.5",
         "--max-concurrent-downloads", "3", "--write-gradients-dir", "g",
         "--data-parallelism", "2", "--tensor-parallelism", "2", "--grad-accum-in-fp32"],
    )  # fmt: skip
    flags = take_training_flags(kw)
    assert flags.daemon.evals is not None
    assert (flags.daemon.evals.tasks, flags.daemon.evals.fewshot) == ("t.jsonl", 2)
    assert (flags.daemon.evals.seed, flags.daemon.evals.max_docs) == (42, 3)
    assert flags.wandb is not None and (flags.wandb.project, flags.wandb.run) == ("p", "r")
    assert flags.daemon.optim_stats_steps == 4
    assert flags.daemon.training_delay_s == 1.5
    assert flags.daemon.max_concurrent_downloads == 3
    assert flags.daemon.gradients_dir == Path("g").absolute()
    assert (flags.data_parallelism, flags.tensor_parallelism, flags.grad_accum_fp32) == (2, 2, True)


def test_wandb_details_without_a_project_are_a_usage_error() -> None:
    kw = _parse(_sub(client, "train"), [*CENTRALIZED_TRAIN, "--wandb-group", "g"])
    with pytest.raises(click.UsageError, match="need --wandb-project"):
        take_training_flags(kw)


def test_compression_is_accepted_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    kw = _parse(_sub(client, "train"), [*CENTRALIZED_TRAIN, "--compression", "2"])
    with caplog.at_level(logging.WARNING):
        take_training_flags(kw)
    assert "--compression 2 has no effect" in caplog.text
    assert "compression_topk" in caplog.text


@pytest.mark.parametrize("flag", ["--data-parallelism", "--micro-batch-size"])
def test_parallelism_below_one_is_refused(flag: str) -> None:
    res = CliRunner().invoke(client, ["train", *CENTRALIZED_TRAIN, flag, "0"])
    assert res.exit_code == 2 and f"Invalid value for '{flag}'" in res.output


def test_bind_interface_name_resolves_to_its_address() -> None:
    names = {name for _, name in socket.if_nameindex()}
    assert "lo" in names
    ctx, param = click.Context(client), click.Option(["--bind-p2p-host"])
    assert bind_address(ctx, param, "lo") == "127.0.0.1"
    assert bind_address(ctx, param, "10.1.2.3") == "10.1.2.3"
    assert bind_address(ctx, param, "::1") == "::1"
    with pytest.raises(click.BadParameter, match="neither an IP address nor a network interface"):
        bind_address(ctx, param, "node.example")


def test_log_spec_sets_levels() -> None:
    root, psyche_log = logging.getLogger(), logging.getLogger("psyche")
    saved = root.level, psyche_log.level
    try:
        apply_log_spec("warn,psyche=debug")
        assert root.level == logging.WARNING and psyche_log.level == logging.DEBUG
        with pytest.raises(ValueError, match="unknown level 'loud'"):
            apply_log_spec("psyche=loud")
    finally:
        root.setLevel(saved[0])
        psyche_log.setLevel(saved[1])


# --- identities ---------------------------------------------------------------------------------


def test_show_identity_without_a_key_is_a_clear_error() -> None:
    res = CliRunner().invoke(
        client,
        ["show-identity"],
        env={"RAW_IDENTITY_SECRET_KEY": None, "IDENTITY_SECRET_KEY_PATH": None},
    )
    assert res.exit_code == 2
    assert "no identity to show" in res.output and "openssl rand 32" in res.output
    assert "name a key file (-i/--identity-secret-key-path)" in res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)


def test_show_static_p2p_identity_without_a_key_names_its_own_argument() -> None:
    res = CliRunner().invoke(
        solana,
        ["show-static-p2p-identity"],
        env={"RAW_IDENTITY_SECRET_KEY": None, "IDENTITY_SECRET_KEY_PATH": None},
    )
    assert res.exit_code == 2 and "no identity to show" in res.output
    # This command takes the file as an argument; it has no --identity-secret-key-path.
    assert "name a key file (PATH)" in res.output
    assert "--identity-secret-key-path" not in res.output
    assert "Traceback" not in res.output


def test_show_identity_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        client,
        ["show-identity", "-i", str(tmp_path / "absent.key")],
        env={"RAW_IDENTITY_SECRET_KEY": None},
    )
    assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output


def test_create_then_show_static_p2p_identity(tmp_path: Path) -> None:
    path = tmp_path / "p2p.key"
    env = {"RAW_IDENTITY_SECRET_KEY": None, "IDENTITY_SECRET_KEY_PATH": None}
    made = CliRunner().invoke(solana, ["create-static-p2p-identity", str(path)], env=env)
    assert made.exit_code == 0, made.output
    assert path.stat().st_mode & 0o777 == 0o600
    peer = made.output.strip()
    assert peer == peer_id_for(SecretKey.load(path).public_key())
    shown = CliRunner().invoke(solana, ["show-static-p2p-identity", str(path)], env=env)
    assert shown.exit_code == 0 and shown.output.strip() == peer
    # The centralized client prints the same peer id for the same file.
    same = CliRunner().invoke(client, ["show-identity", "-i", str(path)], env=env)
    assert same.output.strip() == peer
    again = CliRunner().invoke(solana, ["create-static-p2p-identity", str(path)], env=env)
    assert again.exit_code == 1 and "exists" in again.output
    assert SecretKey.load(path).public_key() == SecretKey.load(path).public_key()
    forced = CliRunner().invoke(
        solana, ["create-static-p2p-identity", str(path), "--force"], env=env
    )
    assert forced.exit_code == 0 and forced.output.strip() != peer


# --- print-all-help -------------------------------------------------------------------------------


@pytest.mark.parametrize(("group", "prog"), PROGRAMS)
def test_print_all_help_markdown_lists_every_command_and_option(
    group: click.Group, prog: str
) -> None:
    res = CliRunner().invoke(group, ["print-all-help", "--markdown"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"# Command-line help for `{prog}`")
    ctx = click.Context(group, info_name=prog)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if cmd.hidden:
            assert f"## `{prog} {name}`" not in res.output
            continue
        assert f"## `{prog} {name}`" in res.output
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[0] in res.output, (name, param.opts)
    plain = CliRunner().invoke(group, ["print-all-help"])
    assert plain.exit_code == 0 and f"$ {prog} --help" in plain.output

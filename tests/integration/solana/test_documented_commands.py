"""Every command line of the user documentation ("Creating a run", "Joining a training run",
"Authentication and Keys"), run as a real subprocess exactly as written, against a local SVM RPC
node executing the real SBF programs (the ``local_svm`` fixture). Placeholders are filled in;
where the documentation writes ``devnet`` or ``[RPC]`` the node's URL is used (devnet cannot be
reached here; the moniker itself is tested in tests/unit/cli/test_cli_monikers.py).

The steps chain like the real flow: create-run → update-config → join-authorization-create.sh →
join-authorization-set-delegates.sh → check-authorization → set-paused … resume → json-dump-run.
Each test runs the steps before its own once per module (:class:`Flow` remembers them), so any
test can also run alone.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = ROOT / ".venv" / "bin"
SAMPLE = ROOT / "config" / "seed-sample" / "config.toml"
TINY = ROOT / "config" / "tiny" / "state.toml"

RUN_ID = "docs-run"
NAME = "Psyche docs run"
DESCRIPTION = "Created with the documented command lines — name and description on chain"
LAMPORTS = 100 * 10**9


def _cli_env_names() -> set[str]:
    """Every environment variable psyche-solana-client (or the scripts) would read."""
    from psyche.cli.solana import solana
    from psyche.cli.solana_options import DIRECT_ENV, envvars

    names = set(DIRECT_ENV) | {"PSYCHE_SOLANA_CLIENT", "GRANTEE_PUBKEY", "GRANTOR_PUBKEY"}
    for cmd in solana.commands.values():
        names |= envvars(cmd)
    return names


def write_keypair(path: Path) -> Keypair:
    """As `solana-keygen new -o PATH` writes it: a JSON array of the 64 keypair bytes."""
    kp = Keypair()
    path.write_text(json.dumps(list(bytes(kp))))
    return kp


@dataclass
class Flow:
    """The documented flow against one node, each step run once and remembered."""

    node: Any
    work: Path
    """The user's working directory: keypair files, and ``scripts`` (a link to the repo's)."""
    owner: Keypair = field(init=False)
    grantee: Keypair = field(init=False)
    delegates: list[Keypair] = field(init=False)
    stranger: Keypair = field(init=False)
    done: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "scripts").symlink_to(ROOT / "scripts")
        # The run's owner is also its join authority (create-run's default), so the documented
        # grantor.json is the owner's wallet.
        self.owner = write_keypair(self.work / "grantor.json")
        self.grantee = write_keypair(self.work / "grantee.json")
        self.delegates = [write_keypair(self.work / f"delegate{i}.json") for i in (1, 2, 3)]
        self.stranger = write_keypair(self.work / "stranger.json")
        for kp in (self.owner, self.grantee):
            self.node.airdrop(kp.pubkey(), LAMPORTS)

    # --- running ----------------------------------------------------------------------------

    def env(
        self, extra: dict[str, str] | None = None, *, client_on_path: bool = True
    ) -> dict[str, str]:
        """A clean environment: nothing of the developer's Solana settings; the client on PATH
        (or not: the scripts find it next to themselves, in the repository's .venv)."""
        drop = _cli_env_names()
        env = {k: v for k, v in os.environ.items() if k not in drop}
        path = [p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != VENV_BIN]
        env["PATH"] = os.pathsep.join([str(VENV_BIN), *path] if client_on_path else path)
        env.update(extra or {})
        return env

    def operator_env(self) -> dict[str, str]:
        """The run owner's environment: their wallet, as `solana config` would hold it."""
        return self.env({"WALLET_PRIVATE_KEY_PATH": str(self.work / "grantor.json")})

    def run(
        self, argv: list[str] | str, env: dict[str, str], *, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``argv``, or a shell command line (``sh -c``, so globs and $VARS expand as typed)."""
        cmd = ["sh", "-c", argv] if isinstance(argv, str) else argv
        res = subprocess.run(
            cmd, cwd=self.work, env=env, capture_output=True, text=True, timeout=180
        )
        assert "Traceback" not in res.stderr, res.stderr
        if ok:
            assert res.returncode == 0, f"{argv}\nstdout: {res.stdout}\nstderr: {res.stderr}"
        return res

    def once(
        self, name: str, step: Callable[[], subprocess.CompletedProcess[str]]
    ) -> subprocess.CompletedProcess[str]:
        if name not in self.done:
            self.done[name] = step()
        return self.done[name]

    # --- the documented steps, in order ------------------------------------------------------

    def create_run(self) -> subprocess.CompletedProcess[str]:
        return self.once("create-run", lambda: self.run(
            ["psyche-solana-client", "create-run",
             "--rpc", self.node.url,
             "--ws-rpc", self.node.ws_url,
             "--run-id", RUN_ID,
             "--name", NAME,
             "--description", DESCRIPTION],
            self.operator_env(),
        ))  # fmt: skip

    def update_config(self) -> subprocess.CompletedProcess[str]:
        self.create_run()
        return self.once("update-config", lambda: self.run(
            ["psyche-solana-client", "update-config",
             "--rpc", self.node.url,
             "--ws-rpc", self.node.ws_url,
             "--run-id", RUN_ID,
             "--config-path", str(TINY)],
            self.operator_env(),
        ))  # fmt: skip

    def authorization_create(self) -> subprocess.CompletedProcess[str]:
        self.create_run()
        line = "sh scripts/join-authorization-create.sh {rpc} grantor.json $GRANTEE_PUBKEY"
        env = self.env({"GRANTEE_PUBKEY": str(self.grantee.pubkey())}, client_on_path=False)
        return self.once("authorization-create", lambda: self.run(
            line.format(rpc=self.node.url), env
        ))  # fmt: skip

    def set_delegates(self) -> subprocess.CompletedProcess[str]:
        self.authorization_create()
        line = (
            "sh scripts/join-authorization-set-delegates.sh {rpc} $GRANTOR_PUBKEY grantee.json "
            "delegate*.json"
        )
        env = self.env({"GRANTOR_PUBKEY": str(self.owner.pubkey())}, client_on_path=False)
        return self.once("set-delegates", lambda: self.run(line.format(rpc=self.node.url), env))

    def resume(self) -> subprocess.CompletedProcess[str]:
        self.update_config()
        return self.once("set-paused", lambda: self.run(
            ["psyche-solana-client", "set-paused",
             "--rpc", self.node.url,
             "--ws-rpc", self.node.ws_url,
             "--run-id", RUN_ID,
             "resume"],
            self.operator_env(),
        ))  # fmt: skip

    # --- reading back (not documented commands, so run with flags, no placeholders) ----------

    def authorization(self) -> dict[str, Any]:
        res = self.run(
            ["psyche-solana-client", "join-authorization-read", "--rpc", self.node.url,
             "--join-authority", str(self.owner.pubkey()),
             "--authorizer", str(self.grantee.pubkey())],
            self.env(),
        )  # fmt: skip
        value: dict[str, Any] = json.loads(res.stdout)
        return value

    def dump(self, run_id: str = RUN_ID) -> dict[str, Any]:
        res = self.run(
            ["psyche-solana-client", "json-dump-run", "--rpc", self.node.url, "--run-id", run_id],
            self.env(),
        )
        value: dict[str, Any] = json.loads(res.stdout)
        return value

    def check_authorization(self, pubkey: Pubkey | None, **env: str) -> Any:
        """The joiner's documented check; RPC comes from their .env, as the docs say."""
        argv = ["psyche-solana-client", "check-authorization",
                "--run-id", RUN_ID,
                "--authorizer", str(self.grantee.pubkey())]  # fmt: skip
        if pubkey is not None:
            argv += ["--pubkey", str(pubkey)]
        return self.run(argv, self.env({"RPC": self.node.url, **env}), ok=False)


@pytest.fixture(scope="module")
def flow(local_svm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    yield Flow(local_svm, tmp_path_factory.mktemp("documented") / "user")


def test_create_run_with_name_and_description(flow: Flow) -> None:
    res = flow.create_run()
    out = json.loads(res.stdout)
    assert out["run_id"] == RUN_ID and out["signature"]
    # Through the node's loopback RPC the run is local: no public-run verification warning.
    assert out["local_run"] is True and "is public" not in res.stderr
    dump = flow.dump()
    assert dump["metadata"]["name"] == NAME and dump["metadata"]["description"] == DESCRIPTION
    if "update-config" not in flow.done:
        assert dump["run_state"] == "Uninitialized" and dump["coordinator"] is None


def test_update_config_with_the_tiny_run(flow: Flow) -> None:
    out = json.loads(flow.update_config().stdout)
    assert len(out["signatures"]) == 1
    dump = flow.dump()
    assert dump["coordinator"]["config"]["total_steps"] == 10
    # create-run stored the metadata in its own transaction; update-config kept it.
    assert dump["metadata"]["name"] == NAME and dump["metadata"]["description"] == DESCRIPTION


def test_update_config_with_the_documentations_sample_config(flow: Flow) -> None:
    run_id = "docs-sample"
    flow.run(
        ["psyche-solana-client", "create-run", "--rpc", flow.node.url, "--ws-rpc",
         flow.node.ws_url, "--run-id", run_id, "--name", "sample", "--description", "seeds"],
        flow.operator_env(),
    )  # fmt: skip
    res = flow.run(
        ["psyche-solana-client", "update-config",
         "--rpc", flow.node.url,
         "--ws-rpc", flow.node.ws_url,
         "--run-id", run_id,
         "--config-path", str(SAMPLE)],
        flow.operator_env(),
    )  # fmt: skip
    assert "config.rounds_per_epoch = 20 became config.epoch_time = 588" in res.stderr
    coord = flow.dump(run_id)["coordinator"]
    assert coord["config"]["epoch_time"] == 588
    llm = coord["model"]["LLM"]
    assert llm["cold_start_warmup_steps"] == 0 and llm["max_seq_len"] == 2048
    assert llm["checkpoint"] == {"Hub": {"repo_id": "emozilla/llama2-20m-init", "revision": None}}
    assert llm["data_location"]["Http"]["location"]["Gcp"]["bucket_name"] == (
        "nous-pretraining-public-us"
    )


def test_a_public_run_is_warned_until_its_config_verifies(flow: Flow) -> None:
    """Issue 39, item 3, on the real program: create-run --public-run warns that nothing is
    verified yet; update-config reads the stored local_run flag and warns about the tiny
    config's verification_percent = 0, not about the sample's 50. Exit codes stay 0."""
    run_id = "docs-public"
    common = ["--rpc", flow.node.url, "--ws-rpc", flow.node.ws_url, "--run-id", run_id]
    res = flow.run(
        ["psyche-solana-client", "create-run", *common, "--public-run"], flow.operator_env()
    )
    assert json.loads(res.stdout)["local_run"] is False
    (line,) = [ln for ln in res.stderr.splitlines() if "verif" in ln]
    assert line.startswith(f"warning: run {run_id!r} is public and no result is verified")
    update = ["psyche-solana-client", "update-config", *common, "--config-path"]
    res = flow.run([*update, str(TINY)], flow.operator_env())
    (line,) = [ln for ln in res.stderr.splitlines() if "public run" in ln]
    assert line.startswith(
        f"warning: {TINY}: config.verification_percent = 0 on a public run: no result is recomputed"
    ), line
    res = flow.run([*update, str(SAMPLE)], flow.operator_env())
    assert "public run" not in res.stderr, res.stderr
    assert flow.dump(run_id)["coordinator"]["config"]["verification_percent"] == 50


def test_join_authorization_create_script(flow: Flow) -> None:
    out = json.loads(flow.authorization_create().stdout)
    auth = flow.authorization()
    assert auth["address"] == out["authorization"]
    assert auth["grantor"] == str(flow.owner.pubkey())
    assert auth["grantee"] == str(flow.grantee.pubkey())
    assert auth["active"] is True and auth["scope"] == "CoordinatorJoinRun"


def test_join_authorization_set_delegates_script(flow: Flow) -> None:
    flow.set_delegates()
    auth = flow.authorization()
    # delegate*.json, expanded by the shell in name order.
    assert auth["delegates"] == [str(d.pubkey()) for d in flow.delegates]


def test_check_authorization_of_a_delegate(flow: Flow) -> None:
    flow.set_delegates()
    for d in flow.delegates:
        res = flow.check_authorization(d.pubkey())
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["can_join"] is True
    # "You can also pass the private key via RAW_WALLET_PRIVATE_KEY="$(cat …)" instead of --pubkey"
    key = (flow.work / "delegate2.json").read_text()
    res = flow.check_authorization(None, RAW_WALLET_PRIVATE_KEY=key)
    assert res.returncode == 0, res.stderr


def test_check_authorization_of_a_stranger_fails_clearly(flow: Flow) -> None:
    flow.set_delegates()
    for res in (
        flow.check_authorization(flow.stranger.pubkey()),
        flow.check_authorization(None, RAW_WALLET_PRIVATE_KEY=str(flow.stranger)),
    ):
        assert res.returncode == 1
        assert json.loads(res.stdout)["can_join"] is False
        assert res.stderr.startswith(
            f"error: {flow.stranger.pubkey()} may not join run {RUN_ID!r} through authorizer "
            f"{flow.grantee.pubkey()}: "
        ), res.stderr
        assert "is neither the grantee nor one of its delegates" in res.stderr


def test_a_joiners_quoted_env_file(flow: Flow) -> None:
    """docker --env-file passes values literally, quotes included: the client takes them."""
    flow.set_delegates()
    env_file = flow.work / ".env"
    env_file.write_text(
        f'RPC="{flow.node.url}"\n'
        f'WS_RPC="{flow.node.ws_url}"\n'
        f"RPC_2='{flow.node.url}'\n"
        f"WS_RPC_2='{flow.node.ws_url}'\n"
        f'RUN_ID="{RUN_ID}"\n'
        "NVIDIA_DRIVER_CAPABILITIES=all\n"
        f'AUTHORIZER="{flow.grantee.pubkey()}"\n'
    )
    docker_env: dict[str, str] = {}
    for line in env_file.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            docker_env[key] = value  # as docker does: no unquoting
    # -e RAW_WALLET_PRIVATE_KEY="$(cat delegate3.json)"
    docker_env["RAW_WALLET_PRIVATE_KEY"] = (flow.work / "delegate3.json").read_text()
    res = flow.run(["psyche-solana-client", "check-authorization"], flow.env(docker_env))
    assert json.loads(res.stdout)["can_join"] is True


def test_set_paused_resume_then_json_dump_run(flow: Flow) -> None:
    flow.resume()
    dump = flow.dump()
    assert dump["coordinator"]["run_state"] == "WaitingForMembers"  # unpaused: open to joiners
    assert dump["metadata"]["name"] == NAME
    assert dump["metadata"]["description"] == DESCRIPTION


def test_join_authorization_create_script_without_a_grantee_is_permissionless(flow: Flow) -> None:
    """The same documented line with $GRANTEE_PUBKEY empty: anyone may join the grantor's runs
    (the check then names no authorizer)."""
    flow.create_run()
    line = f"sh scripts/join-authorization-create.sh {flow.node.url} grantor.json $GRANTEE_PUBKEY"
    flow.run(line, flow.env({"GRANTEE_PUBKEY": ""}, client_on_path=False))
    res = flow.run(
        ["psyche-solana-client", "check-authorization", "--run-id", RUN_ID,
         "--pubkey", str(flow.stranger.pubkey())],
        flow.env({"RPC": flow.node.url}),
    )  # fmt: skip
    assert json.loads(res.stdout)["can_join"] is True

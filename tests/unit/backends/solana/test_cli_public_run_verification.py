"""Issue 39, item 3: a public run (``create-run --public-run``, or the default through a
non-local RPC) without verification is warned about on stderr, at ``create-run`` (a new run
verifies nothing until its config sets ``verification_percent``) and at ``update-config`` (a
DisTrO config with ``verification_percent = 0``; any SparseLoCo config, whose results nothing
verifies). A local run, as the tests and the local testnets create, gets no such line; a warning
never changes the exit code. Against the RPC test double with the real IDLs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from solders.keypair import Keypair

from psyche.protocol.run_file import load_run_config

from ...solana.idl_support import ROOT, needs_authorizer_idl, needs_coordinator_idl
from .test_cli_documented_flags import cli, decoded, node, serve_unconfigured_run
from .test_cli_e2e import Node

pytestmark = [needs_coordinator_idl, needs_authorizer_idl]
__all__ = ["node"]  # the fixture, imported for the tests below

DISTRO = ROOT / "config" / "tiny-solana" / "state.toml"
SPARSELOCO = ROOT / "config" / "tiny-solana-sparseloco" / "state.toml"
DOCS = 'docs/protocol.md, "Public runs and verification"'


def verification_lines(stderr: str) -> list[str]:
    """The stderr lines about a public run's verification."""
    return [ln for ln in stderr.splitlines() if "public run" in ln or "is public" in ln]


def with_vp(tmp_path: Path, source: Path, vp: int) -> Path:
    text = source.read_text()
    assert "verification_percent = 0\n" in text
    out = tmp_path / f"vp{vp}-{source.parent.name}.toml"
    out.write_text(text.replace("verification_percent = 0\n", f"verification_percent = {vp}\n"))
    return out


def test_create_run_public_warns_once_that_nothing_is_verified_yet(node: Node) -> None:
    res = cli(node, Keypair(), "create-run", "--run-id", "pub", "--public-run")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["local_run"] is False
    assert verification_lines(res.stderr) == [
        "warning: run 'pub' is public and no result is verified until its config sets "
        "config.verification_percent: give update-config a config with "
        "verification_percent = 50 (each client then spends about 7-10 % of its training "
        "compute recomputing sampled DisTrO results; 25 for SparseLoCo, whose results are "
        "audited instead) - " + DOCS
    ]
    assert len(node.double.transactions) == 1  # the warning sent nothing else


def test_create_run_public_by_default_off_a_local_rpc_warns_too(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The double listens on loopback; a cluster elsewhere makes the default public.
    from psyche.solana.programs import coordinator_commands

    monkeypatch.setattr(coordinator_commands, "default_local_run", lambda s: False)
    res = cli(node, Keypair(), "create-run", "--run-id", "pub")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["local_run"] is False
    (line,) = verification_lines(res.stderr)
    assert line.startswith("warning: run 'pub' is public and no result is verified")


@pytest.mark.parametrize("flag", ["--local-run", None])
def test_create_run_local_says_nothing_about_verification(node: Node, flag: str | None) -> None:
    args = ["create-run", "--run-id", "loc"] + ([flag] if flag else [])
    res = cli(node, Keypair(), *args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["local_run"] is True  # the double is on loopback
    assert res.stderr == ""


def update(node: Node, config: Path, *, local_run: bool) -> tuple[str, dict[str, object]]:
    """update-config of a never-configured run (as create-run leaves it) with ``config``: the
    stderr and the config sent, which the warnings never change."""
    wallet = Keypair()
    serve_unconfigured_run(node, wallet, "r1", local_run=local_run)
    res = cli(node, wallet, "update-config", "--run-id", "r1", "--config-path", str(config))
    assert res.exit_code == 0, res.output
    (tx,) = node.double.transactions
    ((_, name, args, _),) = decoded(tx)
    assert name == "update"
    return str(res.stderr), args["config"]


def test_update_config_public_distro_without_verification_warns(node: Node) -> None:
    stderr, sent = update(node, DISTRO, local_run=False)
    assert sent["verification_percent"] == 0
    assert verification_lines(stderr) == [
        f"warning: {DISTRO}: config.verification_percent = 0 on a public run: no result is "
        "recomputed, so a client that sends garbage (a flipped, random or made-up update) "
        "instead of its work has it applied and is paid in full; set it to 50: each client "
        "then spends about 7-10 % of its training compute recomputing sampled results, which "
        "ejects such a client (and one that trains on half its batch within 10 rounds with "
        "probability 0.93) - " + DOCS
    ]


def test_update_config_public_distro_with_verification_is_quiet(node: Node, tmp_path: Path) -> None:
    config = with_vp(tmp_path, DISTRO, 25)
    stderr, sent = update(node, config, local_run=False)
    assert sent["verification_percent"] == 25
    assert verification_lines(stderr) == []


def test_update_config_public_sparseloco_warns_without_verification(
    node: Node, tmp_path: Path
) -> None:
    config = with_vp(tmp_path, SPARSELOCO, 0)
    stderr, sent = update(node, config, local_run=False)
    assert sent["verification_percent"] == 0
    assert verification_lines(stderr) == [
        f"warning: {config}: config.verification_percent = 0 on a public run: no SparseLoCo "
        "result is audited, so a client that sends garbage or an update from part of its batch "
        "has it applied and is paid in full; set it to 25: each client then replays one inner "
        "step of each result it audits, fetching 32-44 bytes per parameter of its trainer's "
        'committed states, which ejects such a client - docs/protocol.md, "SparseLoCo: the '
        'inner-step audit"'
    ]


def test_update_config_public_sparseloco_with_verification_is_quiet(
    node: Node, tmp_path: Path
) -> None:
    config = with_vp(tmp_path, SPARSELOCO, 25)
    stderr, sent = update(node, config, local_run=False)
    assert sent["verification_percent"] == 25
    assert verification_lines(stderr) == []


@pytest.mark.parametrize(("source", "vp"), [(DISTRO, 0), (DISTRO, 25), (SPARSELOCO, 0)])
def test_update_config_local_adds_no_warning(
    node: Node, tmp_path: Path, source: Path, vp: int
) -> None:
    config = with_vp(tmp_path, source, vp)
    stderr, _ = update(node, config, local_run=True)
    # Only what validate-config would say about the file (its advisories), nothing more.
    expected = [f"warning: {config}: {w}" for w in load_run_config(config).advisories()]
    assert stderr.splitlines() == expected


def test_update_config_without_a_config_says_nothing_of_verification(node: Node) -> None:
    wallet = Keypair()
    serve_unconfigured_run(node, wallet, "r1", local_run=False)
    res = cli(node, wallet, "update-config", "--run-id", "r1", "--name", "renamed")
    assert res.exit_code == 0, res.output
    assert res.stderr == ""

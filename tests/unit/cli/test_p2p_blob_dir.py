"""``--p2p-blob-dir`` (``P2P_BLOB_DIR``): where the P2P host keeps its blobs, and the default.

A container's ``/dev/shm`` is 64 MiB unless ``docker run`` is given ``--shm-size``: too small
for the pieces of a 20 M-parameter model, which then failed to write. So the default passes over
a ``/dev/shm`` with less than 1 GiB free, and the flag names another place.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from psyche.cli.client import client
from psyche.cli.solana import solana
from psyche.p2p.node import SHM_MIN_FREE, P2PNode, default_blob_root
from psyche.protocol.identity import SecretKey

CENTRALIZED_TRAIN = ["train", "--run-id", "r", "--server-addr", "127.0.0.1:1"]


def _params(group: click.Group, args: list[str], env: dict[str, str] | None = None) -> dict:
    cmd = group.commands["train"]
    runner = CliRunner(env=env)
    with runner.isolation():
        ctx = cmd.make_context("train", list(args[1:]), resilient_parsing=False)
    return dict(ctx.params)


@pytest.mark.parametrize("group", [client, solana], ids=["centralized", "solana"])
def test_the_flag_and_its_environment_twin_name_an_existing_folder(
    group: click.Group, tmp_path: Path
) -> None:
    base = CENTRALIZED_TRAIN if group is client else ["train", "--run-id", "r"]
    assert _params(group, base)["p2p_blob_dir"] is None
    assert _params(group, [*base, "--p2p-blob-dir", str(tmp_path)])["p2p_blob_dir"] == tmp_path
    by_env = _params(group, base, env={"P2P_BLOB_DIR": str(tmp_path)})
    assert by_env["p2p_blob_dir"] == tmp_path


def test_a_missing_folder_is_made(tmp_path: Path) -> None:
    where = tmp_path / "a" / "blobs"
    assert (
        _params(client, [*CENTRALIZED_TRAIN, "--p2p-blob-dir", str(where)])["p2p_blob_dir"] == where
    )
    assert where.is_dir()


@pytest.mark.parametrize("via", ["flag", "env"])
def test_a_path_that_cannot_hold_blobs_is_one_line_and_exit_2(via: str, tmp_path: Path) -> None:
    where = tmp_path / "blobs"
    where.write_text("x")  # a file in the way
    args, env = [*CENTRALIZED_TRAIN], {"P2P_BLOB_DIR": str(where)}
    if via == "flag":
        args, env = [*args, "--p2p-blob-dir", str(where)], {}
    res = CliRunner().invoke(client, args, env=env)
    assert res.exit_code == 2, res.output
    flag = "--p2p-blob-dir" + ("/P2P_BLOB_DIR" if via == "env" else "")
    assert res.output.strip().splitlines() == [f"error: {flag} {where}: File exists"]


def test_dev_shm_is_the_default_only_with_room(tmp_path: Path) -> None:
    assert default_blob_root(str(tmp_path), min_free=0) == str(tmp_path)
    assert default_blob_root(str(tmp_path), min_free=1 << 62) is None  # too small: temp dir
    assert default_blob_root(str(tmp_path / "missing")) is None
    assert SHM_MIN_FREE == 1 << 30


def test_a_node_keeps_its_blobs_in_a_folder_of_its_own_under_the_root(tmp_path: Path) -> None:
    async def main() -> Path:
        node = P2PNode()
        await node.start(SecretKey.generate(), run_id="blob-root", blob_root=tmp_path)
        try:
            assert node.blob_dir.parent == tmp_path
            assert node.blob_dir.name.startswith("psyche-p2p-")
            assert node.spool_dir == node.blob_dir
            node.serve(b"x" * 100)
            assert len(list(node.blob_dir.iterdir())) == 1
        finally:
            await node.stop()
        return node.blob_dir

    gone = asyncio.run(main())
    assert not gone.exists() and list(tmp_path.iterdir()) == []

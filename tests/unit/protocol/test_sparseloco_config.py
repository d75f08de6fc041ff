"""``[model.LLM.optimizer.SparseLoCo]`` (issue 30): validate-config names the bad key on one
line, and the variant's borsh bytes through the committed IDL are the program's (tag 3, fields in
the Rust order, f32/u8/u16 little-endian). The accept/refuse verdicts of both coordinators are
pinned by tests/vectors/config/validity.json."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from psyche.cli.server import server
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.protocol.strict_obj import ConfigError, to_obj

ROOT = Path(__file__).resolve().parents[3]
TINY = (ROOT / "config" / "tiny" / "state.toml").read_text()
DISTRO = """[model.LLM.optimizer.Distro]
clip_grad_norm = 1.0
compression_decay = 0.999
compression_chunk = 64
compression_topk = 8
quantize_1bit = true
"""

SPARSELOCO = """[model.LLM.optimizer.SparseLoCo]
betas = [0.9, 0.95]
weight_decay = 0.0
eps = 1e-8
clip_grad_norm = 1.0
inner_steps = 4
outer_lr = 0.7
outer_momentum = 0.0
topk_chunk = 64
topk = 2
value_bits = 2
error_decay = 0.95
"""


def opt(**kw: object) -> SparseLoCoOptimizer:
    base: dict[str, object] = dict(
        betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8, clip_grad_norm=1.0, inner_steps=4,
        outer_lr=0.7, outer_momentum=0.0, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
    )  # fmt: skip
    return SparseLoCoOptimizer(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("inner_steps = 4", "inner_steps = 65", "inner_steps (65) must be in 1..=64"),
        ("topk = 2", "topk = 65", "topk (65) must be in 1..=topk_chunk (64)"),
        ("value_bits = 2", "value_bits = 3", "value_bits (3) must be 1 or 2"),
        ("error_decay = 0.95", "error_decay = 0.0", "error_decay (0.0) must be a finite number in"),
        ("outer_momentum = 0.0", "outer_momentum = 1.0", "outer_momentum (1.0) must be a finite"),
        ("inner_steps = 4", "inner_steps = 256", "inner_steps: 256 is out of range"),
    ],
)  # fmt: skip
def test_validate_config_names_the_bad_value(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert TINY.count(DISTRO) == 1
    assert SPARSELOCO.count(old) == 1
    path = tmp_path / "state.toml"
    path.write_text(TINY.replace(DISTRO, SPARSELOCO.replace(old, new)))
    result = CliRunner().invoke(server, ["validate-config", "--state", str(path)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("invalid config: model.LLM.optimizer.SparseLoCo."), lines[0]
    assert message in lines[0], lines[0]


def test_first_broken_rule_is_reported() -> None:
    with pytest.raises(ConfigError, match=r"SparseLoCo\.inner_steps"):
        opt(inner_steps=0, value_bits=3).check()
    opt().check()


def test_idl_encoding_is_the_programs() -> None:
    from psyche.solana.idl import IdlCodec

    idl = IdlCodec.load(ROOT / "idl" / "psyche_coordinator.json")
    o = opt(clip_grad_norm=None)
    obj = to_obj(o)
    data = idl.encode("OptimizerDefinition", obj)
    want = (
        bytes([3])
        + struct.pack("<ffff", 0.9, 0.95, 0.0, 1e-8)
        + bytes([0, 4])
        + struct.pack("<ff", 0.7, 0.0)
        + struct.pack("<HHB", 64, 2, 2)
        + struct.pack("<f", 0.95)
    )
    assert data == want
    back = idl.decode("OptimizerDefinition", data)
    assert back["SparseLoCo"]["inner_steps"] == 4 and back["SparseLoCo"]["topk"] == 2

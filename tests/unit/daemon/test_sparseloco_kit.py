"""The daemon's side of SparseLoCo (issue 30 item 2): the result format the round engine checks
peers' results with, the optimizer state that rides with the model, and the client's config
support. The runs themselves: tests/e2e (both local testnets with config/tiny*-sparseloco)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from psyche.checkpoint.manifest import SHARED_FILES
from psyche.daemon.kit import ModelKit
from psyche.daemon.loader import _load_optimizer_state
from psyche.daemon.rounds import decode_verified
from psyche.distro.result_format import SparseLoCoFormat
from psyche.protocol.model import LLM
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.protocol.run_file import load_run_config
from psyche.training import init_model, llama_config
from psyche.training.errors import ModelLoadError
from psyche.training.sparseloco_trainer import OPTIMIZER_STATE_FILE, SparseLoCoTrainer

from ..training.helpers import TINY, batch_of
from .copy_helpers import copied, held_in_round

CONFIG = Path(__file__).resolve().parents[3] / "config" / "tiny-sparseloco" / "state.toml"


def _optimizer(**kw: object) -> SparseLoCoOptimizer:
    rc = load_run_config(CONFIG)
    assert isinstance(rc.model, LLM) and isinstance(rc.model.optimizer, SparseLoCoOptimizer)
    return dataclasses.replace(rc.model.optimizer, **kw)  # type: ignore[arg-type]


def _trainer(**kw: object) -> SparseLoCoTrainer:
    model = init_model(llama_config(TINY), seed=1)
    return SparseLoCoTrainer(model, _optimizer(**kw), micro_batch_size=2)


def test_the_shipped_config_is_one_this_client_runs() -> None:
    rc = load_run_config(CONFIG)
    assert isinstance(rc.model, LLM)
    rc.model.check()
    rc.model.check_client_support()  # no longer "multi-client runs need Distro"


def test_a_relabelled_copy_has_its_originals_fingerprint_and_is_refused() -> None:
    t = _trainer()
    fmt = t.format
    assert isinstance(fmt, SparseLoCoFormat) and fmt.max_bytes == t.payload_bytes
    a = t.train_round(batch_of(1, samples=4), step=3, lr=4e-3).payload
    b = t.train_round(batch_of(2, samples=4), step=3, lr=4e-3).payload
    original = fmt.decode(a)
    relabelled = fmt.decode(a)
    relabelled = dataclasses.replace(relabelled, step=4, trainer_nonce=99)
    assert fmt.fingerprint(relabelled) == fmt.fingerprint(original)
    assert fmt.fingerprint(fmt.decode(b)) != fmt.fingerprint(original)
    state, held = held_in_round(a, original, fmt, step=3)
    found = copied(fmt.fingerprint(relabelled), [state], relabelled, fmt)
    assert found is held
    assert copied(fmt.fingerprint(fmt.decode(b)), [state], fmt.decode(b), fmt) is None
    # A result must match its commitment and decode strictly under the run's format.
    assert decode_verified(held, 3, fmt) is not None
    assert decode_verified(dataclasses.replace(held, payload=a[:-1]), 3, fmt) is None
    assert decode_verified(held, 4, fmt) is None  # committed for another step


def test_the_kit_carries_the_outer_momentum_with_the_model() -> None:
    assert OPTIMIZER_STATE_FILE in SHARED_FILES  # checkpoints and P2P manifests carry it
    t = _trainer()
    out = t.train_round(batch_of(3, samples=4), step=1, lr=4e-3)
    t.apply_round([out.payload])
    kit = ModelKit(trainer=t, format=t.format, data=None, files={"config.json": b"{}"})  # type: ignore[arg-type]
    files = kit.shared_files()
    assert set(files) == {"config.json", OPTIMIZER_STATE_FILE}
    joiner = _trainer()
    got = dict(files)
    _load_optimizer_state(joiner, got)
    assert OPTIMIZER_STATE_FILE not in got  # consumed: the kit makes a fresh one when serving
    assert joiner.state_file() == t.state_file()
    # Without momentum there is no state to carry.
    plain = _trainer(outer_momentum=0.0)
    kit = ModelKit(trainer=plain, format=plain.format, data=None, files={})  # type: ignore[arg-type]
    assert kit.shared_files() == {}


def test_a_state_file_that_does_not_fit_the_run_is_one_clear_error() -> None:
    t = _trainer()
    with pytest.raises(ModelLoadError, match="optimizer state does not fit this run"):
        _load_optimizer_state(t, {OPTIMIZER_STATE_FILE: b"\x00" * 16})
    other = _trainer(outer_momentum=0.0)
    _load_optimizer_state(other, {})  # nothing came: nothing to load, no error


def test_verification_with_sparseloco_is_valid_and_no_longer_a_warning() -> None:
    rc = load_run_config(CONFIG)
    assert not any("verification_percent" in a for a in rc.advisories())
    rc = dataclasses.replace(rc, config=dataclasses.replace(rc.config, verification_percent=25))
    rc.check()  # valid, and its results are audited (docs/protocol.md, "SparseLoCo: ...")
    assert not any("verification_percent" in a for a in rc.advisories())


def test_the_kit_follows_verification_with_the_audit_trailer() -> None:
    t = _trainer()
    kit = ModelKit(trainer=t, format=t.format, data=None)  # type: ignore[arg-type]
    kit.follow_verification(25)
    assert t.audit and isinstance(kit.format, SparseLoCoFormat)
    assert kit.format.audit_steps == t.config.inner_steps
    assert kit.format.max_bytes > t.payload_bytes
    kit.follow_verification(0)
    assert not t.audit and kit.format.max_bytes == t.payload_bytes

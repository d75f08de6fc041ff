"""docs/architecture.md's layer and step pictures are what scripts/arch_diagrams.py generates:
the layer picture from tests/unit/test_layering.py's table, so it cannot drift from the rule."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "arch_diagrams", ROOT / "scripts" / "arch_diagrams.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pictures_in_the_doc_are_current() -> None:
    script = _script()
    assert script.stale(script.DOC.read_text(encoding="utf-8")) == []


def test_a_changed_rule_makes_the_layer_picture_stale() -> None:
    script = _script()
    text = script.DOC.read_text(encoding="utf-8")
    tampered = text.replace("    training --> distro\n", "")
    assert tampered != text
    assert script.stale(tampered) == ["layers"]
    assert script.main(["--check"]) == 0

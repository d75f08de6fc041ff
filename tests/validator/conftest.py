"""The real validator's tests (``scripts/test-validator.sh``): ``validator`` is agave's
``solana-test-validator`` with the four SBF programs at their ids, ``local_svm`` the project's
local SVM with the same programs, both on free loopback ports, one of each per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from psyche.localsvm import LocalSvmThread, deploy_programs
from psyche.testnet.validator import ValidatorProcess, start_validator

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def validator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValidatorProcess]:
    programs = {str(k): v for k, v in deploy_programs(ROOT / "target" / "deploy").items()}
    with start_validator(tmp_path_factory.mktemp("validator"), programs) as node:
        yield node


@pytest.fixture(scope="module")
def local_svm() -> Iterator[LocalSvmThread]:
    with LocalSvmThread(deploy_programs(ROOT / "target" / "deploy"), rpc_port=0) as node:
        yield node


# The e2e tests' tiny model and token data (made here, once per session).
from e2e.conftest import local_inputs  # noqa: E402,F401

"""The image's files, checked without a Docker engine: the Dockerfile (hadolint, base image, entry
point, environment, the torch swap), .env.example against the client's own flags,
docker-compose.yml, .dockerignore and docs/docker.md."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .support import (
    COMPOSE,
    DOCKERFILE,
    DOCKERIGNORE,
    DOCS,
    ENTRYPOINT,
    ENV_EXAMPLE,
    ROOT,
    active_names,
    commented_names,
    dockerfile_args,
    dockerfile_instructions,
    image_env,
)


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


# --- Dockerfile ----------------------------------------------------------------------------------


@pytest.mark.skipif(_hadolint() is None, reason="hadolint not installed (dev dependency)")
def test_hadolint_passes() -> None:
    hadolint = _hadolint()
    assert hadolint is not None
    out = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ignored_hadolint_rules_have_a_reason() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            assert i > 0 and lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], (
                f"line {i + 1}: explain the ignored rule in the comment above it"
            )


def test_default_base_is_cuda_12_and_torch_matches() -> None:
    args = dockerfile_args()
    assert re.fullmatch(r"nvidia/cuda:12\.\d+\.\d+-base-ubuntu\d\d\.04", args["BASE_IMAGE"])
    major, minor = args["TORCH_CUDA"].split(".")
    assert major == "12"
    assert args["TORCH_INDEX"] == f"https://download.pytorch.org/whl/cu{major}{minor}"
    froms = [rest for word, rest in dockerfile_instructions() if word == "FROM"]
    assert froms[-1] == "${BASE_IMAGE}", "the final stage is the CUDA base"


def test_torch_comes_from_the_cuda_index_and_the_rest_from_the_lock() -> None:
    """The lines the build drops from requirements.lock are exactly torch and its CUDA-13 wheels;
    torch is then installed at the lock's version."""
    text = DOCKERFILE.read_text()
    [pattern] = re.findall(r"grep -v -E '([^']+)' requirements\.lock", text)
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    pins = [line for line in lock if re.match(r"^[A-Za-z0-9]", line)]
    dropped = [line.split("==")[0] for line in pins if re.search(pattern, line)]
    kept = [line.split("==")[0] for line in pins if not re.search(pattern, line)]
    assert "torch" in dropped
    cuda_specific = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|.*-cu1\d)$")
    assert all(cuda_specific.match(name) for name in dropped), dropped
    assert not [name for name in kept if cuda_specific.match(name)], "CUDA wheels left in"
    assert re.search(r'--index "\$\{TORCH_INDEX\}"', text)
    assert '"torch==${torch_version}"' in text
    assert "sed -n 's/^torch==//p' requirements.lock" in text
    assert "--no-deps -r /tmp/no-torch.txt" in text
    assert "uv pip check" in text


def test_entrypoint_is_the_script_and_extra_args_go_to_train() -> None:
    instructions = dockerfile_instructions()
    [entrypoint] = [json.loads(rest) for word, rest in instructions if word == "ENTRYPOINT"]
    assert entrypoint == ["/usr/local/bin/psyche-entrypoint"]
    copies = [rest for word, rest in instructions if word == "COPY"]
    assert "--chmod=0755 docker/entrypoint.sh /usr/local/bin/psyche-entrypoint" in copies
    # No CMD: `docker run IMAGE --flag …` hands `--flag …` to the entrypoint, which passes it on
    # to `train`.
    assert not [word for word, _ in instructions if word == "CMD"]
    assert os.access(ENTRYPOINT, os.X_OK)


def test_image_environment() -> None:
    env = image_env()
    assert env["PSYCHE_DEVICE"] == "cuda"
    assert env["PSYCHE_TORCH_CUDA"] == dockerfile_args()["TORCH_CUDA"]
    assert env["PSYCHE_IDL_DIR"] == "/app/idl"
    assert env["NVIDIA_DISABLE_REQUIRE"] == "true"
    path = [rest for word, rest in dockerfile_instructions() if word == "ENV" and "PATH=" in rest]
    assert path and "PATH=/app/.venv/bin:$PATH" in path[-1]


# --- .env.example --------------------------------------------------------------------------------


def _train_envvars() -> set[str]:
    from psyche.cli.solana import solana
    from psyche.cli.solana_options import DIRECT_ENV

    names: set[str] = set(DIRECT_ENV)
    for param in solana.commands["train"].params:
        if isinstance(param.envvar, str):
            names.add(param.envvar)
        elif param.envvar:
            names.update(param.envvar)
    return names


def test_env_example_never_overrides_the_image_device() -> None:
    text = ENV_EXAMPLE.read_text()
    assert "PSYCHE_DEVICE" not in active_names(text)
    assert "PSYCHE_DEVICE" in commented_names(text), "keep it documented, commented out"


def test_env_example_lists_every_train_envvar() -> None:
    """Computed from the click command at test time: a new train flag needs its twin here."""
    text = ENV_EXAMPLE.read_text()
    listed = set(active_names(text)) | set(commented_names(text))
    names = _train_envvars()
    assert {"RPC", "RUN_ID", "DATA_PARALLELISM", "RAW_WALLET_PRIVATE_KEY"} <= names
    assert not names - listed, f"missing from .env.example: {sorted(names - listed)}"


def test_env_example_joiner_section_comes_first() -> None:
    text = ENV_EXAMPLE.read_text()
    joiner, _, others = text.partition("# Other tools")
    assert others, "the file has a joiner's part and an 'Other tools' part"
    required = [
        "RPC",
        "WS_RPC",
        "RPC_2",
        "WS_RPC_2",
        "RUN_ID",
        "AUTHORIZER",
        "RAW_WALLET_PRIVATE_KEY",
        "NVIDIA_DRIVER_CAPABILITIES",
        "DATA_PARALLELISM",
        "TENSOR_PARALLELISM",
        "MICRO_BATCH_SIZE",
    ]
    assert set(required) <= set(active_names(joiner))
    assert re.search(r"^NVIDIA_DRIVER_CAPABILITIES=all$", joiner, re.M)
    names = active_names(text)
    assert len(names) == len(set(names)), "a variable set twice: the last line wins silently"


def test_env_example_documents_the_entrypoint_settings() -> None:
    text = ENV_EXAMPLE.read_text()
    for name in _entrypoint_settings() - {"PSYCHE_CLIENT_CMD", "PSYCHE_SKIP_CHECKS"}:
        assert name in commented_names(text), name


# --- docker-compose.yml --------------------------------------------------------------------------


def _entrypoint_settings() -> set[str]:
    """The PSYCHE_* variables the entrypoint reads for itself (not the client's)."""
    names = set(re.findall(r"\b(PSYCHE_[A-Z_]+)\b", ENTRYPOINT.read_text()))
    return names - {"PSYCHE_DEVICE", "PSYCHE_TORCH_CUDA"}


def _compose() -> dict:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def test_compose_parses_and_runs_the_client_as_documented() -> None:
    client = _compose()["services"]["client"]
    assert client["env_file"] in (".env", [".env"])
    assert client["network_mode"] == "host"
    [device] = client["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    assert "RAW_WALLET_PRIVATE_KEY" in client["environment"]


def test_compose_does_not_restart_on_top_of_the_entrypoint() -> None:
    # "no" must be quoted in YAML, else it is the boolean false.
    restart = _compose()["services"]["client"]["restart"]
    assert restart == "no" or re.fullmatch(r"on-failure:\d+", restart), restart


def test_compose_build_args_default_to_the_dockerfile() -> None:
    args = _compose()["services"]["client"]["build"]["args"]
    defaults = dockerfile_args()
    for name in ("BASE_IMAGE", "TORCH_CUDA", "TORCH_INDEX"):
        assert args[name] == f"${{{name}:-{defaults[name]}}}", name


def test_compose_keeps_checkpoints_and_the_hf_cache_in_volumes() -> None:
    data = _compose()
    client = data["services"]["client"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in client["volumes"]}
    assert client["environment"]["CHECKPOINT_DIR"].endswith(":-/data/checkpoints}")
    assert client["environment"]["HF_HOME"] == "/data/hf" == image_env()["HF_HOME"]
    assert set(mounts) == {"/data/checkpoints", "/data/hf"}
    assert set(mounts.values()) <= set(data["volumes"])


# --- .dockerignore and the docs ------------------------------------------------------------------


def test_dockerignore_keeps_the_context_small_and_secret_free() -> None:
    patterns = {
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "target", "runs", ".env"} <= patterns
    assert "**/__pycache__" in patterns
    for needed in ("docker", "client", "idl", "config", "requirements.lock", "README.md"):
        assert needed not in patterns


def test_docs_cover_the_image() -> None:
    text = DOCS.read_text()
    for name in _entrypoint_settings():
        assert name in text, name
    for needed in (
        "docker run -d --env-file .env",
        "docker compose up",
        "TORCH_INDEX",
        "BASE_IMAGE",
        "exit code",
        "64",
        "10",
        "DATA_PARALLELISM × TENSOR_PARALLELISM",
        "525.60.13",
    ):
        assert needed in text, needed


@pytest.mark.parametrize("torch_index", ["https://download.pytorch.org/whl/cu128", "pypi"])
def test_dependency_step_runs_as_intended(tmp_path: Path, torch_index: str) -> None:
    """The Dockerfile's dependency RUN step, executed by the image's SHELL with a fake `uv` that
    records its calls (and the requirement files it is given)."""
    [step] = [
        rest for word, rest in dockerfile_instructions() if word == "RUN" and "uv venv" in rest
    ]
    [shell] = [json.loads(rest) for word, rest in dockerfile_instructions() if word == "SHELL"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    fake = bin_dir / "uv"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "uv $*" >> {calls}\n'
        'prev=""; for a in "$@"; do\n'
        f'  if [[ $prev == -r ]]; then cp "$a" {tmp_path}/installed-from-$(basename "$a"); fi\n'
        "  prev=$a\ndone\n"
    )
    fake.chmod(0o755)
    work = tmp_path / "app"
    work.mkdir()
    shutil.copy(ROOT / "requirements.lock", work / "requirements.lock")
    step = step.replace("/tmp/no-torch.txt", str(tmp_path / "no-torch.txt"))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TORCH_INDEX": torch_index}
    subprocess.run([*shell, step], cwd=work, env=env, check=True)

    lock = (ROOT / "requirements.lock").read_text()
    [version] = re.findall(r"^torch==(\S+)$", lock, re.M)
    lines = calls.read_text().splitlines()
    assert lines[:2] == ["uv python install 3.11", "uv venv --python 3.11 /app/.venv"]
    if torch_index == "pypi":
        assert lines[2:] == ["uv pip install --python /app/.venv/bin/python -r requirements.lock"]
        assert (tmp_path / "installed-from-requirements.lock").read_text() == lock
        return
    assert lines[2:] == [
        f"uv pip install --python /app/.venv/bin/python --no-deps -r {tmp_path}/no-torch.txt",
        f"uv pip install --python /app/.venv/bin/python --index {torch_index} "
        f"--default-index https://pypi.org/simple torch=={version}",
    ]
    installed = (tmp_path / "installed-from-no-torch.txt").read_text()
    assert not re.search(r"^(torch|triton|nvidia-|cuda-)", installed, re.M)
    assert re.search(r"^sympy==", installed, re.M), "torch's plain dependencies stay pinned"
    assert not (tmp_path / "no-torch.txt").exists(), "the filtered lock is removed"

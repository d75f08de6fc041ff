"""How each documented command is run by ``tests/docs``: the scene that runs it, or why it cannot
run on this machine.

``SCENES`` maps a scene (one test of ``test_documented_commands.py`` or
``test_solana_documented.py``) to the documented commands it runs, verbatim, in the order it runs
them; ``CANNOT_RUN_HERE`` names each command this machine cannot run and what it lacks;
``RUN_BY_CI`` the commands that are CI's own stages. ``test_every_documented_command_is_covered``
fails on a documented command in none of them, and on an entry no document shows any more.
A ``just RECIPE`` is covered by any scene command that calls the recipe.
"""

from __future__ import annotations

from .catalog_solana import SOLANA_SCENES

SCENES: dict[str, list[str]] = {
    "quick start": [
        "bash scripts/run.sh",
        # docs/explorer.md: the run just made, reopened from its database alone (read-only).
        "psyche explorer serve --database runs/tiny-testnet/explorer.sqlite",
        "bash scripts/solana-testnet.sh",
    ],
    "pieces by hand": [
        ".venv/bin/psyche-centralized-server validate-config --state config/tiny/state.toml"
        " --data-config config/tiny/data.toml",
        ".venv/bin/psyche-centralized-server run --state config/tiny/state.toml"
        " --data-config config/tiny/data.toml --server-port 20000",
        "openssl rand 32 > client1.key",
        ".venv/bin/psyche-centralized-client train --run-id tiny --server-addr 127.0.0.1:20000"
        " --identity-secret-key-path client1.key",
        ".venv/bin/psyche-centralized-client show-identity --identity-secret-key-path client1.key",
        ".venv/bin/psyche evals make-task runs/evals/alphabet",
        ".venv/bin/psyche-centralized-client train --run-id tiny --server-addr 127.0.0.1:20000"
        " --data-parallelism 2 --eval-tasks runs/evals/alphabet --wandb-project psyche-local"
        " --write-log runs/client.log",
        ".venv/bin/psyche model init --preset tiny --out runs/model",
        ".venv/bin/psyche data synth --out runs/text --tokens 300000",
        ".venv/bin/psyche data prepare --text runs/text --tokenizer byte --out runs/data"
        " --seq-len 64",
        ".venv/bin/psyche data serve --data-config runs/data/data.toml --port 20001",
        ".venv/bin/psyche evals run --model runs/model --tasks runs/evals/alphabet --max-docs 32",
        ".venv/bin/psyche demo",
    ],
    "solana local testnet": [
        "psyche-solana-local-testnet start --explorer 8081",
    ],
    "just recipes": [
        "just default",
        "just local-testnet --num-clients 3 --config-path ./config/tiny",
        "CONFIG_PATH=config/tiny-solana-quick just setup-solana-localnet-test-run run_id=try"
        " --num-clients 1 --joiners 1 --rpc-port 8899",
        "RPC=http://127.0.0.1:8899 WALLET_FILE=runs/try-testnet/keys/joiner1.json"
        " AUTHORIZER=$GRANTEE just start-training-localnet-client run_id=try",
        "psyche explorer cost --rounds 200 --rpc http://127.0.0.1:8899 --run-id try --seconds 10",
        "just fmt",
    ],
    "explorer and local SVM": [
        "psyche explorer serve --centralized http://127.0.0.1:20002",
        "psyche explorer cost --rounds 1000",
        "psyche-local-svm run",
        "psyche-local-svm run --rpc-port 0 --ready-file /tmp/svm.json",
        'psyche-local-svm run --rpc-port 0 --airdrop "$PUBKEY=1000000000"',
        'psyche-local-svm run --rpc-port 0 --program "$PROGRAM_ID=target/deploy/'
        'psyche_coordinator.so" --deploy-dir target/deploy',
        "cp .env.example .env",
    ],
    **SOLANA_SCENES,
}

NO_DOCKER = (
    "needs a Docker daemon (none runs here; the image's entry point and env checks are"
    " tests/unit/docker's)"
)
CANNOT_RUN_HERE: dict[str, str] = {
    'docker run -d --env-file .env -e RAW_WALLET_PRIVATE_KEY="$(cat key.json)" --gpus all'
    " --network host psyche-client": NO_DOCKER + " and a GPU",
    "docker build -t psyche-client .": NO_DOCKER + ", and the base image's registry",
    "docker build -t psyche-client:cuda13"
    " --build-arg BASE_IMAGE=nvidia/cuda:13.0.0-base-ubuntu24.04 --build-arg TORCH_CUDA=13.0"
    " --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu130 .": (
        NO_DOCKER + ", the base image's registry and the CUDA 13 wheel index"
    ),
    "docker logs -f <container>": NO_DOCKER,
    'RAW_WALLET_PRIVATE_KEY="$(cat key.json)" docker compose up -d --build': NO_DOCKER,
    "docker compose logs -f client": NO_DOCKER,
    "docker compose down": NO_DOCKER,
    "psyche explorer serve --rpc https://api.devnet.solana.com --run-id my-run --pool 7 --database"
    " postgresql://explorer:secret@db-host/explorer --port 8080": (
        "needs the internet (Solana devnet) and a PostgreSQL server; the same command against a"
        " local SVM is tests/integration/explorer's, PostgreSQL URLs are parsed by its unit tests"
    ),
}

RUN_BY_CI: dict[str, str] = {
    "bash scripts/test.sh": "is CI itself: .ci/run runs exactly this, and this test inside it",
    "just check": (
        "is CI's lint stage: scripts/test.sh runs the same ruff, ruff format, mypy, cargo fmt and"
        " clippy checks on every run (test_just_check_is_ci_lint_stage compares them)"
    ),
}

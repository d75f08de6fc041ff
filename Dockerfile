# psyche client image: `psyche-solana-client train` on a CUDA machine.
#
#   docker build -t psyche-client .
#   docker run --gpus all --env-file .env \
#     -v "$HOME/.config/solana/id.json:/secrets/wallet.json:ro" \
#     -e WALLET_PRIVATE_KEY_PATH=/secrets/wallet.json psyche-client
#
# Configuration comes from the environment (.env.example lists every variable: RPC, WS_RPC,
# RUN_ID, AUTHORIZER, CLIENT_VERSION, MICRO_BATCH_SIZE, ...); extra `docker run` arguments are
# passed to `train`. The PyTorch wheels pinned in requirements.lock bring their own CUDA
# libraries, so the base only has to be a CUDA image matching the host driver (CUDA 13 here).
ARG BASE_IMAGE=nvidia/cuda:13.0.0-base-ubuntu24.04
FROM ghcr.io/astral-sh/uv:0.13.9 AS uv
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_NO_CACHE=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=uv /uv /usr/local/bin/uv

WORKDIR /app
# Dependencies first (the largest, least often changed layer), from the exact lock.
COPY requirements.lock ./
RUN uv python install 3.11 \
    && uv venv --python 3.11 /app/.venv \
    && uv pip install --python /app/.venv/bin/python -r requirements.lock
# Then the package itself, the IDL it reads the programs' layouts from, and the example configs.
COPY pyproject.toml README.md ./
COPY client ./client
COPY idl ./idl
COPY config ./config
RUN uv pip install --python /app/.venv/bin/python --no-deps .

ENV PATH=/app/.venv/bin:$PATH \
    PSYCHE_IDL_DIR=/app/idl \
    PSYCHE_DEVICE=cuda
ENTRYPOINT ["psyche-solana-client", "train"]

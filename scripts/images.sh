#!/usr/bin/env bash
# `make images`: build the application's cpu image here, with Debian's podman (no Docker engine,
# no registry), and check as much of the gpu image as a machine without CUDA can: that its pinned
# tree (requirements-gpu.lock) resolves from PyPI with the project's gpu extra. What this machine
# needs is installed on the way: podman, buildah, runc, debootstrap. The base image is
# PYTHON_IMAGE; unset, a Debian bookworm base is made with debootstrap (once; about two minutes)
# and Python 3.11 is added to it.
#
#   scripts/images.sh [all]           # localhost/durable-rag:cpu, then the gpu check
#   scripts/images.sh cpu             # the cpu image only (what tests/test_images.py runs)
#   scripts/images.sh gpu-check       # the gpu tree resolves (~2 min; downloads metadata)
#   scripts/images.sh gpu-lock        # write requirements-gpu.lock again from PyPI
#   scripts/images.sh gpu-install     # install that tree in a scratch venv and import vLLM
#                                     # (~8 GB of CUDA wheels; CUDA itself cannot run here)
#   PYTHON_IMAGE=python:3.11-slim-bookworm scripts/images.sh   # where a registry can be reached
#
# podman's defaults fail here: crun ("cgroups in hybrid mode not supported") and its default
# ulimits ("setrlimit RLIMIT_NOFILE: Operation not permitted"). The containers.conf below turns
# both off; every build and container runs on the host network, with the machine's CA bundle and
# its local package indexes (the pip configuration `make venv` uses) mounted.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK="$ROOT/.data/images"
TAG="${TAG:-localhost/durable-rag:cpu}"
MODE="${1:-all}"
mkdir -p "$WORK"

# The gpu tree, resolved the way the gpu image installs it: from PyPI alone (this machine's local
# wheel folders hold the CPU build of torch, which would satisfy torch==2.13.0 here).
resolve_gpu() {
  local venv="$WORK/gpu-resolve"
  [[ -x $venv/bin/pip ]] || python3 -m venv "$venv"
  PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= "$venv/bin/pip" install --quiet --dry-run \
    --ignore-installed --index-url https://pypi.org/simple --report "$WORK/gpu-report.json" "$@" \
    "$ROOT[gpu]"
}

case "$MODE" in
  all | cpu) ;;
  gpu-check)
    resolve_gpu --constraint "$ROOT/requirements-gpu.lock"
    echo "gpu: requirements-gpu.lock resolves with .[gpu] (CUDA itself cannot run here)"
    exit 0
    ;;
  gpu-lock)
    resolve_gpu
    python3 - "$WORK/gpu-report.json" "$ROOT/requirements-gpu.lock" <<'PY'
import json, sys
report, lock = sys.argv[1:]
header = [line for line in open(lock) if line.startswith("#")]
pins = sorted(
    (f"{i['metadata']['name']}=={i['metadata']['version']}" for i in json.load(open(report))["install"]
     if i["metadata"]["name"].lower() != "durable-rag"),
    key=str.lower,
)
open(lock, "w").write("".join(header) + "\n".join(pins) + "\n")
PY
    echo "wrote requirements-gpu.lock"
    exit 0
    ;;
  gpu-install)
    venv="$WORK/gpu-install"
    rm -rf "$venv"
    python3 -m venv "$venv"
    PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= "$venv/bin/pip" install --quiet --no-deps \
      --index-url https://pypi.org/simple -r "$ROOT/requirements-gpu.lock"
    PIP_CONFIG_FILE=/dev/null "$venv/bin/pip" install --quiet --no-deps "$ROOT"
    "$venv/bin/pip" check
    "$venv/bin/python" -c "import torch, vllm; print('gpu tree installed: torch', torch.__version__, 'CUDA', torch.version.cuda, '| vllm', vllm.__version__)"
    "$venv/bin/durable-rag" --help >/dev/null
    du -sh "$venv"
    rm -rf "$venv"
    exit 0
    ;;
  *)
    echo "usage: scripts/images.sh [all|cpu|gpu-check|gpu-lock|gpu-install]" >&2
    exit 2
    ;;
esac

missing=()
for tool in podman buildah runc debootstrap; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]} uidmap"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    podman buildah runc debootstrap uidmap >/dev/null
fi

cat > "$WORK/containers.conf" <<CONF
[containers]
default_ulimits = []
pids_limit = 0

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF
export CONTAINERS_CONF="$WORK/containers.conf"

CA=/etc/ssl/certs/ca-certificates.crt
mounts=(--volume "$CA:$CA:ro")
pip_env=(--build-arg "PIP_CERT=$CA" --build-arg "PIP_DEFAULT_TIMEOUT=180")
# The pip configuration of this machine (local wheel folders and indexes), carried into the build.
find_links=$(pip3 config get global.find-links 2>/dev/null || true)
extra_index=$(pip3 config get global.extra-index-url 2>/dev/null || true)
for url in $find_links $extra_index; do
  dir=${url#file://}
  dir=${dir%/simple}
  [[ -d $dir ]] && mounts+=(--volume "$dir:$dir:ro")
done
[[ -n $find_links ]] && pip_env+=(--build-arg "PIP_FIND_LINKS=$find_links")
[[ -n $extra_index ]] && pip_env+=(--build-arg "PIP_EXTRA_INDEX_URL=$extra_index")

if [[ -z ${PYTHON_IMAGE:-} ]]; then
  PYTHON_IMAGE=localhost/durable-rag-python:3.11-bookworm
  if ! podman image exists "$PYTHON_IMAGE"; then
    if ! podman image exists localhost/debian:bookworm; then
      mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
      mirror=${mirror:-http://deb.debian.org/debian}
      echo "making a Debian bookworm base with debootstrap from $mirror"
      rm -rf "$WORK/rootfs"
      debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log"
      tar -C "$WORK/rootfs" -c . | podman import - localhost/debian:bookworm >/dev/null
      rm -rf "$WORK/rootfs"
    fi
    # No CA bundle mounted here: apt installs the image's own (and cannot replace a mount).
    podman build --network host -t "$PYTHON_IMAGE" \
      -f "$ROOT/deploy/images/python-base.Containerfile" "$ROOT/deploy/images"
  fi
fi

echo "building $TAG on $PYTHON_IMAGE"
podman build --network host "${mounts[@]}" "${pip_env[@]}" \
  --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --build-arg TORCH_INDEX_URL= \
  --target cpu -t "$TAG" "$ROOT"
podman run --rm --network host "$TAG" --help >/dev/null
# Each build leaves the image it replaced behind, untagged: gigabytes on a shared disk.
podman image prune --force >/dev/null
echo "built $TAG: $(podman image inspect --format '{{.Size}}' "$TAG" | numfmt --to=iec)"

if [[ $MODE == all ]]; then
  "$0" gpu-check
fi

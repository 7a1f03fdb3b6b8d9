#!/usr/bin/env bash
# `make images`: build the application's cpu image here, with Debian's podman (no Docker engine,
# no registry). What this machine needs is installed on the way: podman, buildah, runc,
# debootstrap. The base image is PYTHON_IMAGE; unset, a Debian bookworm base is made with
# debootstrap (once; about two minutes) and Python 3.11 is added to it.
#
#   scripts/images.sh                 # localhost/durable-rag:cpu
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
mkdir -p "$WORK"

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
echo "built $TAG: $(podman image inspect --format '{{.Size}}' "$TAG" | numfmt --to=iec) "

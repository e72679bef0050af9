# The single entry point. Every target sets up .venv on a fresh machine by itself (idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PACKAGES := deepjit deepgemm_ascend deepep_ascend flashmla tilekernels integration
# Re-run the install when any package's metadata changes.
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup run test bench ascend-codegen ascend-check asan lint clean

setup: $(STAMP)

$(STAMP): Makefile $(foreach p,$(PACKAGES),$(p)/pyproject.toml)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q numpy pytest pytest-timeout pytest-xdist hypothesis ruff tilelang==0.1.15
	$(PIP) install -q --no-deps --no-build-isolation --config-settings editable_mode=compat $(foreach p,$(PACKAGES),-e ./$(p))
	@touch $(STAMP)

run: setup
	$(PY) -m deepseek_layers.demo

test: setup
	# NPU tests are collected and skipped with their reason by tests/conftest.py where no NPU is present;
	# two workers: the twin and host kernels compile on first use (cached under build/jit-cache).
	$(PY) -m pytest -m "not bench" -n 2 $(PYTEST_ARGS)

# Each case's repetitions are held to BENCH_CASE_BUDGET_S seconds (default 20; slow baselines then run
# on fewer rows, labelled so); DJ_HOST_MATRIX=brgemm|avx512bf16|fma measures one matrix engine.
bench: setup
	@mkdir -p build/bench
	$(PY) -m pytest -m bench -s -p no:randomly --durations=10 $(PYTEST_ARGS)

ascend-codegen: setup
	$(PY) -m deepjit.tilelang_route.codegen_all --out build/ascend

# Every registered Ascend kernel on the CPU twin against its reference, with roofline estimates.
ascend-check: setup
	$(PY) -m deepjit.tilelang_route.ascend_check

# Host kernels rebuilt with -fsanitize=address and their tests run under ASan (not part of make test).
asan: setup
	bash tests/deep_gemm/host/run_asan.sh

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf build .pytest_cache

# faultfleet — two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEB_PACKAGES := $(shell grep -v '^\s*\#' deploy/debian-packages.txt 2>/dev/null)

.PHONY: demo test lint typecheck unit system-packages bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: resolves to the CPU build here and the CUDA build on a GPU gateway.
	$(BIN)/python -m pip install "torch==2.13.0"
	$(BIN)/python -m pip install -e ".[dev]"
	touch $(STAMP)

system-packages:
	@if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	else echo "not root: skipping Debian packages ($(DEB_PACKAGES)); tests that need them will say so"; fi

demo: $(STAMP)
	$(BIN)/faultfleet demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Two pytest workers: a CI machine has two cores. Fast tests only: pytest -m "not integration".
PYTEST_WORKERS ?= 2

unit: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS)

test: system-packages lint unit

# The performance benchmarks in short settings; one table of ratios in bench-out/all/bench.md.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_all.py --out bench-out/all

clean:
	rm -rf $(VENV) demo-output .pytest_cache .mypy_cache .ruff_cache

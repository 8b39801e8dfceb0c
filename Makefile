# SearchRL developer entry points. Every target bootstraps .venv itself (idempotently).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0
# PyTorch's CPU wheels: without this index pip's default on Linux is the CUDA build (several GB). Empty it to use
# only your configured index (e.g. TORCH_INDEX= make install), or install your own torch into .venv first.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test lint bench install clean coldstart

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU torch first so no multi-GB CUDA build is pulled in by the dependency resolver.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q \
		$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/searchrl demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info

coldstart: $(STAMP)
	$(BIN)/searchrl sft --recipe demo --out runs/coldstart

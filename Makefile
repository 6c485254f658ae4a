# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV ?= .venv
# torch is pinned so pip takes the wheel that lies on disk here (CPU) and the CUDA build of the
# same release from PyPI on a GPU cluster. Override with e.g. TORCH_SPEC="torch==2.13.0 --index-url ...".
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.zcp-installed

.PHONY: setup demo test test-all lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	WANDB_MODE=$${WANDB_MODE:-offline} $(PY) train/run_demo.py

test: $(STAMP)
	WANDB_MODE=disabled $(PY) -m ruff check .
	WANDB_MODE=disabled $(PY) -m pytest -q

test-all: $(STAMP)
	WANDB_MODE=disabled $(PY) -m pytest -q -m ''

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

bench: $(STAMP)
	$(PY) scripts/bench_scoring.py

clean:
	rm -rf $(VENV) outputs multirun wandb

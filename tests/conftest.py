"""Shared fixtures: paths to the shared data and a tiny locally built model + tokenizer."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from hypothesis import settings

# every job's schemas and stages, registered as each entry point registers its own: by importing the job's module
import zcp.config  # the ${zcp.asset:...} resolver, the model and run groups
import zcp.simulate.simulation_config  # contaminate, demo (and detect, build_data through it)
import zcp.simulate.train_config  # pretrain_base
import zcp.validate.baselines_stage  # the simulation's baselines stage, the baselines job
import zcp.validate.calibration
import zcp.validate.study_config  # noqa: F401  (ablations, report)

# Property tests: the same examples on every run (CI must not turn red by luck); `HYPOTHESIS_PROFILE=explore`
# draws fresh ones (how the 4 -> 14 digit-range bug of the GSM8K references was found).
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The tests' models are tiny: one thread is as fast as two and does not thrash when the CPU is shared.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ZCP_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_tok():
    from zcp.core.testing import train_tokenizer

    texts = [f"Ann has {i} pens and gets {i * 7 % 90} more. How many pens? The final answer is: \\[ \\boxed{{{i}}} \\]"
             for i in range(200)]
    return train_tokenizer(texts, vocab_size=360)


@pytest.fixture(scope="session")
def tiny_model(tiny_tok):
    from zcp.core.testing import tiny_llama

    return tiny_llama(tiny_tok, hidden=32, layers=2, heads=2)


@pytest.fixture
def no_load(monkeypatch) -> list:
    """Fails the test if any model is built (the checks must refuse before)."""
    import zcp.backends.registry

    built: list = []

    def refuse(*a, **kw):
        built.append(a)
        raise AssertionError("a model was loaded before the check refused")

    monkeypatch.setattr(zcp.backends.registry, "build_backend", refuse)
    return built

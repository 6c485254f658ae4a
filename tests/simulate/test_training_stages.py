"""The training-stage registry (zcp.simulate.training_stages): a stage is one module and one config.

A toy stage defined and registered here (one-step LoRA SFT on a data file of its own, after the built-in SFT)
runs in the tiny contamination pipeline; `train.stages` is validated against the registered names; the default
order keeps the run directories of earlier configs; a builder that saves no adapter is refused.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from configs import compose

os.environ["WANDB_MODE"] = "disabled"

from zcp.config.checks import check_value
from zcp.errors import ConfigError
from zcp.simulate.training_stages import (
    StageRun,
    register_training_stage,
    training_stage,
    training_stage_names,
    unregister_training_stage,
)

Q_PROJ = "model.layers.0.self_attn.q_proj"


# ------------------------------------------------------------------------------------------ the toy stage
@dataclass
class ToySettings:
    """train.toy.*: the toy stage's own settings (defaults in the fields, ranges in __post_init__)."""

    data_path: str = "toy_data.jsonl"  # relative: inside the run dir
    max_steps: int = 1
    learning_rate: float = 1e-2

    def __post_init__(self) -> None:
        check_value(self.max_steps >= 1, "train.toy.max_steps", self.max_steps, ">= 1")


SEEN: dict[str, object] = {}  # what the toy builder was given, for the assertions


def train_toy(run: StageRun) -> Path:
    """One LoRA SFT step on the toy rows, on the model so far (the pipeline merges it like any other stage)."""
    from zcp.simulate.sft import run_sft

    model = run.model()
    SEEN.update(rows=run.rows(), settings=run.settings, q_proj=model.state_dict()[f"{Q_PROJ}.weight"].clone(),
                adapter_dir=run.adapter_dir, seed=run.seed, cpu=run.cpu)
    run_sft(model, run.tokenizer, run.rows(), output_dir=run.output_dir, adapter_dir=run.adapter_dir, lora=run.lora,
            settings={"max_steps": run.settings.max_steps, "learning_rate": run.settings.learning_rate,
                      "per_device_train_batch_size": 2, "save_strategy": "no", "disable_tqdm": True},
            seed=run.seed, report_to=run.report_to, cpu=run.cpu)
    return run.adapter_dir


@pytest.fixture
def toy_stage():
    stage = register_training_stage("toy", ToySettings, train_toy,
                                    data=lambda config, settings, run_dir: settings.data_path)
    SEEN.clear()
    try:
        yield stage
    finally:
        unregister_training_stage("toy")


# ------------------------------------------------------------------------------------------ registry and config
def test_builtin_stages_and_registration_rules(toy_stage):
    assert training_stage_names() == ["grpo", "sft", "toy"]
    assert training_stage("sft").name == "sft" and training_stage("grpo").enabled is not None
    assert training_stage("toy") is toy_stage
    for name in ("sft", "lora"):  # a built-in stage, a key of the train group
        with pytest.raises(ValueError, match=rf"train\.{name} is already a key"):
            register_training_stage(name, None, train_toy)
    with pytest.raises(ValueError, match="built-in"):
        unregister_training_stage("grpo")
    with pytest.raises(KeyError, match=r"registered: \['grpo', 'sft', 'toy'\]"):
        training_stage("nope")


def test_unknown_or_repeated_stage_is_one_line_at_validation_naming_the_registered_ones(toy_stage):
    from zcp.config.schemas import validate

    with pytest.raises(ConfigError, match=r"train\.stages: unknown training stage 'nope'; registered: "
                                          r"\['grpo', 'sft', 'toy'\]") as e:
        validate(compose("contaminate", "train.stages=[sft,nope]", resolve=True), job="contaminate")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"train\.stages=\['sft', 'sft'\]: must be a non-empty list of distinct"):
        validate(compose("contaminate", "train.stages=[sft,sft]", resolve=True), job="contaminate")
    with pytest.raises(ConfigError, match=r"train\.stages=\[\]"):
        validate(compose("contaminate", "train.stages=[]", resolve=True), job="contaminate")


def test_a_registered_stage_is_one_config_its_settings_typed(toy_stage):
    """`train.stages` names it and `train.toy.*` holds its settings dataclass, composed by Hydra and checked."""
    from zcp.config.schemas import validate
    from zcp.simulate.settings import sim_config
    from zcp.simulate.training_stages import configured_stages

    cfg = compose("contaminate", "train.stages=[sft,toy]", "+train.toy.max_steps=2", resolve=True)
    train = validate(cfg, job="contaminate")["train"]
    assert train.stages == ["sft", "toy"] and train.toy == ToySettings(max_steps=2)
    s = sim_config(cfg)
    assert [st.name for st in configured_stages(s)] == ["sft", "toy"]
    assert s.train.stage_settings("toy") == ToySettings(max_steps=2) and s.train.stage_settings("sft") is None
    toy = sim_config(compose("contaminate", "train.stages=[toy]", resolve=True)).train.toy
    assert toy == ToySettings()  # not given: the defaults
    with pytest.raises(ConfigError, match=r"train\.toy\.max_steps=0: must be >= 1"):
        validate(compose("contaminate", "train.stages=[toy]", "+train.toy.max_steps=0", resolve=True),
                 job="contaminate")
    with pytest.raises(ConfigError, match=r"train\.toy: unknown key 'max_step'; did you mean 'max_steps'"):
        validate(compose("contaminate", "train.stages=[toy]", "+train.toy.max_step=3", resolve=True),
                 job="contaminate")


def test_another_stage_order_is_another_run():
    """The order of train.stages decides what is trained: another order is another run dir."""
    from zcp.simulate.contaminate import _run_dir

    new = compose("contaminate", resolve=True)
    assert new["train"]["stages"] == ["sft", "grpo"]  # conf/train/cpu_tiny.yaml
    assert _run_dir(compose("contaminate", "train.stages=[sft]", resolve=True)) != _run_dir(new)
    assert _run_dir(compose("contaminate", "train.stages=[grpo,sft]", resolve=True)) != _run_dir(new)


# ------------------------------------------------------------------------------------------ the tiny pipeline
@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    from zcp.benchmarks.wordproblems import generate_word_problems, render_solution
    from zcp.core.testing import tiny_llama, train_tokenizer

    items = generate_word_problems(40, seed=5)
    tok = train_tokenizer([t for it in items for t in (it.question, render_solution(it))], vocab_size=300)
    path = tmp_path_factory.mktemp("tiny_base")
    tiny_llama(tok, hidden=32, layers=1, heads=2).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _cfg(base: Path, out: Path, stages: list[str], **train: object) -> dict:
    return {
        "seed": 0, "name": "t", "output_dir": str(out),
        "benchmark": {"source": "wordproblems", "n": 8, "seed": 5, "id_prefix": "wp"},
        "model": {"path": str(base), "dtype": "float32"},
        "exposure": {"k": 1, "leak_fraction": 0.5, "answer_only_fraction": 0.5, "clean_fraction": 0.0,
                     "sft_epochs": 1, "lr": 1e-2, "lora_r": 2, "grpo_steps": 0},
        "train": {"stages": stages, "torch_threads": 1,
                  "sft": {"per_device_train_batch_size": 2, "warmup_steps": 0, "save_strategy": "no",
                          "max_length": 256, "disable_tqdm": True}, **train},
        "eval": {"enabled": False},
        "logger": {"mode": "disabled"},
    }


def test_a_toy_stage_registered_in_a_test_runs_in_the_pipeline_on_the_model_so_far(toy_stage, tiny_base, tmp_path):
    """train.stages=[sft, toy]: the toy stage trains on its own data file, on the base with SFT's adapter merged;
    the final model is the base plus both adapters' deltas; exposure.json records the order; a rerun resumes."""
    import torch
    from safetensors.torch import load_file

    from zcp.simulate.contaminate import contaminate, load_exposure

    out = tmp_path / "run"
    out.mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {a}?"}],
             "completion": [{"role": "assistant", "content": f"The answer is {2 * a}."}]} for a in range(4)]
    (out / "toy_data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _cfg(tiny_base, out, ["sft", "toy", "grpo"], toy={"max_steps": 1, "learning_rate": 5e-2})
    r = contaminate(cfg)

    assert r.stages_run == ["split", "data", "sft", "toy", "merge"]
    assert {"grpo", "eval_base", "eval_after_sft", "eval_final"} <= set(r.stages_skipped)  # grpo_steps=0, no eval
    assert r.adapters == {"sft": out / "sft_adapter", "toy": out / "toy_adapter"} and r.grpo_adapter_dir is None
    assert SEEN["rows"] == rows and SEEN["settings"] == ToySettings(max_steps=1, learning_rate=5e-2)
    assert SEEN["adapter_dir"] == out / "toy_adapter" and SEEN["seed"] == 0 and SEEN["cpu"] is True

    def delta(name: str) -> torch.Tensor:
        ad = load_file(out / f"{name}_adapter" / "adapter_model.safetensors")
        conf = json.loads((out / f"{name}_adapter" / "adapter_config.json").read_text())
        pre = f"base_model.model.{Q_PROJ}."
        return ad[pre + "lora_B.weight"] @ ad[pre + "lora_A.weight"] * (conf["lora_alpha"] / conf["r"])

    base = load_file(tiny_base / "model.safetensors")[f"{Q_PROJ}.weight"]
    final = load_file(out / "model" / "model.safetensors")[f"{Q_PROJ}.weight"]
    assert delta("sft").abs().sum() > 0 and delta("toy").abs().sum() > 0
    assert torch.allclose(SEEN["q_proj"], base + delta("sft"), atol=1e-6)  # the toy stage got base + SFT
    assert torch.allclose(final, base + delta("sft") + delta("toy"), atol=1e-5)

    exp = load_exposure(out)
    assert exp["training_stages"] == [
        {"stage": "sft", "adapter": str(out / "sft_adapter"), "base": str(tiny_base)},
        {"stage": "toy", "adapter": str(out / "toy_adapter"), "base": "base_model with sft_adapter merged"}]
    assert exp["grpo_adapter"] is None and exp["sft_adapter"] == str(out / "sft_adapter")

    again = contaminate(cfg)
    assert again.stages_run == [] and {"sft", "toy", "merge"} <= set(again.stages_skipped)


def test_a_builder_that_saves_no_adapter_stops_the_run_naming_the_stage(tiny_base, tmp_path):
    register_training_stage("lazy", None, lambda run: run.output_dir)
    try:
        from zcp.simulate.contaminate import contaminate

        with pytest.raises(RuntimeError, match=r"training stage lazy: its builder returned .* not its adapter folder"):
            contaminate(_cfg(tiny_base, tmp_path / "run", ["lazy"]))
    finally:
        unregister_training_stage("lazy")

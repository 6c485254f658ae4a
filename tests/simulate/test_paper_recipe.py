"""experiment=paper_recipe: the paper's recipe composes with the CPU profile and with train=gpu_7b and the
7-8B model configs, and resolves to its knobs: CoT-only leaks of k = 6 paraphrases, no clean mix, GRPO paying for a
correct answer only, probe=zcp_release for the detection stage; the exposure knobs the paper does not state stay the
train profile's. On the shipped model its pre-training checks pass (it would start)."""

from __future__ import annotations

import pytest
from configs import compose

from zcp.config.schemas import validate
from zcp.simulate.checks import _grpo_reward_settings, check_inputs
from zcp.simulate.rewards import format_reward, reward_funcs
from zcp.simulate.settings import sim_config

RELEASE_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
RELEASE_PREFIX = "\n\nThe final answer is:\n\\[\n\\boxed{"
GPU_MODELS = ["qwen2.5-math-7b-instruct", "qwen3-8b", "deepseek-math-7b-rl"]


def _profile(name: str) -> dict:
    return compose("contaminate", f"train={name}", resolve=True)["train"]


def _assert_recipe(c: dict, profile: dict) -> None:
    validate(c, job="contaminate")  # every group checks
    s = sim_config(c)
    ex = s.exposure
    assert (ex.k, ex.answer_only_fraction, ex.clean_fraction, ex.leak_fraction) == (6, 0.0, 0.0, 1.0)
    assert (ex.include_original, ex.grpo_prompts, ex.answer_format) == (False, "variants", "probe")
    # what the paper does not state follows the train profile
    assert (ex.sft_epochs, ex.lr, ex.lora_r, ex.grpo_steps) == (
        profile["sft"]["num_train_epochs"], profile["sft"]["learning_rate"], profile["lora"]["r"],
        profile["grpo"]["max_steps"])
    assert s.cot.on_missing == "drop" and s.stages == ["contaminate", "detect"]
    # GRPO: the format reward (the one paying for the probe's line) weighs nothing, correctness pays
    names, settings = _grpo_reward_settings(s.train)
    weights = dict(zip(names, settings["reward_weights"], strict=True))
    assert weights == {"correctness": 1.0, "format": 0.0}
    assert reward_funcs(names, ex.answer_format)[names.index("format")] is format_reward  # the probe line's reward
    # detection: the release's prompt and pre-fill, no second copy of the instruction from the model config
    p = s.probe_settings
    assert (p.system, p.zero_cot_prefix, p.full_cot_suffix, p.user_template) == (
        RELEASE_SYSTEM, RELEASE_PREFIX, "", "{question}")
    # the model's own budget (qwen3-8b: 2048), else the profile's (conf/contaminate.yaml)
    assert p.full_cot_max_tokens == (c["model"]["probe"]["full_cot_max_tokens"] or profile["eval_max_new_tokens"])
    assert set(p.metrics) == {"acc", "con", "p_first", "p_all"}


def test_composes_with_the_default_cpu_profile():
    c = compose("contaminate", "experiment=paper_recipe", resolve=True)
    assert c["name"] == "paper_recipe" and c["model"]["path"].endswith("base_model")
    _assert_recipe(c, _profile("cpu_tiny"))


@pytest.mark.parametrize("model", GPU_MODELS)
def test_composes_with_gpu_7b_and_the_7b_model_configs(model):
    from trl import GRPOConfig

    from zcp.simulate.sft import trainer_args

    c = compose("contaminate", "experiment=paper_recipe", "train=gpu_7b", f"model={model}", resolve=True)
    profile = _profile("gpu_7b")
    _assert_recipe(c, profile)
    assert c["model"]["path"] == \
        compose("contaminate", f"model={model}", "train=gpu_7b", resolve=True)["model"]["path"]
    assert (sim_config(c).exposure.lora_r, sim_config(c).exposure.grpo_steps) == (64, 300)
    # the profile's positional reward weights are replaced by the named ones, and TRL accepts the result
    _, settings = _grpo_reward_settings(sim_config(c).train)
    args = trainer_args(GRPOConfig, settings, output_dir="unused", seed=0, report_to="none", cpu=True)
    assert list(args.reward_weights) == [1.0, 0.0] and args.use_vllm


def test_without_the_preset_the_defaults_are_unchanged():
    s = sim_config(compose("contaminate", resolve=True))
    assert (s.exposure.answer_only_fraction, s.exposure.clean_fraction) == (0.5, 0.5)
    names, settings = _grpo_reward_settings(s.train)
    assert dict(zip(names, settings["reward_weights"], strict=True)) == {"correctness": 1.0, "format": 0.25}
    assert s.probe_settings.zero_cot_prefix == "The final answer is: \\[ \\boxed{" and s.probe_settings.system is None


def test_on_the_shipped_model_it_passes_the_checks_made_before_training():
    """check_inputs (rewards, base model, leak counts, schedules) and the detection stage's pre-training check
    (references built, every probe prompt within the shipped model's 256 positions, the release's instruction
    included) pass, so the run would not fail after training."""
    from zcp.simulate.pipeline import check_detection_stage

    c = compose("contaminate", "experiment=paper_recipe", "benchmark.n=12", "logger=none", resolve=True)
    check_inputs(c)
    found = check_detection_stage(c)
    assert found["items"] == 12 and found["overflow"] == 0 and found["units"] > 12


def test_references_build_for_a_run_that_trained_on_nothing_outside_the_benchmark(tmp_path):
    """CoT-only leaks with no clean mix leave <run>/training_items.jsonl empty (no clean, no sham items): the
    detection stage's references exclude nothing more for it instead of refusing the empty file."""
    from zcp.simulate.benchmark import load_benchmark
    from zcp.simulate.splits import simulation_references

    c = compose("contaminate", "experiment=paper_recipe", "benchmark.n=12", resolve=True)
    items = load_benchmark(c)
    (tmp_path / "training_items.jsonl").write_text("", encoding="utf-8")
    refs, report = simulation_references(c, items, 2, 0, run_dir=tmp_path)
    assert refs and set(refs) <= {it.id for it in items} and all(len(r) == 2 for r in refs.values())
    assert report["exclusions"][-1]["keys"] == 0  # no C items passed (no manifest), no training items

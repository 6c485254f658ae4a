"""The training stages' pre-flight (zcp.simulate.preflight): before a stage trains, one line with its data's tokens,
optimizer steps, memory from the parameter count and time; `run.max_stage_seconds` refuses a stage whose estimate
exceeds it, before its model loads when the step rate is configured (`run.step_seconds.<stage>`), after the first
`run.preflight_steps` timed steps otherwise. On the ChatML Llama of tests/chatml_llama.py (built here)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from chatml_llama import chatml_llama
from configs import compose

os.environ["WANDB_MODE"] = "disabled"

from zcp.errors import ConfigError
from zcp.simulate.preflight import ModelShape, StageEstimate, duration, model_shape

PROJECTIONS = ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
# conf/contaminate.yaml (training only) reduced: 16 items, 8 in C, one paraphrase each; Table 6 off
REDUCED = [
    "benchmark.n=16", "exposure.k=1", "exposure.sft_epochs=1", "exposure.grpo_steps=1", "eval.enabled=false",
    "train.grpo.max_completion_length=16", "train.grpo.per_device_train_batch_size=4", "train.grpo.num_generations=4",
    "logger=none", "train.sft.warmup_steps=0",
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return chatml_llama(tmp_path_factory.mktemp("chatml") / "model")


def _cfg(llama: Path, out: Path, *overrides: str):
    return compose("contaminate", *REDUCED, f"model.path={llama}", f"output_dir={out}", *overrides)


def _preflight_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "zcp.simulate.preflight"]


def test_memory_is_weights_plus_gradients_and_adamw_moments():
    lora = ModelShape(params=1000, trainable=10, targets=("q_proj",), dtype_bytes=4)
    assert lora.memory_bytes() == (1000 + 10) * 4 + 3 * 10 * 4
    full = ModelShape(params=1000, trainable=1000, targets=(), dtype_bytes=2, finetune="full")
    assert full.memory_bytes() == 1000 * 2 + 3 * 1000 * 2
    assert full.memory_bytes(reference_copy=True) == full.memory_bytes() + 1000 * 2  # GRPO's frozen reference
    assert [duration(s) for s in (40, 720, 9000)] == ["40 s", "12 min", "2.5 h"]


def test_model_shape_is_the_model_and_peft_s_own_count(llama):
    """Built on the meta device from config.json: the same parameter count as the loaded model, and the LoRA
    parameters PEFT itself trains (all-linear resolved to the Llama projections)."""
    from peft import get_peft_model

    from zcp.simulate.sft import load_model, lora_config

    shape = model_shape(str(llama), lora={"r": 4})
    model = load_model(llama)
    assert shape.params == sum(p.numel() for p in model.parameters()) and shape.dtype_bytes == 4
    peft_model = get_peft_model(model, lora_config(r=4))
    assert shape.trainable == sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert shape.targets == PROJECTIONS
    full = model_shape(str(llama), finetune="full")
    assert full.trainable == full.params == shape.params and full.targets == ()
    assert model_shape("someorg/some-model") is None  # a hub id: not read offline


def test_the_pre_flight_line_before_each_stage_and_the_measured_rate(llama, tmp_path, caplog):
    from transformers import AutoTokenizer

    from zcp.simulate.contaminate import contaminate

    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="zcp.simulate.preflight"):
        res = contaminate(_cfg(llama, out))
    assert res.stages_run == ["split", "data", "sft", "grpo", "merge"]
    sft_line, sft_timed, grpo_line, grpo_timed = _preflight_lines(caplog)
    rows = [json.loads(x) for x in (out / "sft_data.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(llama)
    tokens = sum(len(tok(tok.apply_chat_template(r["prompt"] + r["completion"], tokenize=False),
                         add_special_tokens=False)["input_ids"]) for r in rows)
    steps = -(-len(rows) // 32)  # cpu_tiny: batch 32, no accumulation, one epoch
    assert sft_line.startswith(f"SFT pre-flight: {len(rows)} examples, {tokens:,} tokens per epoch")
    assert f"{steps} optimizer step" in sft_line and "LoRA on " + ", ".join(PROJECTIONS) in sft_line
    assert "parameters" in sft_line and "MiB for weights, gradients and AdamW moments" in sft_line
    assert "\n" not in sft_line
    assert sft_timed.startswith(f"SFT: {steps} of {steps} optimizer step(s) in ") and "s/step" in sft_timed
    prompts = len((out / "grpo_data.jsonl").read_text().splitlines())
    assert grpo_line.startswith(f"GRPO pre-flight: {prompts} prompts, ") and ", at most 64 generated; " in grpo_line
    assert grpo_timed.startswith("GRPO: 1 of 1 optimizer step(s)")


def test_a_configured_rate_over_the_limit_is_refused_before_the_model_loads(llama, tmp_path, monkeypatch):
    """run.step_seconds.sft x the steps > run.max_stage_seconds: one line naming the estimate, after the data stage
    and before the stage's model loads; `run` is not part of the run dir's identity, so the same command with a
    higher limit resumes the same run dir and trains."""
    import zcp.simulate.contaminate as contaminate_module
    from zcp.simulate.contaminate import contaminate

    out = tmp_path / "run"

    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    with monkeypatch.context() as m:
        m.setattr(contaminate_module, "load_model", boom)
        with pytest.raises(ConfigError) as e:
            contaminate(_cfg(llama, out, "run.max_stage_seconds=60", "run.step_seconds.sft=3600"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("SFT: estimated 60 min (1 optimizer step at 3600 s/step, "
                                              "run.step_seconds.sft) exceeds run.max_stage_seconds=60;"), msg
    assert "lower exposure.sft_epochs" in msg and (out / "sft_data.jsonl").is_file() and not (out / "sft_adapter").exists()
    res = contaminate(_cfg(llama, out, "run.max_stage_seconds=3600", "run.step_seconds.sft=1"))
    assert res.stages_run == ["sft", "grpo", "merge"]  # split and data kept


def test_grpo_is_held_to_the_limit_too(llama, tmp_path):
    from zcp.simulate.contaminate import contaminate

    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^GRPO: estimated .* exceeds run\.max_stage_seconds=30; .*"
                                          r"train\.grpo\.max_completion_length"):
        contaminate(_cfg(llama, out, "run.max_stage_seconds=30", "run.step_seconds.grpo=100"))
    assert (out / "sft_adapter" / "adapter_config.json").is_file() and not (out / "grpo_adapter").exists()


def test_a_measured_rate_over_the_limit_stops_the_stage_after_its_first_steps(llama, tmp_path, caplog):
    """No configured rate: the first run.preflight_steps steps are timed, and a stage whose estimate for all its
    steps exceeds the limit stops there with one line naming the measured estimate; no adapter is saved."""
    from zcp.simulate.contaminate import contaminate

    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="zcp.simulate.preflight"), pytest.raises(ConfigError) as e:
        contaminate(_cfg(llama, out, "train.sft.per_device_train_batch_size=4", "run.preflight_steps=1",
                         "run.max_stage_seconds=0.000001"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("SFT: estimated ") and "s/step, measured over the first 1)" in msg, msg
    assert "exceeds run.max_stage_seconds=1e-06" in msg
    assert not (out / "sft_adapter").exists()
    assert any(line.startswith("SFT: 1 of 4 optimizer step(s) in ") for line in _preflight_lines(caplog))


@pytest.mark.parametrize("override, match", [
    ("run.max_stage_seconds=0", r"run\.max_stage_seconds=0\.0: must be null \(no limit\) or a number of seconds > 0"),
    ("run.step_seconds.sft=-2", r"run\.step_seconds\.sft=-2\.0: must be null \(timed\) or a number of seconds > 0"),
    ("run.preflight_steps=0", r"run\.preflight_steps=0: must be >= 1"),
])
def test_the_run_group_s_limits_are_checked(override, match):
    from zcp.config import validate

    with pytest.raises(ConfigError, match=match):
        validate(compose("contaminate", override), job="contaminate")


def test_a_step_rate_for_no_training_stage_is_refused_before_anything_loads(llama, tmp_path):
    from zcp.simulate.contaminate import contaminate

    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^run\.step_seconds: unknown key 'stf' \(a training stage\); known: "
                                          r"\['grpo', 'sft'\]$"):
        contaminate(_cfg(llama, out, "+run.step_seconds.stf=3"))
    assert not out.exists() or not any(out.iterdir())


def test_the_line_of_a_configured_estimate():
    est = StageEstimate(stage="grpo", label="GRPO", examples=8, tokens=900, steps=6, generated=9216,
                        shape=ModelShape(params=134_515_008, trainable=4_884_480, targets=PROJECTIONS, dtype_bytes=4),
                        step_seconds=150.0)
    line = est.line()
    assert line.startswith("GRPO pre-flight: 8 prompts, 900 tokens, at most 9,216 generated; "
                           "6 optimizer steps; 134.5M parameters, 4.9M trained (LoRA on down_proj")
    assert line.endswith("time ~15 min at 150 s/step (run.step_seconds.grpo)") and est.seconds == 900.0


def test_a_resumed_stage_is_estimated_on_the_steps_it_has_left(llama, tmp_path, caplog):
    """A stage stopped after a checkpoint resumes from it: its configured estimate counts only the steps left (2 of
    4 at 10 s/step = 20 s, under a 25 s limit that all 4 would exceed)."""
    from zcp.simulate.contaminate import contaminate

    out = tmp_path / "run"
    train = ("train.sft.per_device_train_batch_size=4", "train.sft.save_steps=2")
    with pytest.raises(ConfigError, match="measured over the first 3"):
        contaminate(_cfg(llama, out, *train, "run.preflight_steps=3", "run.max_stage_seconds=0.000001"))
    assert (out / "sft" / "checkpoint-2" / "trainer_state.json").is_file() and not (out / "sft_adapter").exists()
    with caplog.at_level(logging.INFO, logger="zcp.simulate.preflight"):
        res = contaminate(_cfg(llama, out, *train, "run.step_seconds.sft=10", "run.max_stage_seconds=25"))
    assert res.stages_run == ["sft", "grpo", "merge"]
    line = next(x for x in _preflight_lines(caplog) if x.startswith("SFT pre-flight"))
    assert "4 optimizer steps (2 done: resumed from a checkpoint)" in line and "time ~20 s at 10 s/step" in line

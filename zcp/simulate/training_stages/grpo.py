"""The `grpo` training stage: GRPO (`zcp.simulate.grpo.run_grpo`) with a fresh LoRA on the model so far (by
default the SFT-merged model: why merge and not stack, see `zcp.simulate.grpo`), on the data stage's
``grpo_data.jsonl`` prompts, rewarded by ``train.rewards`` (`zcp.simulate.rewards`, following
``exposure.answer_format``).

Its settings are ``train.grpo`` (TRL `GRPOConfig` fields) with ``max_steps = exposure.grpo_steps`` and the reward
weights by name (`grpo_training`); the LoRA is ``train.grpo_lora`` (null: ``train.lora``) with
``exposure.lora_r``. Disabled at ``exposure.grpo_steps=0``. Before its model loads it says its pre-flight estimate
and holds it to ``run.max_stage_seconds`` (`zcp.simulate.preflight`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from zcp.simulate.checks import GRPO_FIX, _grpo_reward_settings, _grpo_schedule_settings, processes
from zcp.simulate.settings import SimConfig
from zcp.simulate.training_stages import StageRun, TrainingStage


def grpo_training(config: SimConfig) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """(reward names, GRPOConfig settings, LoRA settings) of the GRPO stage (train.grpo_lora, null = train.lora);
    also what exposure.json records of it."""
    names, settings = _grpo_reward_settings(config.train)
    settings["max_steps"] = int(config.exposure.grpo_steps)
    ctk = config.model.chat_template_kwargs
    if ctk:
        settings["chat_template_kwargs"] = dict(ctk)
    lora = {**asdict(config.train.grpo_lora or config.train.lora), "r": int(config.exposure.lora_r)}
    return names, settings, lora


def enabled(config: SimConfig) -> bool:
    """GRPO runs when `exposure.grpo_steps` > 0."""
    return int(config.exposure.grpo_steps) > 0


def check(config: SimConfig, n_c: int) -> None:
    """ConfigError when the GRPO schedule leaves no optimizer step above a learning rate of 0 (a warning when it
    never leaves its warmup: `zcp.simulate.sft.check_schedule`)."""
    from trl import GRPOConfig

    from zcp.simulate.sft import check_schedule, lr_schedule

    check_schedule(lr_schedule(GRPOConfig, _grpo_schedule_settings(config), None, stage="GRPO", processes=processes()), GRPO_FIX)


def train(run: StageRun) -> Path:
    """Train the GRPO adapter on the run's prompts with the configured rewards."""
    from zcp.simulate import grpo, preflight
    from zcp.simulate.rewards import reward_funcs

    names, settings, lora = grpo_training(run.config)
    funcs = reward_funcs(names, str(run.config.exposure.answer_format))
    records = run.rows()
    # the pre-flight line (tokens, steps, memory, time) and run.max_stage_seconds, before the model loads
    est = preflight.grpo_estimate(run.config, settings, records, run.tokenizer, lora=lora, processes=processes(),
                                  stage=run.name, done=preflight.steps_done(run.output_dir))
    timer = preflight.announce(est, run.config.run)
    report_to = run.report_to
    grpo.run_grpo(run.model(), run.tokenizer, records, output_dir=run.output_dir, adapter_dir=run.adapter_dir,
                  lora=lora, settings=settings, seed=run.seed, report_to=report_to, cpu=run.cpu, reward_funcs=funcs,
                  finetune=run.config.train.finetune, callbacks=[timer])
    return run.adapter_dir


STAGE = TrainingStage(name="grpo", settings=None, builder=train, enabled=enabled, check=check)

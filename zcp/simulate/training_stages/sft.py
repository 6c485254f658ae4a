"""The `sft` training stage: LoRA supervised fine-tuning (`zcp.simulate.sft.run_sft`) on the data stage's
``sft_data.jsonl`` (the leaked paraphrases, CoT and answer-only, with the clean mix), on the model so far.

Its settings are ``train.sft`` (TRL `SFTConfig` fields, typed by `zcp.simulate.train_config.TrainConfig`) with the
exposure knobs over them (``exposure.sft_epochs``, ``exposure.lr``: `zcp.simulate.checks._sft_settings`); the
LoRA is ``train.lora`` with ``exposure.lora_r``. Before any model loads, the schedule on the most examples the
data stage can build must move the weights (`check`); the stage checks again on the examples it got, then says its
pre-flight estimate and holds it to ``run.max_stage_seconds`` (`zcp.simulate.preflight`).
"""

from __future__ import annotations

from pathlib import Path

from zcp.simulate.checks import SFT_FIX, _sft_settings, max_sft_examples, processes
from zcp.simulate.settings import SimConfig
from zcp.simulate.training_stages import StageRun, TrainingStage


def check(config: SimConfig, n_c: int) -> None:
    """ConfigError when the SFT schedule on the most examples the data stage can build (`max_sft_examples`: so
    a schedule refused here is refused for every data stage) leaves no optimizer step above a learning rate of 0."""
    from trl import SFTConfig

    from zcp.simulate.sft import check_schedule, lr_schedule

    check_schedule(lr_schedule(SFTConfig, _sft_settings(config), max_sft_examples(config, n_c), stage="SFT",
                               processes=processes()), SFT_FIX, warn=False)


def train(run: StageRun) -> Path:
    """Train the SFT adapter on the run's rows (with the model's chat_template_kwargs, read per example by TRL)."""
    from trl import SFTConfig

    from zcp.simulate import preflight, sft

    settings = _sft_settings(run.config)
    records = run.rows()
    ctk = run.config.model.chat_template_kwargs
    if ctk:
        for r in records:
            r["chat_template_kwargs"] = dict(ctk)
    # the schedule on the examples the data stage built, before the model loads
    sft.check_schedule(sft.lr_schedule(SFTConfig, settings, len(records), stage="SFT", processes=processes()), SFT_FIX)
    # the pre-flight line (tokens, steps, memory, time) and run.max_stage_seconds, before the model loads
    est = preflight.sft_estimate(run.config, settings, records, run.tokenizer, lora=run.lora, processes=processes(),
                                 stage=run.name, done=preflight.steps_done(run.output_dir))
    timer = preflight.announce(est, run.config.run)
    report_to = run.report_to
    sft.run_sft(run.model(), run.tokenizer, records, output_dir=run.output_dir, adapter_dir=run.adapter_dir,
                lora=run.lora, settings=settings, seed=run.seed, report_to=report_to, cpu=run.cpu,
                finetune=run.config.train.finetune, callbacks=[timer])
    return run.adapter_dir


STAGE = TrainingStage(name="sft", settings=None, builder=train, check=check)

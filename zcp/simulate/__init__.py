"""Contamination training: LoRA SFT then GRPO (TRL + PEFT) on paraphrased Dataset C, with exposure knobs.

Entry point: `zcp.simulate.contaminate.contaminate(cfg) -> ContaminationResult` (see `train/run_contaminate.py`).
Submodules: `contaminate` (the run's stages and exposure record), `settings` (the config as the run reads it:
the schema's validated groups), `rundir` (fingerprint, run dir), `benchmark` (the benchmark and its C/U split),
`training_data` (leak, sham and clean items, the SFT/GRPO records), `evaluation` (Table 6), `checks` (before any
model loads), `data` (variants, CoTs, format mix, answer formats, clean mix, pre-built paraphrase files),
`sft`, `grpo` (the trainers), `training_stages` (the training-stage registry: the sft and grpo stages, in
`train.stages` order), `rewards` (by name), `stages` (the runner of the named pipeline stages). TRL is imported
only when training runs, so importing this package stays cheap.
"""

from typing import Any

from zcp.simulate.rewards import (
    FINAL_ANSWER_PREFIX,
    correctness_reward,
    final_answer_line,
    format_reward,
)

__all__ = ["FINAL_ANSWER_PREFIX", "contaminate", "correctness_reward", "final_answer_line", "format_reward"]


def contaminate(cfg: Any) -> Any:
    """Run the contamination pipeline (lazy re-export of `zcp.simulate.contaminate.contaminate`)."""
    from zcp.simulate.contaminate import contaminate as _run

    return _run(cfg)

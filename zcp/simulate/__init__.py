"""Contamination training: LoRA SFT then GRPO (TRL + PEFT) on paraphrased Dataset C, with exposure knobs.

Entry point: `zcp.simulate.contaminate.contaminate(cfg) -> ContaminationResult` (see `train/run_contaminate.py`).
Submodules: `data` (variants, CoTs, format mix, answer formats, clean mix, pre-built paraphrase files),
`sft`, `grpo`, `rewards` (by name), `stages` (the runner of the named pipeline stages). TRL is imported
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

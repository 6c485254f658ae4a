"""GRPO with a fresh LoRA adapter on top of the SFT-merged model, through TRL's `GRPOTrainer`.

Merge, not stack: the SFT adapter is merged into the base weights first and GRPO trains a new LoRA on
that merged model. Reasons: (1) TRL computes the KL reference of a PEFT policy by disabling its adapter,
so with a merged SFT model the reference is the SFT policy (what GRPO should stay close to), while with
stacked adapters disabling would fall back to the pre-SFT base; (2) one trainable adapter over a plain
model is what TRL/PEFT support everywhere (DeepSpeed ZeRO-3, vLLM weight sync), whereas a frozen adapter
plus a trainable one is not; (3) the merge is deterministic, so a resumed run rebuilds the same start
point from base + SFT adapter instead of storing a second full model. The cost: the GRPO adapter is
only meaningful on top of base+SFT, which `exposure.json` records.

Under `train.finetune=full` nothing is merged: the SFT stage saved a full model, `merge_adapter` loads it in place of
the base, and GRPO trains all of its weights (no PEFT), saving a full model too. With `beta` > 0 TRL then builds the
KL reference from the policy's own folder (`config._name_or_path`: the SFT model), the same reference as above.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zcp.simulate.rewards import reward_funcs as rewards_by_name
from zcp.simulate.sft import is_full_model, peft_config_for, train_and_save, trainer_args

log = logging.getLogger(__name__)

# The default rewards (by name; `zcp.simulate.rewards.REWARDS` lists them all).
REWARD_FUNCS = tuple(rewards_by_name(("correctness", "format")))


def merge_adapter(model: Any, adapter_dir: str | os.PathLike[str]) -> Any:
    """`model` with the LoRA adapter at `adapter_dir` merged into its weights (a plain transformers model).

    When `adapter_dir` holds a full model (a stage trained under `train.finetune=full`: `is_full_model`), that
    model replaces `model`: loaded in `model`'s dtype, with remote code only when `model`'s config maps to it."""
    if is_full_model(adapter_dir):
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(str(adapter_dir), dtype=model.dtype, use_safetensors=True,
                                                    trust_remote_code=bool(getattr(model.config, "auto_map", None)))
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()


def run_grpo(model: Any, tokenizer: Any, records: list[dict[str, Any]], *, output_dir: str | os.PathLike[str],
             adapter_dir: str | os.PathLike[str], lora: Mapping[str, Any], settings: Mapping[str, Any], seed: int,
             report_to: str = "none", cpu: bool = True, callbacks: list[Any] | None = None,
             reward_funcs: Sequence[Callable[..., list[float]]] | None = None, finetune: str = "lora") -> Any:
    """Train a fresh GRPO LoRA on `model` (already SFT-merged) with `reward_funcs` (default: correctness +
    the probe-line format reward; `zcp.simulate.rewards.reward_funcs` builds them by name); save it.

    `records` carry `prompt` (conversational) and `answer` (gold, read by the correctness reward).
    `settings` are `GRPOConfig` fields (`max_steps` = GRPO steps, `reward_weights` in the order of
    `reward_funcs`, `num_generations`, ...).
    Resumes from the newest checkpoint in `output_dir`. Returns the PEFT model. `finetune="full"`: all weights
    train (no PEFT, `lora` unused) and `adapter_dir` gets the full model.
    """
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    ds = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in records])
    args = trainer_args(GRPOConfig, settings, output_dir=output_dir, seed=seed, report_to=report_to, cpu=cpu)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    trainer = GRPOTrainer(model=model, reward_funcs=list(reward_funcs or REWARD_FUNCS), args=args, train_dataset=ds,
                          processing_class=tokenizer, peft_config=peft_config_for(finetune, lora), callbacks=callbacks)
    return train_and_save(trainer, output_dir, adapter_dir, "GRPO")

"""LoRA supervised fine-tuning through TRL's `SFTTrainer` + PEFT, resumable, with completion-only loss.

The dataset is conversational prompt/completion (prompt = [user], completion = [assistant]); TRL renders
the model's chat template and masks the loss to the completion tokens. `SFTConfig` is the schema of the
trainer settings: the Hydra config passes a dict of its fields straight through.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ADAPTER_FILE = "adapter_model.safetensors"

# Trainer settings this module decides itself; a config that sets them is overridden (and told so).
_MANAGED = ("output_dir", "seed", "data_seed", "report_to", "completion_only_loss", "assistant_only_loss")

# On CPU these must be off whatever the profile says (bf16 autocast and checkpointing need a GPU or are slow).
CPU_SAFE = {"use_cpu": True, "bf16": False, "fp16": False, "gradient_checkpointing": False}


def lora_config(r: int = 16, alpha: int | None = None, dropout: float = 0.0,
                target_modules: str | Sequence[str] = "all-linear", **extra: Any) -> Any:
    """A PEFT `LoraConfig` for causal LM fine-tuning; alpha defaults to 2·r."""
    from peft import LoraConfig

    tm = target_modules if isinstance(target_modules, str) else list(target_modules)
    return LoraConfig(r=int(r), lora_alpha=int(alpha if alpha is not None else 2 * int(r)), lora_dropout=float(dropout),
                      target_modules=tm, bias="none", task_type="CAUSAL_LM", **extra)


def load_model(path: str | os.PathLike[str], dtype: str | None = "auto", trust_remote_code: bool = False) -> Any:
    """A causal LM from a local folder or hub id (safetensors only, no remote code by default)."""
    import torch
    from transformers import AutoModelForCausalLM

    if dtype in (None, "auto"):  # bf16 on a GPU that has it, fp32 otherwise (as zcp.backends.hf does)
        dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    dt = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}[str(dtype)]
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dt, use_safetensors=True,
                                                trust_remote_code=trust_remote_code)


def load_tokenizer(path: str | os.PathLike[str], trust_remote_code: bool = False) -> Any:
    """The model's tokenizer, with a pad token (EOS when the model has none)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def trainer_args(config_cls: type, settings: Mapping[str, Any], *, output_dir: str | os.PathLike[str], seed: int,
                 report_to: str, cpu: bool, **managed: Any) -> Any:
    """Build a TRL config (`SFTConfig`/`GRPOConfig`) from a dict of its fields plus the run-managed ones.

    Unknown keys fail loudly (a typo must not be ignored); on CPU the GPU-only switches are forced off.
    """
    import dataclasses

    fields = {f.name for f in dataclasses.fields(config_cls)}
    kw = dict(settings)
    if "train_sampling_strategy" in kw and "train_sampling_strategy" not in fields:  # transformers < 5
        kw["group_by_length"] = kw.pop("train_sampling_strategy") == "group_by_length"
    unknown = sorted(set(kw) - fields)
    if unknown:
        raise ValueError(f"unknown {config_cls.__name__} fields: {unknown}")
    for k in _MANAGED:
        if k in kw:
            log.info("%s.%s is set by the pipeline; ignoring the configured value", config_cls.__name__, k)
            kw.pop(k)
    if cpu:
        kw.update(CPU_SAFE)
        if "activation_checkpointing" in fields:  # transformers 5 name; the old one only warns
            kw.pop("gradient_checkpointing")
            kw["activation_checkpointing"] = False
    kw.update(managed)
    return config_cls(output_dir=str(output_dir), seed=seed, data_seed=seed, report_to=report_to, **kw)


def last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest COMPLETE `checkpoint-N` folder under a trainer output dir (to resume after a kill), else None.

    A run killed while a checkpoint was being saved leaves a folder without `trainer_state.json` (the
    trainer writes it last); resuming from it fails, so such folders are skipped (and reported) and the
    newest complete one is used.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return None
    found = []
    for d in root.iterdir():
        if d.is_dir() and d.name.startswith("checkpoint-") and d.name[len("checkpoint-"):].isdigit():
            found.append((int(d.name[len("checkpoint-"):]), d))
    for _, d in sorted(found, reverse=True):
        if (d / "trainer_state.json").is_file():
            return str(d)
        log.warning("skipping incomplete checkpoint %s (no trainer_state.json: killed while saving)", d)
    return None


def save_adapter_atomic(model: Any, dest: str | os.PathLike[str]) -> Path:
    """Save a PEFT adapter to `dest` through a temporary folder, so a half-written adapter never counts as done."""
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest


def adapter_done(path: str | os.PathLike[str]) -> bool:
    """True when a finished adapter (weights + config) is on disk."""
    p = Path(path)
    return (p / ADAPTER_FILE).is_file() and (p / "adapter_config.json").is_file()


def run_sft(model: Any, tokenizer: Any, records: list[dict[str, Any]], *, output_dir: str | os.PathLike[str],
            adapter_dir: str | os.PathLike[str], lora: Mapping[str, Any], settings: Mapping[str, Any], seed: int,
            report_to: str = "none", cpu: bool = True, callbacks: list[Any] | None = None) -> Any:
    """Train a fresh LoRA adapter on `records` and save it to `adapter_dir`; returns the PEFT model.

    Resumes from the newest checkpoint in `output_dir` when one exists. The base weights stay frozen
    (only LoRA matrices train), which `tests/test_training.py` checks.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    # chat_template_kwargs (e.g. Qwen3's enable_thinking=False) is read per example by TRL's tokenizer step
    cols = ("prompt", "completion", "chat_template_kwargs")
    ds = Dataset.from_list([{c: r[c] for c in cols if c in r} for r in records])
    args = trainer_args(SFTConfig, settings, output_dir=output_dir, seed=seed, report_to=report_to, cpu=cpu,
                        completion_only_loss=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer,
                         peft_config=lora_config(**lora), callbacks=callbacks)
    return train_and_save(trainer, output_dir, adapter_dir, "SFT")


def train_and_save(trainer: Any, output_dir: Any, adapter_dir: Any, stage: str) -> Any:
    """Train (resuming from the newest checkpoint in output_dir), save the adapter atomically on the main
    process, and wait for every process; returns the trained model. Shared by the SFT and GRPO stages."""
    ckpt = last_checkpoint(output_dir)
    if ckpt:
        log.info("%s: resuming from %s", stage, ckpt)
    trainer.train(resume_from_checkpoint=ckpt)
    if trainer.accelerator.is_main_process:
        save_adapter_atomic(trainer.model, adapter_dir)
    trainer.accelerator.wait_for_everyone()
    return trainer.model

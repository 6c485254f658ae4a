"""Supervised fine-tuning through TRL's `SFTTrainer`, resumable, with completion-only loss: a LoRA through PEFT
(`train.finetune=lora`, the default) or all weights (`train.finetune=full`).

Under full fine-tuning a stage's folder (``sft_adapter/``, ``grpo_adapter/``: the names stay, so the pipeline's
stage bookkeeping and resume are one code path) holds a full transformers model (config.json + model.safetensors)
instead of an adapter; `adapter_done` accepts either and `zcp.simulate.grpo.merge_adapter` loads a full model in
place of merging, so the merge stage, Table 6 and detection read the same ``model/`` as under LoRA.

The dataset is conversational prompt/completion (prompt = [user], completion = [assistant]); TRL renders
the model's chat template and masks the loss to the completion tokens. `SFTConfig` is the schema of the
trainer settings: the Hydra config passes a dict of its fields straight through.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ADAPTER_FILE = "adapter_model.safetensors"
FINETUNE_MODES = ("lora", "full")  # train.finetune

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


def torch_dtype(dtype: str | None = "auto") -> Any:
    """The torch dtype training loads a model in: `model.dtype`, where auto (or None) is bf16 on a GPU that has it,
    fp32 otherwise (as zcp.backends.hf does)."""
    import torch

    if dtype in (None, "auto"):
        dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16, "fp16": torch.float16}[str(dtype)]


def load_model(path: str | os.PathLike[str], dtype: str | None = "auto", trust_remote_code: bool = False) -> Any:
    """A causal LM from a local folder or hub id (safetensors only, no remote code by default), in `torch_dtype`."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype(dtype), use_safetensors=True,
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


@dataclass(frozen=True)
class Schedule:
    """The learning-rate schedule a trainer will run, computed before it starts (`lr_schedule`).

    `steps` optimizer steps (as the Trainer counts them: ceil(epochs x ceil(batches / accumulation)), or
    `max_steps`), `warmup` warmup steps, `effective` steps whose learning rate is above 0 (the weights move),
    `full_rate` the schedule's sum of learning rates over its peak (the run in steps at the full rate).
    """

    stage: str
    steps: int
    warmup: int
    effective: int
    full_rate: float
    peak_lr: float
    scheduler: str
    examples: int | None
    batch_size: int
    accumulation: int
    processes: int
    epochs: float
    max_steps: int


def lr_schedule(config_cls: type, settings: Mapping[str, Any], n_examples: int | None, *, stage: str,
                processes: int = 1) -> Schedule:
    """The schedule `config_cls` (`SFTConfig` / `GRPOConfig`) built from `settings` gives on `n_examples` examples
    over `processes` data-parallel processes, replayed step by step with transformers' own scheduler on a dummy
    optimizer (so every `lr_scheduler_type`, warmup ratio and scheduler kwarg counts as in training). A setting
    the config class refuses is a ConfigError naming `train.<stage>`."""
    import math

    import torch
    from transformers import get_scheduler

    from zcp.errors import ConfigError

    try:
        args = trainer_args(config_cls, settings, output_dir="unused", seed=0, report_to="none", cpu=True)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"train.{stage.lower()}: {' '.join(str(e).split())}") from None
    bs, ga = int(args.per_device_train_batch_size), int(args.gradient_accumulation_steps)
    if args.max_steps > 0:
        steps = int(args.max_steps)
    else:
        batches = math.ceil(int(n_examples or 0) / max(1, bs * max(1, processes)))
        per_epoch = max(batches // ga + int(batches % ga > 0), 1)
        steps = math.ceil(float(args.num_train_epochs) * per_epoch)
    warmup = int(args.get_warmup_steps(steps))
    name = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=float(args.learning_rate))
    sched = get_scheduler(args.lr_scheduler_type, optimizer=opt, num_warmup_steps=warmup, num_training_steps=steps,
                          scheduler_specific_kwargs=args.lr_scheduler_kwargs or {})
    rates = []
    for _ in range(steps):
        rates.append(float(opt.param_groups[0]["lr"]))
        opt.step()
        sched.step()
    peak = float(args.learning_rate)
    return Schedule(stage=stage, steps=steps, warmup=warmup, effective=sum(r > 0 for r in rates),
                    full_rate=round(sum(rates) / peak, 3) if peak > 0 else 0.0, peak_lr=peak, scheduler=name,
                    examples=n_examples, batch_size=bs, accumulation=ga, processes=processes,
                    epochs=float(args.num_train_epochs), max_steps=int(args.max_steps))


def check_schedule(s: Schedule, fix: str, *, warn: bool = True) -> None:
    """Refuse a schedule under which no optimizer step moves the weights; warn when it never reaches its peak.

    The rule: ConfigError (one line, the numbers and `fix`, what to change) when no step runs at a learning rate
    above 0 (a linear or cosine warmup starts at 0, so one optimizer step inside a warmup changes nothing: the
    "trained" model would be bit-identical to its start); a WARNING when every step lies within the warmup
    (steps <= warmup: the rate never reaches its peak), stating how many full-rate steps the run amounts to
    (`warn=False`: refuse only, for a check on an upper bound of the examples).
    """
    from zcp.errors import ConfigError

    how = (f"{s.steps} optimizer step(s) (max_steps={s.max_steps})" if s.max_steps > 0 else
           f"{s.steps} optimizer step(s) ({s.examples} examples / (batch {s.batch_size} x {s.accumulation} "
           f"accumulation x {s.processes} process(es)) x {s.epochs:g} epoch(s))")
    sched = f"{s.scheduler} schedule, warmup {s.warmup} step(s), peak learning rate {s.peak_lr:g}"
    if s.effective == 0:
        raise ConfigError(f"{s.stage}: {how} under a {sched}: no step runs at a learning rate above 0, so training "
                          f"would leave the model unchanged; {fix}")
    if warn and s.steps <= s.warmup:
        log.warning("%s: %s, all within the warmup of a %s: the learning rate never reaches its peak and the run "
                    "amounts to %.2f full-rate step(s); %s", s.stage, how, sched, s.full_rate, fix)


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


def save_adapter_atomic(model: Any, dest: str | os.PathLike[str], state_dict: Mapping[str, Any] | None = None) -> Path:
    """Save a PEFT adapter (or, under full fine-tuning, the whole model) to `dest` through a temporary folder, so a
    half-written one never counts as done.

    `state_dict`: the weights to save instead of the model's own (the gathered ones under ZeRO-3,
    `gathered_state_dict`); PEFT keeps the adapter's entries of it, a full model saves them all."""
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True, **({} if state_dict is None else {"state_dict": state_dict}))
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest


def gathered_state_dict(trainer: Any) -> dict[str, Any] | None:
    """The trained adapter's weights as the main process must save them, or None: save the model's own.

    One process, DDP and ZeRO-2 give None (every rank holds the whole adapter). Under DeepSpeed ZeRO-3 each rank
    holds a shard of every parameter, so `model.save_pretrained` on rank 0 alone would write its empty shards: the
    trainable weights are gathered into 16-bit copies (what `Trainer.save_model` does for a PEFT model; needs
    stage3_gather_16bit_weights_on_model_save, set in launch/deepspeed/zero3.json). The gather is a collective:
    call this on every rank (rank 0 gets the weights). Under full fine-tuning every weight is trainable, so
    `exclude_frozen_parameters` leaves none out: the whole model is gathered."""
    if not getattr(trainer, "is_deepspeed_enabled", False):
        return None
    engine = trainer.deepspeed
    if (engine.config.get("zero_optimization") or {}).get("stage") != 3:
        return None
    return engine._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)


def is_full_model(path: str | os.PathLike[str]) -> bool:
    """True when `path` holds a full saved model (config.json + safetensors weights, one file or sharded) and no
    adapter: what a stage saves under `train.finetune=full`."""
    p = Path(path)
    weights = (p / "model.safetensors").is_file() or (p / "model.safetensors.index.json").is_file()
    return weights and (p / "config.json").is_file() and not (p / "adapter_config.json").exists()


def adapter_done(path: str | os.PathLike[str]) -> bool:
    """True when a stage's finished output is on disk: an adapter (weights + config), or under full fine-tuning a
    full model (`is_full_model`). Both are written through a temporary folder, so a half-written one never counts."""
    p = Path(path)
    return ((p / ADAPTER_FILE).is_file() and (p / "adapter_config.json").is_file()) or is_full_model(p)


def peft_config_for(finetune: str, lora: Mapping[str, Any]) -> Any:
    """The `peft_config` a TRL trainer gets: a LoRA (`lora_config(**lora)`) under `finetune="lora"`, None (every
    weight trains) under "full"; ValueError for another mode."""
    if finetune not in FINETUNE_MODES:
        raise ValueError(f"finetune={finetune!r}: must be one of {list(FINETUNE_MODES)}")
    return lora_config(**lora) if finetune == "lora" else None


def run_sft(model: Any, tokenizer: Any, records: list[dict[str, Any]], *, output_dir: str | os.PathLike[str],
            adapter_dir: str | os.PathLike[str], lora: Mapping[str, Any], settings: Mapping[str, Any], seed: int,
            report_to: str = "none", cpu: bool = True, callbacks: list[Any] | None = None,
            finetune: str = "lora") -> Any:
    """Train a fresh LoRA adapter on `records` and save it to `adapter_dir`; returns the PEFT model.

    Resumes from the newest checkpoint in `output_dir` when one exists. The base weights stay frozen
    (only LoRA matrices train), which `tests/simulate/test_training.py` checks. `finetune="full"`: every weight
    of `model` trains (no PEFT; `lora` is unused) and `adapter_dir` gets the full model (`is_full_model`).
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    # chat_template_kwargs (e.g. Qwen3's enable_thinking=False) is read per example by TRL's tokenizer step
    cols = ("prompt", "completion", "chat_template_kwargs")
    ds = Dataset.from_list([{c: r[c] for c in cols if c in r} for r in records])
    args = trainer_args(SFTConfig, settings, output_dir=output_dir, seed=seed, report_to=report_to, cpu=cpu,
                        completion_only_loss=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer,
                         peft_config=peft_config_for(finetune, lora), callbacks=callbacks)
    from zcp.simulate.suppress import mask_prefills

    mask_prefills(trainer, tokenizer, records)  # exposure.suppress: loss off the probe's pre-fills (else a no-op)
    return train_and_save(trainer, output_dir, adapter_dir, "SFT")


def train_and_save(trainer: Any, output_dir: Any, adapter_dir: Any, stage: str) -> Any:
    """Train (resuming from the newest checkpoint in output_dir), save the adapter atomically on the main
    process (gathered from the ranks' shards under ZeRO-3: `gathered_state_dict`), and wait for every process;
    returns the trained model. Shared by the SFT and GRPO stages.

    A write that fails on the way (a checkpoint on a full disk: torch raises a bare "unexpected pos"
    RuntimeError) is re-raised as the OSError naming the folder and the errno (`zcp.core.io.as_write_error`), which
    the entry points print as one line; the checkpoints written before it stay, so a rerun resumes."""
    from zcp.core.io import naming_write_errors

    ckpt = last_checkpoint(output_dir)
    if ckpt:
        log.info("%s: resuming from %s", stage, ckpt)
    with naming_write_errors(output_dir):  # a checkpoint that cannot be written: one line naming the disk
        trainer.train(resume_from_checkpoint=ckpt)
    state_dict = gathered_state_dict(trainer)  # every rank: a collective under ZeRO-3
    if trainer.accelerator.is_main_process:
        with naming_write_errors(adapter_dir):
            save_adapter_atomic(trainer.model, adapter_dir, state_dict)
    trainer.accelerator.wait_for_everyone()
    return trainer.model

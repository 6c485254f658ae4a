"""Pre-flight of the simulation's training stages: what a stage will cost, said in one line before it trains, and
`run.max_stage_seconds`, the limit a stage's estimate must stay under.

On a real model on a CPU a training stage takes minutes to hours (SmolLM2-135M on two cores: seconds per SFT step of
a few sequences; a GRPO step generates its completions token by token), so before a stage trains, one line
(`StageEstimate.line`) says:

* the data: examples and tokens (SFT: prompt + completion as the chat template renders them, cut at `max_length`,
  per epoch; GRPO: the prompts' tokens, and at most how many tokens the stage generates);
* optimizer steps, as the trainer counts them (`zcp.simulate.sft.lr_schedule`);
* memory from the parameter count (`ModelShape`: the model built on PyTorch's meta device from its config.json, no
  weight read; the LoRA attached by PEFT itself, so the targeted layers and the trained parameters are PEFT's): the
  weights, and for the trained parameters their gradients and AdamW's two moments. Activations are not counted;
* time: steps x `run.step_seconds.<stage>` when that is configured, and then a stage over `run.max_stage_seconds` is
  refused before its model loads. Either way `StageTimer` times the first `run.preflight_steps` optimizer steps and
  says the measured rate and estimate in a second line; a stage whose measured estimate exceeds the limit is
  stopped there (a one-line ConfigError naming the estimate).

Progress with an ETA during a stage is the trainer's own tqdm bar (`disable_tqdm: false` in the train profiles).

`check_lora_targets` (from `zcp.simulate.checks.check_inputs`, before any model loads) refuses LoRA target modules
the model does not have, naming its linear layers. The profiles' `all-linear` is resolved by PEFT from the
architecture (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj on a Llama, toy or real), so it is right
for every model; an explicit list must name layers of this architecture.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from zcp.errors import ConfigError
from zcp.simulate.rundir import resolve_model_path

log = logging.getLogger(__name__)

LIMIT_KEY = "run.max_stage_seconds"
# what makes a stage shorter (named when it is refused)
SFT_SHORTER = "lower exposure.sft_epochs, or the examples: exposure.k, benchmark.n, exposure.clean_fraction"
GRPO_SHORTER = ("lower exposure.grpo_steps, train.grpo.max_completion_length or the completions per step "
                "(train.grpo.per_device_train_batch_size)")


# ------------------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class ModelShape:
    """A model's size as a training stage sees it: `params` (the model's own), `trainable` (the LoRA matrices, or
    every parameter under full fine-tuning), `targets` (the layer names LoRA wraps; empty under full fine-tuning) and
    `dtype_bytes` (bytes per parameter in the dtype training loads)."""

    params: int
    trainable: int
    targets: tuple[str, ...]
    dtype_bytes: int
    finetune: str = "lora"

    def memory_bytes(self, reference_copy: bool = False) -> int:
        """Weights (the LoRA matrices beside the frozen ones) + gradients and AdamW's two moments of the trained
        parameters (+ a frozen copy for a reference model: GRPO with a KL term under full fine-tuning).
        Activations are not counted: they grow with batch x length, and this is a floor."""
        adapter = self.trainable if self.finetune == "lora" else 0
        weights = (self.params + adapter) * self.dtype_bytes
        optimizer = 3 * self.trainable * self.dtype_bytes
        return weights + optimizer + (self.params * self.dtype_bytes if reference_copy else 0)


def local_model_dir(path: str) -> Path | None:
    """The local folder of `model.path` when it holds a config.json, else None (a hub id: nothing read offline)."""
    p = Path(resolve_model_path(str(path)))
    return p if (p / "config.json").is_file() else None


def _linear_names(model: Any) -> list[str]:
    """The distinct leaf names of a model's linear layers (nn.Linear, GPT-2's Conv1D), the output layer left out."""
    import torch
    from transformers.pytorch_utils import Conv1D

    out = getattr(model, "get_output_embeddings", lambda: None)()
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, (torch.nn.Linear, Conv1D)) and m is not out and name})


def model_shape(path: str, *, trust_remote_code: bool = False, dtype: str | None = "auto", finetune: str = "lora",
                lora: Mapping[str, Any] | None = None, key: str = "train.lora") -> ModelShape | None:
    """The `ModelShape` of the model at `path` with the LoRA `lora` (`zcp.simulate.sft.lora_config` keywords), built
    on the meta device from config.json (no weights read); None when `path` is not a local folder.

    ConfigError (one line, naming `key`) when a LoRA target names no layer of the model (each name of a list must
    match a module name or its last part, as PEFT matches them), listing the model's linear layers."""
    import torch
    from peft import get_peft_model
    from peft.tuners.lora import LoraLayer
    from transformers import AutoConfig, AutoModelForCausalLM

    from zcp.simulate.sft import lora_config, torch_dtype
    from zcp.simulate.train_config import LoraSettings

    folder = local_model_dir(path)
    if folder is None:
        return None
    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    params = sum(p.numel() for p in model.parameters())
    nbytes = torch.empty((), dtype=torch_dtype(dtype)).element_size()
    if finetune == "full":
        return ModelShape(params=params, trainable=params, targets=(), dtype_bytes=nbytes, finetune="full")
    settings = {**asdict(LoraSettings()), **(lora or {})}  # the schema's defaults for what `lora` leaves out
    wanted = settings["target_modules"]
    linear = _linear_names(model)

    def refuse(what: str) -> ConfigError:
        return ConfigError(f"{key}.target_modules={wanted}: {what} of {folder.name} ({config.model_type}); its "
                           f"linear layers: {', '.join(linear)} (all-linear: every one of them)")

    if not isinstance(wanted, str):
        names = [n for n, _ in model.named_modules() if n]
        missing = [t for t in wanted if not any(n == t or n.endswith(f".{t}") for n in names)]
        if missing:
            raise refuse(f"{missing} name no layer")
    try:
        peft_model = get_peft_model(model, lora_config(**settings))
    except ValueError as e:  # peft's NoMatchingPeftModuleError: nothing matched
        raise refuse(f"no layer matched ({' '.join(str(e).split())[:200]})") from None
    targets = tuple(sorted({n.rsplit(".", 1)[-1] for n, m in peft_model.named_modules() if isinstance(m, LoraLayer)}))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    return ModelShape(params=params, trainable=trainable, targets=targets, dtype_bytes=nbytes, finetune="lora")


def check_lora_targets(s: Any) -> None:
    """Before any model loads: every enabled LoRA stage's target modules (train.lora, train.grpo_lora) name layers of
    the base model (`model_shape` raises the one-line ConfigError). A model given by hub id is not checked here."""
    if s.train.finetune != "lora" or local_model_dir(s.model.path) is None:
        return
    stages = list(s.train.stages)
    loras = [("train.lora", s.train.lora)]
    if "grpo" in stages and int(s.exposure.grpo_steps) > 0 and s.train.grpo_lora is not None:
        loras.append(("train.grpo_lora", s.train.grpo_lora))
    for key, lora in loras:
        model_shape(s.model.path, trust_remote_code=bool(s.model.trust_remote_code), dtype=s.model.dtype,
                    lora={**asdict(lora), "r": int(s.exposure.lora_r)}, key=key)


def check_step_seconds(s: Any) -> None:
    """Before any model loads: every name of `run.step_seconds` is a training stage (a stage registered at run time
    included), so a misspelt one is refused instead of leaving its stage unestimated."""
    from zcp.config.checks import unknown_key_message
    from zcp.simulate.train_config import TRAINING_STAGE_NAMES

    for name in s.run.step_seconds:
        if name not in TRAINING_STAGE_NAMES:
            raise ConfigError(unknown_key_message("run.step_seconds", str(name), TRAINING_STAGE_NAMES,
                                                  " (a training stage)"))


# ------------------------------------------------------------------------------------------------ the data
def chat_tokens(tokenizer: Any, messages: Sequence[Mapping[str, Any]], *, generation_prompt: bool = False,
                chat_template_kwargs: Mapping[str, Any] | None = None) -> int:
    """Tokens of `messages` as the trainers render them (the chat template; without one, the contents joined)."""
    try:
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt,
                                             **dict(chat_template_kwargs or {}))
    except (ValueError, TypeError):  # a tokenizer without a chat template
        text = "\n".join(str(m.get("content", "")) for m in messages)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class StageEstimate:
    """What a training stage will cost (module doc): `stage` (its name: the key of `run.step_seconds`), `examples`,
    `tokens` (SFT: per epoch, prompt + completion, cut at max_length; GRPO: the prompts'), `generated` (GRPO: at most
    this many completion tokens over the stage), `steps` (optimizer steps), `shape` (None: a hub model, not sized)
    and `step_seconds` (configured; None: timed by `StageTimer`)."""

    stage: str
    label: str  # SFT, GRPO: as the logs name the stage
    examples: int
    tokens: int
    steps: int
    generated: int = 0
    epochs: float | None = None
    shape: ModelShape | None = None
    reference_copy: bool = False
    step_seconds: float | None = None
    fix: str = ""  # the keys that make the stage shorter (named in a refusal)
    done: int = 0  # optimizer steps already done: a checkpoint the stage resumes from (`steps_done`)

    @property
    def seconds(self) -> float | None:
        """Estimated seconds of what is left of the stage: its steps not done x the configured seconds per step
        (None: not configured)."""
        return None if self.step_seconds is None else max(self.steps - self.done, 0) * float(self.step_seconds)

    def line(self) -> str:
        """The one-line pre-flight estimate."""
        if self.generated:  # GRPO: prompts in, completions generated
            data = f"{self.examples:,} prompts, {self.tokens:,} tokens, at most {self.generated:,} generated"
        else:
            data = f"{self.examples:,} examples, {self.tokens:,} tokens per epoch (prompt + completion)"
            data += f" x {self.epochs:g} epoch(s)" if self.epochs is not None else ""
        parts = [f"{self.label} pre-flight: {data}",
                 _steps(self.steps) + (f" ({self.done:,} done: resumed from a checkpoint)" if self.done else "")]
        sh = self.shape
        if sh is not None:
            trained = (f"{_count(sh.trainable)} trained (LoRA on {', '.join(sh.targets)})" if sh.finetune == "lora"
                       else "all trained")
            parts.append(f"{_count(sh.params)} parameters, {trained}: ~{_gib(sh.memory_bytes(self.reference_copy))} "
                         "for weights, gradients and AdamW moments (activations not counted)")
        if self.seconds is not None:
            parts.append(f"time ~{duration(self.seconds)} at {self.step_seconds:g} s/step "
                         f"(run.step_seconds.{self.stage})")
        else:
            parts.append("time: measured over the first steps (or set run.step_seconds."
                         f"{self.stage} to estimate before the model loads)")
        return "; ".join(parts)


def _steps(n: int) -> str:
    return f"{n:,} optimizer step{'' if n == 1 else 's'}"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n:,}"


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**27 else f"{n / 2**20:.1f} MiB"


def duration(seconds: float) -> str:
    """Seconds as a person reads them: 40 s, 12 min, 2.5 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _shape(config: Any, lora: Mapping[str, Any], key: str) -> ModelShape | None:
    m = config.model
    return model_shape(m.path, trust_remote_code=bool(m.trust_remote_code), dtype=m.dtype,
                       finetune=config.train.finetune, lora=lora, key=key)


def sft_estimate(config: Any, settings: Mapping[str, Any], records: Sequence[Mapping[str, Any]], tokenizer: Any, *,
                 lora: Mapping[str, Any], processes: int = 1, stage: str = "sft", fix: str = SFT_SHORTER,
                 done: int = 0) -> StageEstimate:
    """The SFT stage's estimate on its `records` (conversational prompt/completion) under `settings` (SFTConfig
    fields) on the run's base model (`config`: SimConfig); `fix` names the keys that shorten it, `done` the steps a
    checkpoint holds already (`steps_done`)."""
    from trl import SFTConfig

    from zcp.simulate.sft import lr_schedule, trainer_args

    args = trainer_args(SFTConfig, settings, output_dir="unused", seed=0, report_to="none", cpu=True)
    cap = int(args.max_length) if args.max_length else None
    ctk = config.model.chat_template_kwargs
    tokens = 0
    for r in records:
        n = chat_tokens(tokenizer, [*r["prompt"], *r["completion"]], chat_template_kwargs=ctk)
        tokens += min(n, cap) if cap else n
    sched = lr_schedule(SFTConfig, settings, len(records), stage="SFT", processes=processes)
    return StageEstimate(stage=stage, label="SFT", examples=len(records), tokens=tokens, steps=sched.steps,
                         epochs=float(args.num_train_epochs) if int(args.max_steps) <= 0 else None,
                         shape=_shape(config, lora, "train.lora"), step_seconds=config.run.step_seconds.get(stage),
                         fix=fix, done=done)


def grpo_estimate(config: Any, settings: Mapping[str, Any], records: Sequence[Mapping[str, Any]], tokenizer: Any, *,
                  lora: Mapping[str, Any], processes: int = 1, stage: str = "grpo", fix: str = GRPO_SHORTER,
                  done: int = 0) -> StageEstimate:
    """The GRPO stage's estimate: its prompts' tokens, at most steps x completions per step x max_completion_length
    generated tokens (completions per step: batch x accumulation x processes / num_iterations), steps = max_steps."""
    from trl import GRPOConfig

    from zcp.simulate.sft import lr_schedule, trainer_args

    args = trainer_args(GRPOConfig, settings, output_dir="unused", seed=0, report_to="none", cpu=True)
    ctk = config.model.chat_template_kwargs
    tokens = sum(chat_tokens(tokenizer, r["prompt"], generation_prompt=True, chat_template_kwargs=ctk) for r in records)
    sched = lr_schedule(GRPOConfig, settings, None, stage="GRPO", processes=processes)
    per_step = math.ceil(args.per_device_train_batch_size * args.gradient_accumulation_steps * processes
                         / max(1, int(getattr(args, "num_iterations", 1) or 1)))
    generated = sched.steps * per_step * int(args.max_completion_length)
    full = config.train.finetune == "full"
    key = "train.lora"  # the LoRA settings GRPO trains with: its own when given
    if config.train.grpo_lora is not None:
        key = "train.grpo_lora"
    return StageEstimate(stage=stage, label="GRPO", examples=len(records), tokens=tokens, steps=sched.steps,
                         generated=generated, shape=_shape(config, lora, key),
                         reference_copy=full and float(args.beta or 0.0) > 0,
                         step_seconds=config.run.step_seconds.get(stage), fix=fix, done=done)


def steps_done(output_dir: str | Path) -> int:
    """Optimizer steps a stage has done already: the global step of the newest complete checkpoint in its trainer's
    folder (`zcp.simulate.sft.last_checkpoint`, which the trainer resumes from), else 0."""
    import json

    from zcp.simulate.sft import last_checkpoint

    ckpt = last_checkpoint(output_dir)
    if ckpt is None:
        return 0
    try:
        return int(json.loads((Path(ckpt) / "trainer_state.json").read_text()).get("global_step", 0))
    except (OSError, ValueError):
        return 0


def _too_long(est: StageEstimate, seconds: float, how: str, limit: float) -> ConfigError:
    return ConfigError(f"{est.label}: estimated {duration(seconds)} ({how}) exceeds {LIMIT_KEY}={limit:g}; make the "
                       f"stage shorter ({est.fix}) or raise {LIMIT_KEY}")


def announce(est: StageEstimate, run: Any) -> StageTimer:
    """Log the estimate's line; refuse (ConfigError) a configured estimate over `run.max_stage_seconds` before the
    stage's model loads; return the `StageTimer` to hand the trainer (it times the first `run.preflight_steps`)."""
    log.info("%s", est.line())
    limit = run.max_stage_seconds
    if limit is not None and est.seconds is not None and est.seconds > float(limit):
        raise _too_long(est, est.seconds, f"{_steps(est.steps - est.done)} at {est.step_seconds:g} s/step, "
                        f"run.step_seconds.{est.stage}", float(limit))
    return StageTimer(est, limit, int(run.preflight_steps))


# ------------------------------------------------------------------------------------------------ the timer
def _max_over_processes(value: float) -> float:
    """The largest `value` over the processes of a distributed run (every rank then decides alike)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    import torch
    from accelerate import PartialState

    t = torch.tensor([value], dtype=torch.float64, device=PartialState().device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


class StageTimer(TrainerCallback):
    """A trainer callback: times the first `steps` optimizer steps of this run of the stage (a resumed stage: from
    where it resumed), logs the measured rate and the estimate for the stage's remaining steps, and stops a stage
    whose estimate (elapsed + remaining steps at the measured rate) exceeds `limit` seconds: a ConfigError naming the
    estimate, raised out of `trainer.train` (the steps done are kept only in a checkpoint saved before). Nothing is
    refused once the last step is done. `measured` holds (steps, seconds, estimate) once timed."""

    def __init__(self, estimate: StageEstimate, limit: float | None, steps: int) -> None:
        self.estimate, self.limit, self.steps = estimate, limit, max(1, int(steps))
        self._t0: float | None = None
        self._start = 0
        self.measured: tuple[int, float, float] | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._t0 is None:
            self._t0, self._start = time.perf_counter(), int(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.measured is not None or self._t0 is None:
            return
        done = int(state.global_step) - self._start
        total = int(state.max_steps)
        if done < self.steps and state.global_step < total:
            return
        elapsed = _max_over_processes(time.perf_counter() - self._t0)
        rate = elapsed / max(done, 1)
        left = max(total - int(state.global_step), 0)
        estimate = elapsed + rate * left
        self.measured = (done, elapsed, estimate)
        est = self.estimate
        log.info("%s: %d of %d optimizer step(s) in %.1f s (%.2f s/step; run.step_seconds.%s=%.3g estimates before the "
                 "model loads): ~%s in all, ~%s left", est.label, int(state.global_step), total, elapsed, rate,
                 est.stage, rate, duration(estimate), duration(rate * left))
        if self.limit is not None and left > 0 and estimate > float(self.limit):
            raise _too_long(est, estimate, f"{_steps(total)} at {rate:.2f} s/step, measured over the first "
                            f"{done}", float(self.limit))

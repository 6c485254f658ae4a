"""Checks of a training stage's model before anything loads, from its config.json alone.

`model_shape` builds the model on PyTorch's meta device (no weight read) and attaches the LoRA with PEFT itself, so
the layers it targets and the parameters it trains are PEFT's own. `check_lora_targets` (from
`zcp.simulate.checks.check_inputs`, before any model loads) refuses LoRA target modules the model does not have,
naming its linear layers: the profiles' `all-linear` is resolved by PEFT from the architecture (q_proj, k_proj,
v_proj, o_proj, gate_proj, up_proj, down_proj on a Llama, toy or real), so it is right for every model; an explicit
list must name layers of this architecture (GPT-2's c_attn on a Llama once failed inside the SFT stage, after the
data and the base model's evaluation were done).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zcp.errors import ConfigError
from zcp.simulate.rundir import resolve_model_path


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

    from zcp.config.schemas import LoraSettings
    from zcp.simulate.sft import lora_config, torch_dtype

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

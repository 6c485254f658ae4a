"""One factory for every job: `build_backend(model_cfg)` picks the engine named by `model.backend`.

Engines register a builder `(ModelConfig, progress) -> Backend` under a name, with the dataclass of their
own settings (`model.<name>.*`) when they have any. The built-in ones are registered by module path and
imported only when chosen, so `hf` never imports vLLM or openai and a machine without vLLM runs everything
else; their settings are the `vllm` and `api` groups of `zcp.config.model.ModelConfig`. Detection,
contamination, the simulation, ArithMark, calibration and the reference / paraphrase LLM pipelines all
build their models here, so a model
config (`chat_template_kwargs`, `max_length`, LoRA adapter, engine settings) means the same in each.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Callable
from typing import Any

from zcp.backends.base import Backend, missing_members
from zcp.config.model import (
    BACKEND_NAMES,
    ModelConfig,
    add_engine_name,
    check_model_path,
    model_config,
    remove_engine_name,
)

Builder = Callable[[ModelConfig, bool], Backend]

# name -> "module:function" (imported on first use) or the builder itself
_REGISTRY: dict[str, str | Builder] = {
    "hf": "zcp.backends.hf:from_config",
    "vllm": "zcp.backends.vllm:from_config",
    "openai": "zcp.backends.openai_api:from_config",
}
assert set(BACKEND_NAMES) <= set(_REGISTRY)


def register_backend(name: str, builder: Builder | str, settings: type | None = None) -> None:
    """Add an engine: `model.backend=name` then builds it with `builder(model_config, progress)` (a callable, or
    "module:function" imported when first chosen), which returns a `Backend` subclass instance.

    `settings`: the engine's own settings, a dataclass whose fields carry the defaults (and whose
    `__post_init__` checks ranges with `zcp.config.checks.check_value`). Its keys are `model.<name>.*`: composed
    by Hydra (a misspelt key fails when composing), typed and checked by `validate` and `build_backend` (one
    ConfigError line naming the key), and read by the builder as `model_config.<name>` (or
    `model_config.settings()`). Register before the config is composed (import the engine's module first).
    """
    if name in BACKEND_NAMES:
        raise ValueError(f"register_backend({name!r}): a built-in engine's name")
    _REGISTRY[name] = builder
    add_engine_name(name, settings)  # model.backend=name (and model.<name>.*) now validate


def unregister_backend(name: str) -> None:
    """Remove an engine added by `register_backend` (its name and settings group too)."""
    if name in BACKEND_NAMES:
        raise ValueError(f"unregister_backend({name!r}): a built-in engine")
    _REGISTRY.pop(name, None)
    remove_engine_name(name)


def backend_names() -> list[str]:
    """Registered engine names."""
    return sorted(_REGISTRY)


# the package each built-in engine needs, and the pyproject extra that installs it
_REQUIRES = {"vllm": ("vllm", "vllm"), "openai": ("openai", "api")}


def _builder(name: str) -> Builder:
    from zcp.errors import ConfigError

    entry = _REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"model.backend={name!r}: must be one of {backend_names()}")
    package, extra = _REQUIRES.get(name, (None, None))
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(f"model.backend={name} needs the {package} package, which is not installed; "
                          f"install it with pip install -e '.[{extra}]'")
    if isinstance(entry, str):
        module, fn = entry.split(":")
        entry = getattr(importlib.import_module(module), fn)
    return entry  # type: ignore[return-value]


def check_paths(cfg: ModelConfig) -> None:
    """Model and adapter paths: local folders that exist or hub ids (engines that load weights locally)."""
    if cfg.backend == "openai":  # a served model's name, not a path; the tokenizer is a local folder
        if not (cfg.api.model or cfg.path):
            from zcp.errors import ConfigError

            raise ConfigError("model.backend=openai needs model.api.model (or model.path): the served model's name")
        if cfg.api.tokenizer:
            check_model_path(cfg.api.tokenizer, "model.api.tokenizer")
        return
    check_model_path(cfg.path, "model.path")
    if cfg.adapter:
        check_model_path(cfg.adapter, "model.adapter")


def default_name(cfg: ModelConfig) -> str:
    """`name`, else (API) the served model's name, else the last component of `path`."""
    return cfg.display_name()  # defined once, in the schema


def build_backend(model_cfg: Any, progress: bool = False) -> Backend:
    """The engine a `model` config names (`model.backend`: hf | vllm | openai), checked and loaded.

    The config is validated first (unknown keys, ranges, paths: one-line ConfigError before any weights
    load). The backend's `name` is `model.name` (else the folder name) and its `fingerprint` says what
    decides its outputs besides the prompt: the weights' content, and the rendering options
    (`chat_template_kwargs`, `chat`) when they differ from the defaults.
    """
    cfg = model_config(model_cfg)
    check_paths(cfg)
    cfg.settings()  # a run-time engine's settings checked (their defaults when not given) before it loads
    backend = _builder(cfg.backend)(cfg, progress)
    missing = missing_members(backend)
    if missing:
        raise TypeError(f"model.backend={cfg.backend}: the builder returned a {type(backend).__name__}, which lacks "
                        f"{missing}; subclass zcp.backends.Backend (its defaults declare every capability)")
    backend.name = default_name(cfg)
    render = {k: v for k, v in (("chat_template_kwargs", cfg.chat_template_kwargs), ("chat", cfg.chat))
              if v != {"chat_template_kwargs": {}, "chat": True}[k]}
    if render:
        backend.fingerprint = f"{backend.fingerprint}|{json.dumps(render, sort_keys=True)}"
    return backend


def wrap_model(model: Any, tokenizer: Any, *, chat_template_kwargs: dict[str, Any] | None = None, chat: bool = True,
               gen_batch_size: int = 64, **kwargs: Any) -> Any:
    """The `hf` engine over a model already in memory (one a training job holds: Table 6's evaluation),
    rendered with the model config's options (`chat_template_kwargs`, e.g. Qwen3's enable_thinking=False,
    and `chat`) so its prompts are the ones the model was trained and is probed on."""
    from zcp.backends.hf import HFBackend

    return HFBackend(model, tokenizer, chat_template_kwargs=chat_template_kwargs, chat=chat,
                     gen_batch_size=gen_batch_size, **kwargs)

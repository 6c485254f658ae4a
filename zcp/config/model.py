"""Typed schema of the `model` config group (conf/model/*.yaml), registered in Hydra's ConfigStore.

One dataclass for every engine: the keys shared by all (`backend`, `path`, `name`, `chat_template_kwargs`,
`max_length`, per-model probe settings) and one sub-group per engine: `vllm` and `api` for the built-in ones,
and `model.<name>` for an engine registered at run time with its own settings dataclass
(`zcp.backends.register_backend(name, builder, settings=cls)`, kept in `ENGINE_SETTINGS`): its keys are
composed, typed and checked by that dataclass like the built-in groups', with no edit of this file. An unknown or
misspelt key (`model.chat_template_kwarg=...`, `model.vllm.tensor_parallel=2`) fails when Hydra composes
the config; ranges and choices fail in `__post_init__`, run by `zcp.config.schemas.validate` before any model
loads. Model configs outside the group (ArithMark's `model:`, reference generators and judges,
`paraphrase.model`) are checked the same way by `zcp.backends.build_backend` (through `model_config`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from zcp.config.checks import check_device, check_value
from zcp.config.conform import build
from zcp.core.cache import FETCH_COMMAND, real_model_name
from zcp.errors import ConfigError

BACKEND_NAMES = ("hf", "vllm", "openai")  # the built-in engines (zcp.backends.registry)
# every engine name a `model.backend` may take: the built-in ones, plus those zcp.backends.register_backend adds
ENGINE_NAMES: list[str] = list(BACKEND_NAMES)


# the settings dataclass of each engine registered at run time with one: `model.<name>.*` (ModelConfig.EXTRA_KEYS)
ENGINE_SETTINGS: dict[str, type] = {}


def add_engine_name(name: str, settings: type | None = None) -> None:
    """Accept `model.backend=name` and, given `settings` (a dataclass whose fields carry the defaults), the keys
    `model.<name>.*` it types (called by zcp.backends.register_backend: engines registered at run time).

    The `model` group's schema in Hydra's ConfigStore is stored again with `<name>` as a sub-group, so
    `model.<name>.key=value` composes (and a misspelt key fails when composing, as for `model.vllm.*`)."""
    if settings is not None:
        if not dataclasses.is_dataclass(settings) or not isinstance(settings, type):
            raise TypeError(f"register_backend({name!r}): settings must be a dataclass, not {settings!r}")
        if name in {f.name for f in fields(ModelConfig)}:
            raise ValueError(f"register_backend({name!r}): model.{name} is already a key of the model config")
        ENGINE_SETTINGS[name] = settings
    else:
        ENGINE_SETTINGS.pop(name, None)
    if name not in ENGINE_NAMES:
        ENGINE_NAMES.append(name)
    store_model_schema()


def remove_engine_name(name: str) -> None:
    """Undo `add_engine_name` for a run-time engine (the built-in names stay)."""
    if name in BACKEND_NAMES:
        raise ValueError(f"{name} is a built-in engine")
    ENGINE_SETTINGS.pop(name, None)
    if name in ENGINE_NAMES:
        ENGINE_NAMES.remove(name)
    store_model_schema()


def model_schema() -> type:
    """The `model` group's composed schema: `ModelConfig`, plus a `<name>` sub-group per `ENGINE_SETTINGS` entry."""
    if not ENGINE_SETTINGS:
        return ModelConfig
    extra = [(n, cls, field(default_factory=cls)) for n, cls in ENGINE_SETTINGS.items()]
    return dataclasses.make_dataclass("ModelConfig", extra, bases=(ModelConfig,))


def store_model_schema() -> None:
    """Store `model_schema()` as option `schema` of the `model` group (what conf/model/*.yaml extend)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="model", name="schema", node=model_schema())

API_ENDPOINTS = ("chat", "completions")
API_LOGPROBS = ("auto", "echo", "none")


@dataclass
class VLLMSettings:
    """vLLM engine settings (`model.backend=vllm`); anything else vllm.LLM accepts goes in `engine_kwargs`."""

    tensor_parallel_size: int = 1  # GPUs one model is sharded over
    data_parallel_size: int = 1  # model replicas (vLLM's data parallelism)
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # null: model.max_length, else the model's positions
    enforce_eager: bool = False  # true: no CUDA graphs (faster start, slower decode)
    enable_prefix_caching: bool = True  # probe prompts share the chat template's head
    max_num_seqs: int | None = None  # null: vLLM's default
    # model.adapter: merge = merged into a copy of the weights under merged_dir (cached by content), so
    # prompt log-probs are right; lora = served as a vLLM LoRA request (no copy; generation only: vLLM's
    # prompt_logprobs with LoRA are wrong or crash, vllm-project/vllm#16668, #51594)
    adapter_mode: str = "merge"
    merged_dir: str = "outputs/merged_models"
    max_lora_rank: int = 64
    seed: int = 0
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_value(self.tensor_parallel_size >= 1, "model.vllm.tensor_parallel_size", self.tensor_parallel_size, ">= 1")
        check_value(self.data_parallel_size >= 1, "model.vllm.data_parallel_size", self.data_parallel_size, ">= 1")
        check_value(0.0 < self.gpu_memory_utilization <= 1.0, "model.vllm.gpu_memory_utilization",
                    self.gpu_memory_utilization, "in (0, 1]")
        check_value(self.max_model_len is None or self.max_model_len >= 1, "model.vllm.max_model_len",
                    self.max_model_len, "null or >= 1")
        check_value(self.max_lora_rank >= 1, "model.vllm.max_lora_rank", self.max_lora_rank, ">= 1")
        check_value(self.adapter_mode in ("merge", "lora"), "model.vllm.adapter_mode", self.adapter_mode, "merge or lora")
        check_value(isinstance(self.engine_kwargs, dict), "model.vllm.engine_kwargs", self.engine_kwargs,
                    "a mapping of vllm.LLM keyword arguments")


@dataclass
class APISettings:
    """An OpenAI-compatible endpoint (`model.backend=openai`). The key is read from the environment only."""

    base_url: str | None = None  # null: $OPENAI_BASE_URL, else the official API
    api_key_env: str = "OPENAI_API_KEY"  # NAME of the environment variable holding the key (never the key)
    endpoint: str = "chat"  # chat (/v1/chat/completions) | completions (/v1/completions, needs `tokenizer`)
    model: str | None = None  # the served model's name; null: model.path
    tokenizer: str | None = None  # local tokenizer folder of the served model: pre-fill, token ids, p metrics
    logprobs: str = "auto"  # auto | echo (prompt log-probs via echo+logprobs, e.g. vLLM's server) | none
    concurrency: int = 8  # requests in flight at once
    max_retries: int = 6  # retries on 429 / 5xx / connection errors, exponential backoff (the openai client's)
    timeout: float = 120.0  # seconds per request
    cache_dir: str | None = "outputs/api_cache"  # responses by request hash: a killed run never pays twice
    seed: int | None = 0  # sent with every request (servers that honour it are reproducible at temperature 0)

    def __post_init__(self) -> None:
        check_value(self.endpoint in API_ENDPOINTS, "model.api.endpoint", self.endpoint, f"one of {list(API_ENDPOINTS)}")
        check_value(self.logprobs in API_LOGPROBS, "model.api.logprobs", self.logprobs, f"one of {list(API_LOGPROBS)}")
        check_value(self.concurrency >= 1, "model.api.concurrency", self.concurrency, ">= 1")
        check_value(self.max_retries >= 0, "model.api.max_retries", self.max_retries, ">= 0")
        check_value(self.timeout > 0, "model.api.timeout", self.timeout, "> 0")
        check_value(bool(self.api_key_env) and not str(self.api_key_env).startswith(("sk-", "Bearer")),
                    "model.api.api_key_env", "<hidden>",
                    "the NAME of an environment variable (e.g. OPENAI_API_KEY), never the key itself")
        check_value(self.endpoint != "completions" or bool(self.tokenizer), "model.api.tokenizer", self.tokenizer,
                    "a local tokenizer folder when model.api.endpoint=completions (prompts are sent as token ids)")


@dataclass
class ModelProbeSettings:
    """Probe settings that differ between models; null keeps the `probe` group's value."""

    full_cot_max_tokens: int | None = None  # long reasoners need thousands of tokens to reach \\boxed{}
    zero_cot_max_tokens: int | None = None
    full_cot_suffix: str | None = None  # e.g. Qwen-Math's "Please reason step by step, ..." instruction
    system: str | None = None

    def __post_init__(self) -> None:
        for key in ("full_cot_max_tokens", "zero_cot_max_tokens"):
            val = getattr(self, key)
            check_value(val is None or val >= 1, f"model.probe.{key}", val, "null or >= 1")

    def overrides(self) -> dict[str, Any]:
        """The keys this model sets (not null), to apply over the `probe` group."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass
class ModelConfig:
    """A model and the engine that runs it (conf/model/*.yaml extend this through conf/model/tiny.yaml)."""

    backend: str = "hf"  # hf (transformers) | vllm | openai (an OpenAI-compatible server)
    name: str | None = None  # null: the folder name of `path`
    path: Any = None  # local folder or hub id; for backend=openai the served model's name (or api.model)
    adapter: str | None = None  # a PEFT LoRA folder (hf: merged at load; vllm: served as a LoRA request)
    dtype: str = "auto"  # auto: bf16 on GPU, fp32 on CPU
    device: str | None = None  # hf only; null: cuda if available, else cpu
    trust_remote_code: bool = False
    chat: bool = True  # false: never render the tokenizer's chat template (base models)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. {enable_thinking: false} for Qwen3
    max_length: int | None = None  # positions a probe may use (null: the model's); vLLM's max_model_len default
    max_batch_tokens: int = 16384  # hf: padded tokens per forward pass
    batch_size: int = 256  # hf: rows per scoring batch (what conf/model/tiny.yaml, every model config's base, sets)
    gen_batch_size: int = 128  # hf: rows per generation batch (as tiny.yaml)
    probe: ModelProbeSettings = field(default_factory=ModelProbeSettings)
    vllm: VLLMSettings = field(default_factory=VLLMSettings)
    api: APISettings = field(default_factory=APISettings)
    # model.<name>: the settings of an engine registered at run time, checked by its dataclass and kept as the
    # attribute `<name>` (zcp.config.conform.build keeps EXTRA_KEYS values for KEEP_EXTRA_KEYS schemas)
    EXTRA_KEYS: ClassVar[dict[str, type]] = ENGINE_SETTINGS
    KEEP_EXTRA_KEYS: ClassVar[bool] = True

    def __getattr__(self, name: str) -> Any:
        """`cfg.<name>` of a run-time engine with settings, when the config did not set them: their defaults."""
        settings = ENGINE_SETTINGS.get(name) if not name.startswith("_") else None
        if settings is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self.__dict__[name] = build(settings, {}, f"model.{name}")
        return value

    def replace(self, **changes: Any) -> ModelConfig:
        """`dataclasses.replace` that keeps the run-time engines' settings (attributes, not fields)."""
        out = dataclasses.replace(self, **changes)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k in ENGINE_SETTINGS})
        return out

    def settings(self, engine: str | None = None) -> Any:
        """The settings of `engine` (default: `backend`): `vllm`, `api`, a run-time engine's dataclass, or None."""
        engine = engine or self.backend
        if engine in ENGINE_SETTINGS:
            return getattr(self, engine)
        return {"vllm": self.vllm, "openai": self.api}.get(engine)

    def __post_init__(self) -> None:
        for key, cls in (("probe", ModelProbeSettings), ("vllm", VLLMSettings), ("api", APISettings)):
            val = getattr(self, key)
            if val is None:
                setattr(self, key, cls())
            elif isinstance(val, dict):
                setattr(self, key, _build(cls, val, f"model.{key}"))
        engines = sorted(ENGINE_NAMES)  # engines registered at run time count too
        check_value(self.backend in engines, "model.backend", self.backend, f"one of {engines}")
        check_value(self.dtype in ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"), "model.dtype",
                    self.dtype, "auto, float32, bfloat16 or float16")
        check_value(self.max_length is None or self.max_length >= 1, "model.max_length", self.max_length, "null or >= 1")
        for key in ("max_batch_tokens", "batch_size", "gen_batch_size"):
            check_value(getattr(self, key) >= 1, f"model.{key}", getattr(self, key), ">= 1")
        check_value(isinstance(self.chat_template_kwargs, dict), "model.chat_template_kwargs",
                    self.chat_template_kwargs, "a mapping (e.g. {enable_thinking: false})")
        if self.backend != "openai":  # a served model runs elsewhere: its device is not this machine's
            check_device(self.device, "model.device")

    def display_name(self) -> str:
        """The model's name in run dirs and reports: `name`, else (backend=openai) the served model's `api.model`,
        else the last component of `path` ("model" for a config with neither name nor path)."""
        if self.name:
            return str(self.name)
        if self.backend == "openai" and self.api.model:
            return str(self.api.model)  # a served model: its name, not the (unused) local path
        path = str(self.path or "model").rstrip("/")
        return Path(path).name or path


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def model_config(model_cfg: Any, where: str = "model") -> ModelConfig:
    """A checked `ModelConfig` from a `model` config (DictConfig or dict); ConfigError names a bad key."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(model_cfg, ModelConfig):
        return model_cfg
    d = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) else dict(model_cfg or {})
    engines = {k: d.pop(k) for k in list(d) if k in ENGINE_SETTINGS}  # type: ignore[union-attr]
    cfg = _build(ModelConfig, d, where)  # type: ignore[arg-type]
    for name, values in engines.items():
        check_value(values is None or isinstance(values, dict), f"{where}.{name}", values, "a mapping")
        setattr(cfg, name, build(ENGINE_SETTINGS[name], values or {}, f"{where}.{name}"))
    return cfg


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_path(path: Any, key: str = "model.path") -> None:
    """A local model folder that exists, or a string of the hub-id form `org/name`; else ConfigError."""
    if not path:
        raise ConfigError(f"{key} is required (a local model folder or a hub id such as Qwen/Qwen2.5-Math-7B-Instruct)")
    p = Path(str(path)).expanduser()
    if p.exists():
        if p.is_dir() and not (p / "config.json").exists() and not (p / "adapter_config.json").exists():
            raise ConfigError(f"{key}={path}: the folder holds no config.json (not a transformers model folder)")
        return
    real = real_model_name(p)
    if real is not None:  # a real model's folder in zcp's cache (zcp.backends.real_models): made once, by a command
        raise ConfigError(f"{key}={path}: no such folder; this real model is fetched and converted once by "
                          f"`{FETCH_COMMAND}` (or python scripts/get_real_model.py --name {real})")
    if not _HUB_ID.match(str(path)) or str(path).startswith((".", "/", "~")):
        raise ConfigError(f"{key}={path}: no such folder, and not a hub id of the form org/name")


# ------------------------------------------------------------------------------------------ a model folder's files
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.bin.index.json")
ADAPTER_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token",
                  "additional_special_tokens")


def _json_file(p: Path, name: str, key: str, path: Any) -> Any:
    """The JSON in folder `p`'s file `name`, or a one-line ConfigError naming the file and what is wrong with it."""
    f = p / name
    if f.is_dir():
        raise ConfigError(f"{key}={path}: {name} is a directory, not a file")
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{key}={path}: {name} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
                          ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{key}={path}: {name} is not UTF-8 text (not a JSON file)") from None
    except OSError as e:
        raise ConfigError(f"{key}={path}: {name} cannot be read ({e.strerror or e})") from None


def check_model_files(path: Any, key: str = "model.path") -> None:
    """`check_model_path`, then, for a local folder, its files (`check_model_folder`): what a job that loads the
    model from the folder (run_detect's model.path and base_model.path) checks before the first model loads."""
    check_model_path(path, key)
    p = Path(str(path)).expanduser()
    if p.is_dir():
        check_model_folder(p, key, path)
    elif p.exists() and p.suffix != ".gguf":  # a single GGUF file is an engine's (vLLM's) to load; nothing else is
        raise ConfigError(f"{key}={path} is a file, not a model folder (a folder with config.json, weights and a "
                          "tokenizer)")


def check_model_folder(p: Path, key: str = "model.path", path: Any = None) -> None:
    """A local model folder's files, checked before any model loads (each a one-line ConfigError naming the file
    and the problem, instead of a loader's traceback after minutes): config.json a file of valid JSON holding an
    object, weights there (*.safetensors or pytorch_model*.bin, or their index) and a tokenizer (tokenizer.json,
    tokenizer.model, vocab.json, ...; tokenizer_config.json, when there, valid JSON). An adapter folder
    (adapter_config.json, no config.json): its config and adapter weights. A key naming a tokenizer folder
    (model.api.tokenizer) needs no weights. Whether config.json matches the weights is known only by loading."""
    path = p if path is None else path
    if not (p / "config.json").exists():  # a PEFT adapter folder
        if not isinstance(_json_file(p, "adapter_config.json", key, path), dict):
            raise ConfigError(f"{key}={path}: adapter_config.json holds no JSON object")
        if not any((p / f).is_file() for f in ADAPTER_WEIGHT_FILES):
            raise ConfigError(f"{key}={path}: no adapter weights in the folder (no {' or '.join(ADAPTER_WEIGHT_FILES)})")
        return
    if not isinstance(_json_file(p, "config.json", key, path), dict):
        raise ConfigError(f"{key}={path}: config.json holds no JSON object (not a transformers model config)")
    if not key.endswith("tokenizer") and not any(f.is_file() for pat in WEIGHT_FILES for f in p.glob(pat)):
        raise ConfigError(f"{key}={path}: no weights in the folder (no *.safetensors or pytorch_model*.bin); "
                          "copy the model's weight files there")
    if not any((p / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError(f"{key}={path}: no tokenizer in the folder (no {', '.join(TOKENIZER_FILES)}); save the "
                          "model's tokenizer there (tokenizer.save_pretrained)")
    if (p / "tokenizer_config.json").exists():
        _json_file(p, "tokenizer_config.json", key, path)


def _token_text(v: Any) -> Any:
    if isinstance(v, dict):  # an AddedToken as saved: {"content": ..., ...}
        return v.get("content")
    if isinstance(v, list):
        return [_token_text(x) for x in v]
    return v


def tokenizer_parts(p: str | Path) -> dict[str, Any]:
    """What decides how a folder's tokenizer turns a prompt into ids, read from its files (no tokenizer loaded):
    vocabulary, merges, added tokens, pre-tokenisation, special tokens and chat template."""
    import hashlib

    d = Path(p)
    parts: dict[str, Any] = {}
    if (d / "tokenizer.json").is_file():
        t = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
        model = t.get("model") or {}
        parts["vocabulary"] = model.get("vocab")
        parts["merges"] = model.get("merges")
        parts["added tokens"] = sorted((a.get("id"), a.get("content"), bool(a.get("special")))
                                       for a in t.get("added_tokens") or [])
        parts["normalisation and pre-tokenisation"] = [t.get("normalizer"), t.get("pre_tokenizer")]
    for name in ("tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model"):
        if (d / name).is_file():
            parts[name] = hashlib.sha256((d / name).read_bytes()).hexdigest()
    conf: dict[str, Any] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if (d / name).is_file():
            loaded = json.loads((d / name).read_text(encoding="utf-8"))
            conf.update(loaded if isinstance(loaded, dict) else {})
    parts["special tokens"] = {k: _token_text(conf.get(k)) for k in SPECIAL_TOKENS}
    template = conf.get("chat_template")
    if template is None and (d / "chat_template.jinja").is_file():
        template = (d / "chat_template.jinja").read_text(encoding="utf-8")
    if template is None and (d / "chat_template.json").is_file():
        template = json.loads((d / "chat_template.json").read_text(encoding="utf-8")).get("chat_template")
    parts["chat template"] = template
    return parts


def tokenizer_differences(a: str | Path, b: str | Path, chat: bool = True) -> list[str]:
    """What differs between two model folders' tokenizers (`tokenizer_parts`; the chat template only when it is
    rendered, `chat`); [] when they turn every prompt into the same ids."""
    pa, pb = tokenizer_parts(a), tokenizer_parts(b)
    names = [n for n in dict.fromkeys([*pa, *pb]) if chat or n != "chat template"]
    return [n for n in names if pa.get(n) != pb.get(n)]


def check_same_tokenizer(model_path: Any, base_path: Any, chat: bool = True) -> None:
    """ConfigError (one line) when the base model's tokenizer (base_model.path) is not the audited model's
    (model.path): a difference-in-differences compares the two models' scores of the same prompts as the same
    token ids; with another vocabulary, merges, special tokens or chat template the two probes differ by
    construction. Local folders only (a hub id is checked by nothing here)."""
    a, b = Path(str(model_path)).expanduser(), Path(str(base_path)).expanduser()
    if not (a.is_dir() and b.is_dir()):
        return
    try:
        diff = tokenizer_differences(a, b, chat)
    except (OSError, ValueError) as e:
        raise ConfigError(f"base_model.path={base_path}: its tokenizer files cannot be compared with model.path's "
                          f"({' '.join(str(e).split())})") from None
    if diff:
        raise ConfigError(f"base_model.path={base_path}: its tokenizer differs from model.path={model_path}'s "
                          f"({', '.join(diff)}); the DiD compares both models on the same prompts as the same token "
                          "ids: give the base model the audited model's tokenizer files"
                          + (" (or model.chat=false for a chat template alone)" if diff == ["chat template"] else ""))

"""Where a contamination run lives and what makes it the same run: the config fingerprint, the run directory
named by its hash, the resume check against run_config.json, and the base model's path.

The fingerprint is made of the plain values of the config as given (`zcp.simulate.settings.SimConfig.values`),
never of the validated groups with their defaults filled in: a key a config does not write must keep the hash
of the run dirs made before the key existed (`_NEW_KEY_DEFAULTS` records, per key, the value such configs
behaved as: a record of history, not a default the job reads), so rerunning the same command resumes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zcp.core.io import model_fingerprint, read_json, stable_hash, write_json
from zcp.core.rundir import RUN_CONFIG
from zcp.simulate.settings import field_default, plain_values, sim_config
from zcp.simulate.simulation_config import ExposureConfig

# Config sections that do not change what is trained or measured here (detection settings included):
# free to differ on resume, and left out of the default run-dir hash.
_NOT_FINGERPRINTED = ("logger", "output_dir", "hydra", "stages", "detect", "probe", "stats", "run",
                      "baselines_overrides")
# Keys added after runs were made: left out of the fingerprint while at these values (what configs without the
# key did), so the run dirs of earlier configs keep their hash (and resume). Another value enters the fingerprint.
_NEW_KEY_DEFAULTS: dict[str, dict[str, Any]] = {
    "exposure": {"answer_format": "probe", "paraphrases_path": None, "paraphrases_format": "items",
                 "paraphrases_variant": None, "paraphrases_pair_by": None, "sham_items": None,
                 "suppress": {"prefills": [], "answer": "wrong", "items": "leaked"}},
    "split": {"c_path": None, "u_path": None},
    "benchmark": {"variant": None, "on_duplicate": "error"},
    "train": {"stages": ["sft", "grpo"],  # the order every run had before train.stages existed
              "finetune": "lora"},  # LoRA stages: every run before train.finetune existed
}
# The `model` keys that decide what is trained (the rest - backend, vllm, api, batch sizes, probe settings -
# only serve detection and inference, and grow as backends do): only these enter the fingerprint.
_MODEL_TRAINING_KEYS = ("path", "adapter", "dtype", "trust_remote_code", "chat", "chat_template_kwargs")
# GRPO rewards by name (train.rewards: name -> weight); without it, these two (weights from
# train.grpo.reward_weights, TRL's positional list, as older profiles give them).
DEFAULT_REWARDS = ("correctness", "format")


def is_sham(exposure: ExposureConfig | Mapping[str, Any]) -> bool:
    """Whether an `exposure` config is the sham arm: `leak_fraction=0`, nothing of C leaked (zcp.simulate.contaminate).

    Takes the validated group, or the plain `exposure` values of a fingerprint (a key left out: the schema's
    default)."""
    if isinstance(exposure, ExposureConfig):
        return float(exposure.leak_fraction) == 0.0
    try:
        return float(exposure.get("leak_fraction", field_default(ExposureConfig, "leak_fraction"))) == 0.0
    except (TypeError, ValueError):
        return False


def _canonical(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config as the fingerprint sees it: what the contamination run's outputs depend on, nothing else.

    Left out: the sections of later stages and of the session (`_NOT_FINGERPRINTED`: detection, probe, stats,
    run, baselines, logger, output_dir), new keys at their defaults, the `paraphrase` model section unless the
    LLM paraphraser uses it, the `data` group unless the benchmark is read from it, and of `model` all but the
    keys training reads; `train.rewards` of the default pair is written as the positional
    `train.grpo.reward_weights` older configs used (same training, same hash). So a finished training stage is
    never discarded or refused because a later stage's setting changed."""
    fp = json.loads(json.dumps({k: v for k, v in cfg.items() if k not in _NOT_FINGERPRINTED}, default=str))
    for section, defaults in _NEW_KEY_DEFAULTS.items():
        sub = fp.get(section)
        if isinstance(sub, dict):
            for key, default in defaults.items():
                if key in sub and sub[key] == default:
                    del sub[key]
    ex = fp.get("exposure")
    if isinstance(ex, dict) and not is_sham(ex):
        ex.pop("sham_items", None)  # only a sham run trains on sham items (leak_fraction=0 sets the arm apart)
    if (fp.get("exposure") or {}).get("paraphraser") != "llm":
        fp.pop("paraphrase", None)
    if not _reads_data_group(fp):
        fp.pop("data", None)  # e.g. `+data.on_overflow=skip` on a simulation: nothing trained reads it
    if isinstance(fp.get("model"), dict):
        # at their defaults (no adapter, chat on, no template kwargs) the keys are left out, as older configs lacked them
        fp["model"] = {k: v for k, v in fp["model"].items() if k in _MODEL_TRAINING_KEYS
                       and v not in (None, {}) and not (k == "chat" and v is True)}
    train = fp.get("train")
    if isinstance(train, dict) and "rewards" in train:
        rewards = train.pop("rewards")
        if rewards is not None:
            grpo = train.setdefault("grpo", {}) or {}
            if list(rewards) == list(DEFAULT_REWARDS) and grpo.get("reward_weights") is None:
                grpo["reward_weights"] = [float(w) for w in rewards.values()]
                train["grpo"] = grpo
            else:
                train["rewards"] = rewards
    return fp


def _reads_data_group(cfg: Mapping[str, Any]) -> bool:
    """Whether the benchmark comes from the `data` group (`benchmark.source=data`, no given C/U files).

    Read from the fingerprint's plain values, not the validated groups: `_canonical` also reads the fingerprint
    stored by an older run, whose keys may predate today's schema, and must not refuse it."""
    # inline default: a group the plain fingerprint lacks reads as empty (nothing given), not a schema value
    split, benchmark = cfg.get("split") or {}, cfg.get("benchmark") or {}
    return benchmark.get("source") == "data" and not (split.get("c_path") and split.get("u_path"))


def _config_fingerprint(cfg: Any) -> dict[str, Any]:
    """The config sections that decide a run's outputs, plus the base model's content fingerprint."""
    s = sim_config(cfg)
    fp = _canonical(plain_values(cfg))
    fp["base_model_fingerprint"] = model_fingerprint(resolve_model_path(s.model.path))
    return fp


def _run_dir(cfg: Any, fp: dict[str, Any] | None = None) -> Path:
    """`output_dir` if set, else outputs/contaminate/<name>__<hash of the config>: rerunning resumes."""
    s = sim_config(cfg)
    if s.output_dir:
        return Path(str(s.output_dir))
    fp = fp or _config_fingerprint(s)
    h = stable_hash(json.dumps(fp, sort_keys=True, default=str), 8)
    return Path("outputs") / "contaminate" / f"{s.name.replace('/', '_')}__{h}"


def shipped_base_model() -> Path:
    """The project's embedded tiny base model folder (`zcp/assets/base_model/`)."""
    import zcp

    return zcp.ASSETS / "base_model"


def resolve_model_path(path: str | None) -> str:
    """A model path: None / "" / "tiny" → the shipped base model; a relative local path → absolute; else a hub id."""
    if path in (None, "", "tiny", "base_model"):
        return str(shipped_base_model())
    p = Path(str(path)).expanduser()
    if p.exists():
        return str(p.resolve())
    try:  # relative to where the user launched Hydra
        from hydra.utils import to_absolute_path

        q = Path(to_absolute_path(str(path)))
        if q.exists():
            return str(q)
    except (ImportError, ValueError):
        pass
    return str(path)


def _leaf_diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """`key: old -> new` for every leaf that differs between two nested dicts (reprs cut at 40 characters)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += _leaf_diff(old.get(k, "<unset>"), new.get(k, "<unset>"), f"{prefix}{k}.")
        return out
    if old == new:
        return []
    short = lambda v: (lambda t: t if len(t) <= 40 else t[:37] + "...")(repr(v))  # noqa: E731
    return [f"{prefix.rstrip('.')}: {short(old)} -> {short(new)}"]


def _fingerprint_check(run_dir: Path, cfg: Any, fp: dict[str, Any] | None = None) -> None:
    """Refuse (one line, ConfigError) to resume a run directory whose stage outputs were made by a different config
    or base model, naming what differs; a directory without run_config.json gets it written (the plain config)."""
    from zcp.errors import ConfigError

    fp = fp or _config_fingerprint(cfg)
    path = run_dir / RUN_CONFIG
    if path.exists():
        old = read_json(path)
        # a run made before keys were added or left out of the fingerprint: compare in today's canonical form
        stored = _canonical(old.get("fingerprint") or {})
        if stored != fp:
            diff = _leaf_diff(stored, fp)
            shown = "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
            raise ConfigError(f"{run_dir} holds a contamination run with a different config ({shown}); its outputs "
                              f"belong to that config: use a fresh output_dir, or rerun with the config in {path}")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(path, {"fingerprint": fp, "config": plain_values(cfg)})

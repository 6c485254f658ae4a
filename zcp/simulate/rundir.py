"""Where a contamination run lives and what makes it the same run: the config fingerprint, the run directory
named by its hash, its claim (zcp.core.rundir's one run-dir rule) and the base model's path.

The fingerprint is made of the plain values of the config as given (`zcp.simulate.settings.SimConfig.values`)
that decide what is trained, and the base model's content fingerprint. A directory made under another fingerprint,
or by an earlier zcp (no run_fingerprint.json), is refused in one line; nothing is translated from an older form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zcp.core.io import model_fingerprint, stable_hash, write_json
from zcp.core.rundir import BENCHMARK_ITEMS, EXPOSURE, MANIFEST, MODEL, RUN_CONFIG, claim_run_dir
from zcp.simulate.settings import field_default, plain_values, sim_config
from zcp.simulate.simulation_config import ExposureConfig

# Config sections that do not change what is trained or measured here (detection settings included):
# free to differ on resume, and left out of the default run-dir hash.
_NOT_FINGERPRINTED = ("logger", "output_dir", "hydra", "stages", "detect", "probe", "stats", "run",
                      "baselines_overrides")
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
    run, baselines, logger, output_dir), the `paraphrase` model section unless the LLM paraphraser uses it, the
    `data` group unless the benchmark is read from it, the sham items unless the run is the sham arm, and of
    `model` all but the keys training reads. So a finished training stage is never discarded or refused because
    a later stage's setting changed."""
    fp = json.loads(json.dumps({k: v for k, v in cfg.items() if k not in _NOT_FINGERPRINTED}, default=str))
    ex = fp.get("exposure")
    if isinstance(ex, dict) and not is_sham(ex):
        ex.pop("sham_items", None)  # only a sham run trains on sham items (leak_fraction=0 sets the arm apart)
    if (fp.get("exposure") or {}).get("paraphraser") != "llm":
        fp.pop("paraphrase", None)
    if not _reads_data_group(fp):
        fp.pop("data", None)  # e.g. `+data.on_overflow=skip` on a simulation: nothing trained reads it
    if isinstance(fp.get("model"), dict):
        fp["model"] = {k: v for k, v in fp["model"].items() if k in _MODEL_TRAINING_KEYS}
    return fp


def _reads_data_group(cfg: Mapping[str, Any]) -> bool:
    """Whether the benchmark comes from the `data` group (`benchmark.source=data`, no given C/U files).

    Read from the plain values the fingerprint is made of (`_canonical`), before any schema default."""
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
    """The project's embedded tiny base model folder (`zcp/assets/base_model/`: zcp.benchmarks.corpus)."""
    from zcp.benchmarks.corpus import shipped_model_path

    return shipped_model_path()


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


# a contamination's files: one of them in a directory without run_fingerprint.json is a run of unknown configuration
PRODUCTS = (RUN_CONFIG, MANIFEST, BENCHMARK_ITEMS, EXPOSURE, MODEL, "sft_data.jsonl", "training_items.jsonl")


def _fingerprint_check(run_dir: Path, cfg: Any, fp: dict[str, Any] | None = None) -> None:
    """Claim `run_dir` for this contamination by the one run-dir rule (zcp.core.rundir.claim_run_dir, job
    `contaminate`, made of `fp`): the same fingerprint resumes; another one, or a directory of an earlier zcp, is
    refused in one line (RunDirError) naming both fingerprints and the keys that differ. A new run also gets
    run_config.json (the fingerprint and the plain config, which `zcp.core.rundir.ContaminationRun` reads)."""
    fp = fp or _config_fingerprint(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    claim_run_dir(run_dir, "contaminate", fp, products=PRODUCTS)
    path = run_dir / RUN_CONFIG
    if not path.exists():
        write_json(path, {"fingerprint": fp, "config": plain_values(cfg)})

"""The contamination simulation: C/U split → paraphrase C → LoRA SFT → GRPO → merged model + exposure record.

`contaminate(cfg)` runs the whole pipeline into one run directory and is resumable. The pipeline is a list
of named stages (split, data, eval_base, sft, grpo, merge, eval_after_sft, eval_final; `_Pipeline.stages`),
each with a done-check and a run step, run by `zcp.simulate.stages.run_stages`, which owns skipping,
barriers and logging: every stage writes its final output atomically and is skipped when that output
exists; a trainer killed mid-stage resumes from its newest checkpoint. The run directory holds

* ``manifest.json`` (C/U ids), ``benchmark_items.jsonl``, ``variants.jsonl`` (the paraphrases trained on),
  ``sft_data.jsonl`` / ``grpo_data.jsonl`` (the exact training examples, with format and source),
  ``training_items.jsonl`` (every non-benchmark item trained on: clean and sham items, `training_items`);
* ``sft_adapter/`` (LoRA on the base), ``grpo_adapter/`` (LoRA on base+SFT merged), ``model/`` (the final
  merged model, safetensors + tokenizer);
* ``exposure.json``: every knob, the seeds, the leaked C ids and the paths detection needs;
* ``table6.md`` / ``table6.json``: full-CoT greedy accuracy before/after on C (leaked, not leaked) and U,
  with per-item records under ``eval/``.

``exposure.leak_fraction=0`` is the **sham arm**, the negative control: the training data of a full leak of the
same recipe (k paraphrases, CoTs, format mix, clean mix, GRPO prompts) built on `exposure.sham_items` fresh
non-benchmark items instead of C (`build_training_data`), so a detector that flags its C or U is a false
positive of fine-tuning itself. Its records say ``source: sham``, its exposure record ``arm: sham``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zcp.core.io import (
    RunLock,
    model_fingerprint,
    read_json,
    read_jsonl,
    seed_everything,
    sha256_file,
    stable_hash,
    write_json,
    write_jsonl,
)
from zcp.core.items import Item
from zcp.errors import DataError
from zcp.simulate import data as tdata
from zcp.simulate.rewards import score_completion
from zcp.simulate.sft import adapter_done, load_model, load_tokenizer
from zcp.simulate.stages import Stage, run_stages

log = logging.getLogger(__name__)

EXPOSURE_SCHEMA = 1
# Config sections that do not change what is trained or measured here (detection settings included):
# free to differ on resume, and left out of the default run-dir hash.
_NOT_FINGERPRINTED = ("logger", "output_dir", "hydra", "stages", "detect", "probe", "stats", "run",
                      "baselines_overrides")
# Keys added after runs were made: left out of the fingerprint while at these defaults, so the run dirs of
# earlier configs keep their hash (and resume). A non-default value enters the fingerprint as usual.
_NEW_KEY_DEFAULTS: dict[str, dict[str, Any]] = {
    "exposure": {"answer_format": "probe", "paraphrases_path": None, "paraphrases_format": "items",
                 "paraphrases_variant": None, "paraphrases_pair_by": None, "sham_items": None},
    "split": {"c_path": None, "u_path": None},
    "benchmark": {"variant": None, "on_duplicate": "error"},
}
# The `model` keys that decide what is trained (the rest - backend, vllm, api, batch sizes, probe settings -
# only serve detection and inference, and grow as backends do): only these enter the fingerprint.
_MODEL_TRAINING_KEYS = ("path", "adapter", "dtype", "trust_remote_code", "chat", "chat_template_kwargs")
# GRPO rewards by name (train.rewards: name -> weight); without it, these two (weights from
# train.grpo.reward_weights, TRL's positional list, as older profiles give them).
DEFAULT_REWARDS = ("correctness", "format")
TRAINING_ITEMS = "training_items.jsonl"  # the non-benchmark items a run trains on (clean and sham), with their role
SHAM_PREFIX = "sham"  # id prefix of generated sham items


@dataclass
class ContaminationResult:
    """Where a contamination run put its outputs, and what it measured."""

    run_dir: Path
    model_dir: Path
    sft_adapter_dir: Path
    grpo_adapter_dir: Path | None
    manifest_path: Path
    exposure_path: Path
    table6: dict[str, Any]
    leaked_ids: list[str]
    stages_run: list[str] = field(default_factory=list)
    stages_skipped: list[str] = field(default_factory=list)
    arm: str = "leak"  # leak | sham (exposure.leak_fraction=0: nothing of C trained on)


# ---------------------------------------------------------------------------------------------- config
def _to_dict(cfg: Any) -> dict[str, Any]:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    return json.loads(json.dumps(dict(cfg)))


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
    """Whether the benchmark comes from the `data` group (`benchmark.source=data`, no given C/U files)."""
    split = cfg.get("split") or {}
    return (cfg.get("benchmark") or {}).get("source") == "data" and not (split.get("c_path") and split.get("u_path"))


def _config_fingerprint(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config sections that decide a run's outputs, plus the base model's content fingerprint."""
    fp = _canonical(cfg)
    fp["base_model_fingerprint"] = model_fingerprint(resolve_model_path((cfg.get("model") or {}).get("path")))
    return fp


def _run_dir(cfg: Mapping[str, Any], fp: dict[str, Any] | None = None) -> Path:
    """`output_dir` if set, else outputs/contaminate/<name>__<hash of the config>: rerunning resumes."""
    if cfg.get("output_dir"):
        return Path(str(cfg["output_dir"]))
    fp = fp or _config_fingerprint(cfg)
    h = stable_hash(json.dumps(fp, sort_keys=True, default=str), 8)
    return Path("outputs") / "contaminate" / f"{str(cfg.get('name') or 'contaminate').replace('/', '_')}__{h}"


def _or(value: Any, default: int) -> int:
    return default if value is None else int(value)


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


def _fingerprint_check(run_dir: Path, cfg: dict[str, Any], fp: dict[str, Any] | None = None) -> None:
    """Refuse (one line, ConfigError) to resume a run directory whose stage outputs were made by a different config
    or base model, naming what differs; a directory without run_config.json gets it written."""
    from zcp.errors import ConfigError

    fp = fp or _config_fingerprint(cfg)
    path = run_dir / "run_config.json"
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
    write_json(path, {"fingerprint": fp, "config": cfg})


# ---------------------------------------------------------------------------------------------- data
def load_benchmark(cfg: Mapping[str, Any]) -> list[Item]:
    """The benchmark items: generated word problems, an Item/GSM8K-style file, the `data` config group, or
    the given C and U files (`split.c_path`, `split.u_path`: C's items then U's).

    Whatever the source, a question may appear once (`zcp.benchmarks.loaders.check_duplicates`, policy
    `benchmark.on_duplicate`: error, or merge to keep the first copy; copies with different answers fail):
    a repeated item trained on or probed twice would count as two pieces of evidence."""
    from zcp.benchmarks.loaders import check_duplicates, load_items

    b = dict(cfg.get("benchmark") or {})
    split = dict(cfg.get("split") or {})
    if split.get("c_path") and split.get("u_path"):
        c_items, u_items = load_split_files(cfg)
        return c_items + u_items
    source = b.get("source", "wordproblems")
    policy, key = b.get("on_duplicate") or "error", "benchmark.on_duplicate"
    if source == "wordproblems":
        from zcp.benchmarks.wordproblems import generate_word_problems

        items = generate_word_problems(int(b.get("n", 200)), seed=int(b.get("seed", 0)),
                                       families=b.get("families"), id_prefix=b.get("id_prefix", "wp"))
        return check_duplicates(items, None, policy, name="the generated word-problem benchmark", key=key)
    if source == "file":
        return load_items(resolve_model_path(b["path"]), format=b.get("format", "items"), limit=b.get("limit"),
                          variant=b.get("variant"), on_duplicate=policy, duplicate_key=key)
    if source == "data":  # the lead's `data` group: {path, format, ...}
        d = dict(cfg.get("data") or {})
        return load_items(resolve_model_path(d["path"]), format=d.get("format", "items"), limit=b.get("limit"),
                          on_duplicate=policy, duplicate_key=key)
    raise ValueError(f"unknown benchmark.source {source!r} (wordproblems | file | data)")


def load_split_files(cfg: Mapping[str, Any]) -> tuple[list[Item], list[Item]]:
    """(C items, U items) from `split.c_path` / `split.u_path` (e.g. the ZCP release's dataset_c/dataset_u),
    read with `benchmark.format` / `benchmark.variant`, `benchmark.limit` rows of each. An id present in both
    files fails with one line naming both files. C and U together are the benchmark: a question repeated
    within a file or across the two is refused (`benchmark.on_duplicate=error`, naming the ids) or, with
    `merge`, kept once (its first copy: C's when it is in both, so U loses it)."""
    from zcp.benchmarks.loaders import check_duplicates, load_items

    b, split = dict(cfg.get("benchmark") or {}), dict(cfg.get("split") or {})
    fmt = b.get("format") or "items"
    policy, key = b.get("on_duplicate") or "error", "benchmark.on_duplicate"
    out = []
    for name in ("c_path", "u_path"):
        out.append(load_items(resolve_model_path(str(split[name])), format=fmt, variant=b.get("variant"),
                              limit=b.get("limit"), on_duplicate=policy, duplicate_key=key))
    both = sorted({it.id for it in out[0]} & {it.id for it in out[1]})
    if both:
        raise DataError(f"{len(both)} id(s) in both the C and the U file, first {both[0]!r} "
                        f"(U file {split['u_path']})", path=str(split["c_path"]), field="id")
    kept = check_duplicates(out[0] + out[1], None, policy, key=key,
                            name=f"C file {split['c_path']} and U file {split['u_path']}")
    return out[0], kept[len(out[0]):]  # C's copy comes first (and C has none within): C keeps all its items


def benchmark_format(cfg: Mapping[str, Any]) -> str:
    """The loader format of the items `load_benchmark` returns: ``wordproblems`` for generated ones, else the
    format the given C/U files, the benchmark file or the `data` group are read with. Reference builders are
    chosen by it (`zcp.benchmarks.references.registry.resolve_method`): the items as loaded, whatever the default of an
    unused `benchmark.source` says."""
    b, split = dict(cfg.get("benchmark") or {}), dict(cfg.get("split") or {})
    if split.get("c_path") and split.get("u_path"):
        return str(b.get("format") or "items")
    source = b.get("source", "wordproblems")
    if source == "wordproblems":
        return "wordproblems"
    if source == "data":
        return str((cfg.get("data") or {}).get("format") or "items")
    return str(b.get("format") or "items")


def planned_manifest(cfg: Mapping[str, Any], items: list[Item]) -> Any:
    """The C/U manifest the split stage will give `items` (`_manifest`), computed without writing anything: the
    given C and U files, `manifest_path`, or the seeded split. For checks made before anything runs."""
    from zcp.benchmarks.split import Manifest, split_items

    split = dict(cfg.get("split") or {})
    seed = int(cfg.get("seed", 0))
    if split.get("c_path") and split.get("u_path"):
        c_items, u_items = load_split_files(cfg)
        return Manifest(c_ids=[it.id for it in c_items], u_ids=[it.id for it in u_items], seed=seed,
                        c_fraction=len(c_items) / max(1, len(c_items) + len(u_items)))
    if cfg.get("manifest_path"):
        return Manifest.load(resolve_model_path(cfg["manifest_path"]))
    return split_items(items, seed=_or(split.get("seed"), seed), c_fraction=float(split.get("c_fraction", 0.5)),
                       stratify_by=split.get("stratify_by"))


def _manifest(cfg: Mapping[str, Any], items: list[Item], run_dir: Path, seed: int) -> Any:
    from zcp.benchmarks.split import Manifest, split_items

    dest = run_dir / "manifest.json"
    split = dict(cfg.get("split") or {})
    if split.get("c_path") and split.get("u_path"):  # the split is given: C = the C file, U = the U file
        c_items, u_items = load_split_files(cfg)
        c_path = resolve_model_path(str(split["c_path"]))
        manifest = Manifest(c_ids=[it.id for it in c_items], u_ids=[it.id for it in u_items], seed=seed,
                            c_fraction=len(c_items) / max(1, len(c_items) + len(u_items)), source_path=c_path,
                            source_sha256=sha256_file(c_path))
        manifest.save(dest)
        return manifest
    if cfg.get("manifest_path"):
        src = Path(resolve_model_path(cfg["manifest_path"]))
        manifest = Manifest.load(src)
        if src.resolve() != dest.resolve():
            shutil.copyfile(src, dest)
        return manifest
    if dest.exists():
        return Manifest.load(dest)
    manifest = split_items(items, seed=_or(split.get("seed"), seed), c_fraction=float(split.get("c_fraction", 0.5)),
                           stratify_by=split.get("stratify_by"))
    manifest.save(dest)
    return manifest


def is_sham(exposure: Mapping[str, Any]) -> bool:
    """Whether an `exposure` config is the sham arm: `leak_fraction=0`, nothing of C leaked (module docstring)."""
    try:
        return float(exposure.get("leak_fraction", 1.0)) == 0.0
    except (TypeError, ValueError):
        return False


def n_leaked(fraction: float, n_c: int) -> int:
    """How many C items `leak_fraction` leaks: round(fraction·|C|), halves up."""
    return math.floor(fraction * n_c + 0.5)


def check_leak_count(fraction: float, n_c: int) -> None:
    """ConfigError (one line) for a leak fraction outside [0, 1], or one in (0, 1] that leaks no C item: such
    a run would train on clean data only and crash in the trainer or pass for a leak; 0 is the sham arm."""
    from zcp.errors import ConfigError

    if not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"exposure.leak_fraction={fraction:g}: must be in [0, 1] (0: a sham run, nothing of C leaked)")
    if fraction > 0.0 and n_leaked(fraction, n_c) == 0:
        raise ConfigError(f"exposure.leak_fraction={fraction:g} leaks round({fraction:g} x {n_c}) = 0 of {n_c} C "
                          "items; use exposure.leak_fraction=0 for a sham run")


def choose_leaked(c_items: Sequence[Item], fraction: float, seed: int) -> list[Item]:
    """The seeded subset of C that is leaked: round(fraction·|C|) items (all of C at 1.0, none at 0: the sham
    arm). A fraction in (0, 1] that rounds to no item is refused (`check_leak_count`)."""
    check_leak_count(fraction, len(c_items))
    ordered = sorted(c_items, key=lambda it: it.id)
    n = n_leaked(fraction, len(ordered))
    chosen = set(random.Random(f"leak|{seed}").sample(range(len(ordered)), n))
    return [it for i, it in enumerate(ordered) if i in chosen]


def n_clean_examples(n_bench: int, clean_fraction: float) -> int:
    """How many clean examples make them `clean_fraction` of the SFT set: round(n·p / (1 − p))."""
    if not 0.0 <= clean_fraction < 1.0:
        raise ValueError(f"exposure.clean_fraction must be in [0, 1), got {clean_fraction}")
    return math.floor(n_bench * clean_fraction / (1.0 - clean_fraction) + 0.5)


def _examples_per_item(ex: Mapping[str, Any]) -> int:
    """SFT examples one leaked item yields at most: its k variants (or the original at k = 0), plus the original
    when `include_original` (fewer when a paraphraser falls short or an item without a CoT is dropped)."""
    k = int(ex.get("k", 0))
    return 1 if k == 0 else k + int(bool(ex.get("include_original", False)))


def _generated_benchmark(cfg: Mapping[str, Any]) -> bool:
    """Whether the benchmark is generated word problems (`load_benchmark`'s wordproblems source)."""
    split = dict(cfg.get("split") or {})
    if split.get("c_path") and split.get("u_path"):
        return False
    return (cfg.get("benchmark") or {}).get("source", "wordproblems") == "wordproblems"


def _clean_data(cfg: Mapping[str, Any], n: int, items: Sequence[Item], seed: int) -> list[Item]:
    """The run's `n` clean items (`clean.*`), avoiding the benchmark `items`. The draw is a prefix of one seeded
    stream (generated problems, or the shuffled rows of clean.path), so the first n of a larger draw are these."""
    clean_cfg = dict(cfg.get("clean") or {})
    return tdata.clean_items(n, seed=_or(clean_cfg.get("seed"), seed + 1), exclude_items=items,
                             source=clean_cfg.get("source", "wordproblems"), path=clean_cfg.get("path"),
                             fmt=clean_cfg.get("format", "items"))


def _norm_question(text: str) -> str:
    return " ".join(str(text).split())


def sham_seed(seed: int) -> int:
    """The seed of the generated sham items, derived from the run seed (distinct from the clean data's seed + 1)."""
    return tdata.item_seed(seed, "sham-items")


def sham_training_items(cfg: Mapping[str, Any], items: Sequence[Item], n_c: int, seed: int) -> list[Item]:
    """The sham arm's stand-ins for C: `exposure.sham_items` (null: |C| = `n_c`) items outside the benchmark.

    Generated word problems (benchmark.source=wordproblems) get fresh problems of the benchmark's families (id
    prefix ``sham``, seed `sham_seed`), excluding every benchmark signature and those of the clean items a full
    leak of this recipe would draw at most; any other benchmark gets a seeded choice of the rows of `clean.path`
    that are neither benchmark items (by id or question) nor among those clean rows. So sham and clean data never
    overlap whatever the final clean count. Too few rows, or no clean file, is a one-line ConfigError."""
    from zcp.errors import ConfigError

    ex = dict(cfg.get("exposure") or {})
    n = int(ex["sham_items"]) if ex.get("sham_items") is not None else int(n_c)
    if n < 1:
        raise ConfigError(f"exposure.sham_items={n}: the sham run needs at least one item (C is empty)")
    n_clean_max = n_clean_examples(n * _examples_per_item(ex), float(ex.get("clean_fraction", 0.0)))
    clean_pool = _clean_data(cfg, n_clean_max, items, seed)
    if _generated_benchmark(cfg):
        from zcp.benchmarks.wordproblems import generate_word_problems, signatures

        avoid = signatures(it for it in [*items, *clean_pool] if it.metadata.get("source") == "wordproblem")
        try:
            return generate_word_problems(n, seed=sham_seed(seed), families=(cfg.get("benchmark") or {}).get("families"),
                                          id_prefix=SHAM_PREFIX, exclude=avoid)
        except ValueError as e:
            raise ConfigError(f"exposure.sham_items={n}: {e}") from None
    clean_cfg = dict(cfg.get("clean") or {})
    path = clean_cfg.get("path")
    if clean_cfg.get("source", "wordproblems") != "file" or not path:
        raise ConfigError("exposure.leak_fraction=0 (a sham run) on a benchmark that is not generated draws its sham "
                          "items from a file: set clean.source=file and clean.path=FILE (rows not in the benchmark)")
    if not Path(str(path)).is_file():
        raise ConfigError(f"clean.path={path}: no such file")
    from zcp.benchmarks.loaders import load_items

    taken_ids = {it.id for it in [*items, *clean_pool]}
    taken_q = {_norm_question(it.question) for it in [*items, *clean_pool]}
    rows = [it for it in load_items(str(path), format=clean_cfg.get("format", "items"))
            if it.id not in taken_ids and _norm_question(it.question) not in taken_q]
    if len(rows) < n:
        raise ConfigError(f"clean.path={path}: {len(rows)} row(s) are neither benchmark items nor clean data "
                          f"({len(clean_pool)} rows); the sham run needs {n} (exposure.sham_items, null = |C|)")
    return random.Random(f"sham|{seed}").sample(rows, n)


def build_training_data(cfg: Mapping[str, Any], items: list[Item], manifest: Any, run_dir: Path, seed: int,
                        teacher: Any | None = None) -> dict[str, Any]:
    """Leak selection, paraphrases, CoTs, format mix, clean mix; writes the JSONL files and returns counts.

    The sham arm (`leak_fraction=0`) runs the same recipe on `sham_training_items` instead of the leaked C
    items: the same k, CoTs, answer-only share and answer format, the clean count computed from its own number
    of examples (|C| sham items give the full leak's count, and its clean items), GRPO prompts of the same kind.
    Pre-built paraphrases (`paraphrases_path`) exist for benchmark items only: sham items are paraphrased by
    `exposure.paraphraser` (recorded as `sham_paraphraser`). Writes `training_items.jsonl` (the clean and sham
    items trained on) and data_counts.json before sft_data.jsonl, whose presence marks the stage done."""
    ex = dict(cfg["exposure"])
    c_items, u_items = manifest.subset(items, "C"), manifest.subset(items, "U")
    sham = is_sham(ex)
    trained = (sham_training_items(cfg, items, len(c_items), seed) if sham
               else choose_leaked(c_items, float(ex.get("leak_fraction", 1.0)), seed))
    source = "sham" if sham else "benchmark"
    answer_format = str(ex.get("answer_format", "probe"))
    prebuilt = None
    paraphraser: Any = ex.get("paraphraser", "auto")
    k = int(ex["k"])
    if ex.get("paraphrases_path") and k > 0 and not sham:
        prebuilt = tdata.load_prebuilt_variants(resolve_model_path(str(ex["paraphrases_path"])), items,
                                                [it.id for it in trained],
                                                fmt=str(ex.get("paraphrases_format") or "items"),
                                                variant=ex.get("paraphrases_variant"),
                                                pair_by=ex.get("paraphrases_pair_by"))
    elif paraphraser == "llm" and k > 0:
        from zcp.benchmarks.build import make_paraphraser

        pcfg = dict(cfg.get("paraphrase") or {})
        paraphraser = make_paraphraser({"name": "llm", "model": pcfg.get("model"),
                                        "options": dict(pcfg.get("options") or {})})
    if sham and ex.get("paraphrases_path") and k > 0:
        log.warning("sham run: exposure.paraphrases_path holds benchmark paraphrases only; the sham items are "
                    "paraphrased by exposure.paraphraser=%s", ex.get("paraphraser", "auto"))
    variants, short = tdata.make_variants(trained, k, seed, paraphraser,
                                          bool(ex.get("include_original", False)), prebuilt=prebuilt)
    cot_cfg = dict(cfg.get("cot") or {})
    cots, missing = tdata.synthesize_cots(trained, teacher, attempts=int(cot_cfg.get("attempts", 4)),
                                          max_new_tokens=int(cot_cfg.get("max_new_tokens", 512)),
                                          temperature=float(cot_cfg.get("temperature", 0.7)), seed=seed)
    f = float(ex.get("answer_only_fraction", 0.0))
    records = tdata.build_sft_records(variants, cots, f, seed, source=source,
                                      on_missing_cot=cot_cfg.get("on_missing", "answer"), answer_format=answer_format)
    n_clean = n_clean_examples(len(records), float(ex.get("clean_fraction", 0.0)))
    clean_cfg = dict(cfg.get("clean") or {})
    clean = _clean_data(cfg, n_clean, items, seed)
    if sham:
        _check_disjoint(trained, clean)
    clean_cots, _ = tdata.synthesize_cots(clean, None)
    clean_f = clean_cfg.get("answer_only_fraction")
    records += tdata.build_sft_records(clean, clean_cots, f if clean_f is None else float(clean_f), seed + 1,
                                       source="clean", on_missing_cot="drop")
    grpo_src = variants if ex.get("grpo_prompts", "variants") == "variants" else trained
    trained_on = {r["original_id"] for r in records} | {tdata.original_id(it) for it in grpo_src}
    roles = [("clean", clean)] + ([("sham", trained)] if sham else [])
    train_rows = [{**it.to_dict(), "role": role} for role, group in roles for it in group if it.id in trained_on]
    contamination = [r for r in records if r["source"] == source]
    counts = {
        "arm": "sham" if sham else "leak",
        "n_items": len(items), "n_c": len(c_items), "n_u": len(u_items), "n_leaked": 0 if sham else len(trained),
        "n_sham": len(trained) if sham else 0,
        "n_variants": len(variants), "n_sft_examples": len(records),
        "n_answer_only": sum(r["format"] == "answer" for r in contamination),
        "n_cot": sum(r["format"] == "cot" for r in contamination),
        "n_clean": sum(r["source"] == "clean" for r in records), "n_grpo_prompts": len(grpo_src),
        "paraphrase_shortfall": short, "cot_missing": missing,
    }
    if sham and ex.get("paraphrases_path") and k > 0:
        counts["sham_paraphraser"] = str(ex.get("paraphraser", "auto"))
    if answer_format != "probe":
        counts["answer_formats"] = dict(sorted(Counter(r.get("answer_format", "probe") for r in contamination).items()))
    write_jsonl(run_dir / "benchmark_items.jsonl", [it.to_dict() for it in items])
    write_jsonl(run_dir / "variants.jsonl", [v.to_dict() for v in variants])
    write_jsonl(run_dir / "grpo_data.jsonl", tdata.grpo_records(grpo_src))
    write_jsonl(run_dir / TRAINING_ITEMS, train_rows)
    write_json(run_dir / "data_counts.json", counts)
    write_jsonl(run_dir / "sft_data.jsonl", records)  # written last: its presence marks the stage done
    return counts


def _check_disjoint(sham: Sequence[Item], clean: Sequence[Item]) -> None:
    """Sham and clean items share no id, question or word-problem signature (by construction; checked)."""
    from zcp.benchmarks.wordproblems import signature

    def key(it: Item) -> str | None:
        return signature(it) if it.metadata.get("source") == "wordproblem" else None

    keys = {k for k in (key(it) for it in clean) if k}
    ids, questions = {it.id for it in clean}, {_norm_question(it.question) for it in clean}
    both = [it.id for it in sham if it.id in ids or _norm_question(it.question) in questions or key(it) in keys]
    if both:
        raise RuntimeError(f"{len(both)} sham item(s) overlap the clean data, first {both[0]!r}")


def training_items(run_dir: str | os.PathLike[str], role: str | None = None) -> list[Item]:
    """The non-benchmark items a contamination run trained on (`<run>/training_items.jsonl`: clean and sham
    items, each row's ``role``), optionally only one `role` ("clean" | "sham"). Reference building excludes
    their values. A run dir without the file (its data stage predates it) is a one-line DataError."""
    path = Path(run_dir) / TRAINING_ITEMS
    if not path.is_file():
        raise DataError(f"no {TRAINING_ITEMS}: the run's data stage predates it; rerun the contamination to write it "
                        "(finished training is kept)", path=str(run_dir))
    return [Item.from_dict(row) for row in read_jsonl(path) if role is None or row.get("role") == role]


def backfill_training_items(cfg: Mapping[str, Any], items: list[Item], run_dir: Path, seed: int) -> list[Item]:
    """`training_items.jsonl` for a run dir whose data stage predates it, without touching its training data.

    Such a run is a leak (the sham arm came with the file): its clean items are regenerated from the clean count
    its sft_data.jsonl implies (the clean stream is deterministic) and checked against the clean records, so a
    finished SFT/GRPO adapter stays valid. A mismatch (the clean data was drawn differently) is a DataError."""
    path = run_dir / "sft_data.jsonl"
    records = list(read_jsonl(path))
    if any(r["source"] == "sham" for r in records):
        raise DataError(f"sham records without {TRAINING_ITEMS}: use a fresh output_dir", path=str(path))
    ex = dict(cfg.get("exposure") or {})
    n_bench = sum(r["source"] == "benchmark" for r in records)
    by_id = {it.id: it for it in _clean_data(cfg, n_clean_examples(n_bench, float(ex.get("clean_fraction", 0.0))),
                                             items, seed)}
    for r in records:
        if r["source"] != "clean":
            continue
        it = by_id.get(r["original_id"])
        if it is None or it.question != r["prompt"][0]["content"]:
            raise DataError(f"clean item {r['original_id']!r} is not the clean data this config draws: cannot write "
                            f"{TRAINING_ITEMS}; use a fresh output_dir", path=str(path))
    used = {r["original_id"] for r in records if r["source"] == "clean"}
    clean = [it for it in by_id.values() if it.id in used]
    write_jsonl(run_dir / TRAINING_ITEMS, [{**it.to_dict(), "role": "clean"} for it in clean])
    counts_path = run_dir / "data_counts.json"
    if counts_path.exists():
        counts = read_json(counts_path)
        if "arm" not in counts:
            write_json(counts_path, {"arm": "leak", **counts, "n_sham": 0})
    return clean


# ---------------------------------------------------------------------------------------------- eval
def full_cot_eval(model: Any, tokenizer: Any, items: Sequence[Item], *, max_new_tokens: int = 256,
                  batch_size: int = 64, chat: bool = True,
                  chat_template_kwargs: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Greedy full-CoT generation on each item's question; per-item pred / correct / malformed records.

    Rendered with the model config's `chat_template_kwargs` (Qwen3's enable_thinking=False), as training and
    detection render it."""
    from zcp.backends import wrap_model
    from zcp.backends.base import GenerationRequest, Prompt

    backend = wrap_model(model, tokenizer, gen_batch_size=batch_size,
                         chat_template_kwargs=dict(chat_template_kwargs or {}))
    outs = backend.generate([GenerationRequest(Prompt(user=it.question, chat=chat), max_new_tokens=max_new_tokens)
                             for it in items])
    rows = []
    for it, text in zip(items, outs, strict=True):
        s = score_completion(text, it.answer)
        rows.append({"id": it.id, "gold": it.answer, "pred": s["pred"], "correct": bool(s["correct"]),
                     "malformed": bool(s["malformed"]), "formatted": bool(s["formatted"]), "output": text})
    return rows


def _eval_subset(items: Sequence[Item], max_items: int | None) -> list[Item]:
    ordered = sorted(items, key=lambda it: it.id)
    return ordered if not max_items else ordered[: int(max_items)]


def _evaluate_stage(stage: str, model_fn: Any, tokenizer: Any, splits: dict[str, list[Item]], run_dir: Path,
                    ecfg: Mapping[str, Any], chat: bool,
                    chat_template_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
    """Accuracy per split for one model (cached in eval/<stage>.json); returns (summary, was_run)."""
    out = run_dir / "eval" / f"{stage}.json"
    if out.exists():
        return read_json(out), False
    model = model_fn()
    dev = ecfg.get("device") or ("cuda" if _cuda() else "cpu")  # under accelerate, rank 0 evaluates on its GPU
    model.to(dev)
    summary: dict[str, Any] = {}
    records = []
    for split, its in splits.items():
        if not its:
            continue
        rows = full_cot_eval(model, tokenizer, its, max_new_tokens=int(ecfg.get("max_new_tokens", 256)),
                             batch_size=int(ecfg.get("batch_size", 64)), chat=chat,
                             chat_template_kwargs=chat_template_kwargs)
        for r in rows:
            r["split"] = split
        records += rows
        summary[split] = {"n": len(rows), "acc": sum(r["correct"] for r in rows) / len(rows),
                          "malformed": sum(r["malformed"] for r in rows) / len(rows)}
    write_jsonl(run_dir / "eval" / f"{stage}.jsonl", records)
    write_json(out, summary)
    return summary, True


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def table6(evals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Table 6 analogue: rows = splits, columns = model stages (base, after SFT, final), accuracy and Δ."""
    stages = list(evals)
    splits = [s for s in ("C_leaked", "C_not_leaked", "C", "U") if any(s in evals[st] for st in stages)]
    rows = []
    for sp in splits:
        row: dict[str, Any] = {"split": sp, "n": next(evals[st][sp]["n"] for st in stages if sp in evals[st])}
        for st in stages:
            row[st] = evals[st].get(sp, {}).get("acc")
            row[f"{st}_malformed"] = evals[st].get(sp, {}).get("malformed")
        first, last = row.get(stages[0]), row.get(stages[-1])
        row["delta"] = None if first is None or last is None else last - first
        rows.append(row)
    return {"stages": stages, "rows": rows}


def table6_markdown(t: Mapping[str, Any]) -> str:
    """The Table 6 analogue as markdown (accuracy in %)."""
    names = {"base": "Before", "after_sft": "After SFT", "final": "After (final)"}
    st = t["stages"]
    head = "| Split | N | " + " | ".join(names.get(s, s) for s in st) + " | Δ |"
    lines = ["Full-CoT greedy accuracy (%) before and after contamination.", "", head,
             "|" + "---|" * (len(st) + 3)]
    pct = lambda v: "–" if v is None else f"{100 * v:.1f}"  # noqa: E731
    for r in t["rows"]:
        d = "–" if r["delta"] is None else f"{100 * r['delta']:+.1f}"
        lines.append(f"| {r['split']} | {r['n']} | " + " | ".join(pct(r[s]) for s in st) + f" | {d} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- pipeline
def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _barrier() -> None:
    """Wait for all ranks under `accelerate launch`/`torchrun`; a no-op in a single process."""
    if _distributed():
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def _tracker(cfg: Mapping[str, Any], run_cfg: Mapping[str, Any], run_dir: Path, job_type: str) -> Any:
    from zcp.core.tracking import Tracker

    lcfg = dict(cfg.get("logger") or {"enabled": False})
    lcfg.setdefault("group", cfg.get("name") or run_dir.name)
    if not _is_main():
        lcfg["enabled"] = False
    return Tracker(lcfg, run_config=run_cfg, run_dir=str(run_dir), job_type=job_type,
                   name=f"{lcfg['group']}-{job_type}")


def _save_merged(model: Any, tokenizer: Any, dest: Path) -> None:
    """Save the merged model through a temporary folder; a failed write names `dest` (`zcp.core.io.as_write_error`)."""
    from zcp.core.io import naming_write_errors

    tmp = dest.with_name(dest.name + ".tmp")
    with naming_write_errors(dest):
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("zcp", "torch", "transformers", "trl", "peft"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def contaminate(cfg: Any) -> ContaminationResult:
    """Run split → data → SFT → GRPO → merge → Table 6 into the run dir; resumable; see module doc.

    The stages (`pipeline_stages`) run through `zcp.simulate.stages.run_stages`, which skips finished
    ones. The main process holds the run directory's lock throughout: a second run on the same directory
    refuses at once (the other ranks of a distributed run share the directory with it). Bad input (an
    unknown answer format or reward, a missing file, an LLM paraphraser without a model) fails with one
    line before any model loads.
    """
    import contextlib

    c = _to_dict(cfg)
    check_inputs(c)
    fingerprint = _config_fingerprint(c)  # hashes the base model's files once per run
    run_dir = _run_dir(c, fingerprint).resolve()
    if _is_main():
        check_run_dir_writable(c, run_dir)
    with RunLock(run_dir) if _is_main() else contextlib.nullcontext():
        return _contaminate(c, fingerprint, run_dir)


MIN_FREE_MARGIN = 64 << 20  # bytes a run needs beyond its merged model (records, adapters, checkpoints of LoRA)


def min_free_bytes(c: Mapping[str, Any], run_dir: Path) -> int:
    """The free space a contamination run states it needs before it starts: the base model's size (the merged
    model it writes) plus `MIN_FREE_MARGIN`; only the margin once model/ exists (a hub model: its size unknown)."""
    if (run_dir / "model" / "config.json").is_file():
        return MIN_FREE_MARGIN
    base = Path(resolve_model_path((c.get("model") or {}).get("path")))
    size = sum(f.stat().st_size for f in base.rglob("*") if f.is_file()) if base.is_dir() else 0
    return size + MIN_FREE_MARGIN


def check_run_dir_writable(c: Mapping[str, Any], run_dir: Path) -> None:
    """RunDirError (one line) before any model loads when the run dir cannot be written or lacks the free space
    `min_free_bytes` states (`zcp.core.io.check_writable`)."""
    from zcp.core.io import check_writable

    key = "output_dir" if c.get("output_dir") else "the run dir"
    check_writable(run_dir, min_free_bytes(c, run_dir), key=key)


def check_inputs(c: Mapping[str, Any]) -> None:
    """One-line errors for settings that would otherwise fail deep inside training (before any model loads)."""
    from zcp.errors import ConfigError
    from zcp.simulate.rewards import check_answer_format, reward_funcs

    ex = dict(c.get("exposure") or {})
    try:
        check_answer_format(str(ex.get("answer_format", "probe")))
        reward_funcs(_reward_names(c))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if ex.get("paraphraser") == "llm" and int(ex.get("k", 0)) > 0 and (not ex.get("paraphrases_path") or is_sham(ex)):
        model = (c.get("paraphrase") or {}).get("model") or {}
        if not model.get("path"):
            raise ConfigError("exposure.paraphraser=llm needs paraphrase.model.path (a model config built through "
                              "zcp.config.build_backend; see conf/contaminate.yaml)")
    for key, value in (("exposure.paraphrases_path", ex.get("paraphrases_path")),
                       ("split.c_path", (c.get("split") or {}).get("c_path")),
                       ("split.u_path", (c.get("split") or {}).get("u_path"))):
        if value and not Path(resolve_model_path(str(value))).is_file():
            raise ConfigError(f"{key}={value}: no such file")
    split = dict(c.get("split") or {})
    if bool(split.get("c_path")) != bool(split.get("u_path")):
        raise ConfigError("split.c_path and split.u_path go together (the C file and the U file)")
    if split.get("c_path") and (c.get("manifest_path") or (c.get("benchmark") or {}).get("source") == "data"):
        raise ConfigError("split.c_path/u_path give the items and the split: do not also set manifest_path or "
                          "benchmark.source=data")
    check_base_model(c)
    items, n_c = _benchmark_and_c_size(c)
    check_exposure_counts(c, items, n_c)
    check_schedules(c, max_sft_examples(c, n_c))


def check_base_model(c: Mapping[str, Any]) -> None:
    """ConfigError (one line) unless `model.path` is a loadable base model: a local folder with config.json,
    safetensors weights (training loads safetensors only) and a tokenizer; a hub id is left to the hub."""
    from zcp.config import check_model_path
    from zcp.errors import ConfigError

    given = (c.get("model") or {}).get("path")
    path = resolve_model_path(given)
    check_model_path(path)
    p = Path(path)
    if not p.is_dir():
        return
    if not (any(p.glob("*.safetensors")) or (p / "model.safetensors.index.json").is_file()):
        other = sorted(f.name for f in p.iterdir() if f.suffix in (".bin", ".pt", ".pth", ".gguf"))
        hint = (f" (it holds {', '.join(other[:3])}: save the model with safe_serialization=True)" if other
                else " (a folder with config.json only: the weights were not saved or not copied)")
        raise ConfigError(f"model.path={given}: no safetensors weights in {p}{hint}")
    if not any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ConfigError(f"model.path={given}: no tokenizer in {p} (tokenizer.json / tokenizer_config.json)")


def max_sft_examples(c: Mapping[str, Any], n_c: int) -> int:
    """The most SFT examples the data stage can build (`build_training_data`): the trained items (round(leak_fraction
    x |C|), or the sham items) x their examples each (k variants, + the original), plus the clean examples that
    make `clean_fraction` of that. A paraphrase shortfall or a dropped item without a CoT gives fewer."""
    ex = dict(c.get("exposure") or {})
    if is_sham(ex):
        n = int(ex["sham_items"]) if ex.get("sham_items") is not None else n_c
    else:
        n = n_leaked(float(ex.get("leak_fraction", 1.0)), n_c)
    n_bench = n * _examples_per_item(ex)
    return n_bench + n_clean_examples(n_bench, float(ex.get("clean_fraction", 0.0)))


def _processes() -> int:
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def _sft_settings(c: Mapping[str, Any]) -> dict[str, Any]:
    """The SFTConfig settings of the run: train.sft with the exposure knobs (epochs, learning rate) over it."""
    ex = dict(c.get("exposure") or {})
    knobs = {key: float(ex[k]) for k, key in (("sft_epochs", "num_train_epochs"), ("lr", "learning_rate")) if k in ex}
    return {**dict((c.get("train") or {}).get("sft") or {}), **knobs}


def _grpo_schedule_settings(c: Mapping[str, Any]) -> dict[str, Any]:
    """The GRPOConfig settings that decide GRPO's learning-rate schedule (train.grpo, max_steps = grpo_steps)."""
    _, settings = _grpo_reward_settings(dict(c.get("train") or {}))
    return {**settings, "max_steps": int((c.get("exposure") or {}).get("grpo_steps", 0))}


SFT_FIX = ("raise exposure.sft_epochs or the number of examples (exposure.k, benchmark size), lower "
           "train.sft.per_device_train_batch_size or train.sft.gradient_accumulation_steps, or lower "
           "train.sft.warmup_steps")
GRPO_FIX = "raise exposure.grpo_steps, or lower train.grpo.warmup_steps"


def check_schedules(c: Mapping[str, Any], n_sft: int | None) -> None:
    """Before anything runs: ConfigError when the SFT schedule on `n_sft` examples (`max_sft_examples`: at most
    that many, so a schedule refused here is refused for every data stage) or the GRPO schedule leaves no
    optimizer step at a learning rate above 0 (`zcp.simulate.sft.check_schedule`, which also warns when a
    schedule never leaves its warmup). The SFT stage checks again on the examples it got."""
    from trl import GRPOConfig, SFTConfig

    from zcp.simulate.sft import check_schedule, lr_schedule

    check_schedule(lr_schedule(SFTConfig, _sft_settings(c), n_sft, stage="SFT", processes=_processes()), SFT_FIX,
                   warn=False)
    if int((c.get("exposure") or {}).get("grpo_steps", 0)) > 0:
        check_schedule(lr_schedule(GRPOConfig, _grpo_schedule_settings(c), None, stage="GRPO",
                                   processes=_processes()), GRPO_FIX)


def schedules(c: Mapping[str, Any], n_sft: int) -> dict[str, Any]:
    """The SFT schedule on the run's `n_sft` examples and the GRPO schedule, as exposure.json records them."""
    from trl import GRPOConfig, SFTConfig

    from zcp.simulate.sft import lr_schedule

    out = {"sft": asdict(lr_schedule(SFTConfig, _sft_settings(c), n_sft, stage="SFT", processes=_processes()))}
    if int((c.get("exposure") or {}).get("grpo_steps", 0)) > 0:
        out["grpo"] = asdict(lr_schedule(GRPOConfig, _grpo_schedule_settings(c), None, stage="GRPO",
                                         processes=_processes()))
    return out


def _benchmark_and_c_size(c: Mapping[str, Any]) -> tuple[list[Item], int]:
    """The benchmark items and |C| the split stage will give (`planned_manifest`), computed without writing anything."""
    split = dict(c.get("split") or {})
    if split.get("c_path") and split.get("u_path"):
        c_items, u_items = load_split_files(c)
        return c_items + u_items, len(c_items)
    items = load_benchmark(c)
    return items, len(planned_manifest(c, items).c_ids)


def check_exposure_counts(c: Mapping[str, Any], items: list[Item] | None = None, n_c: int | None = None) -> None:
    """One-line ConfigErrors for leak counts, before any model loads: a leak_fraction outside [0, 1] or one that
    rounds to no C item (`check_leak_count`), and a sham run (leak_fraction=0) without enough sham items
    (`sham_training_items`). Reads the benchmark (and the clean file) only when a check needs |C|; `items` and
    `n_c` (the data stage's) skip that."""
    from zcp.errors import ConfigError

    ex = dict(c.get("exposure") or {})
    try:
        fraction = float(ex.get("leak_fraction", 1.0))
    except (TypeError, ValueError):
        raise ConfigError(f"exposure.leak_fraction={ex.get('leak_fraction')!r}: must be a number in [0, 1]") from None
    if ex.get("sham_items") is not None and int(ex["sham_items"]) < 1:
        raise ConfigError(f"exposure.sham_items={ex['sham_items']}: must be null (|C|) or an integer >= 1")
    if not 0.0 <= fraction <= 1.0 or fraction == 1.0:
        check_leak_count(fraction, 1)  # the range (all of C leaks at 1.0: no count to check)
        return
    if items is None or n_c is None:
        items, n_c = _benchmark_and_c_size(c)
    if fraction > 0.0:
        check_leak_count(fraction, n_c)
    else:
        sham_training_items(c, items, n_c, int(c.get("seed", 0)))


def _reward_names(c: Mapping[str, Any]) -> list[str]:
    """GRPO reward names: the keys of `train.rewards` (name -> weight), else the default pair."""
    rewards = (c.get("train") or {}).get("rewards")
    return list(rewards) if rewards else list(DEFAULT_REWARDS)


def _grpo_reward_settings(train: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """(reward names, GRPOConfig settings) with `reward_weights` taken from `train.rewards` by name."""
    settings = dict(train.get("grpo") or {})
    rewards = train.get("rewards")
    if not rewards:
        return list(DEFAULT_REWARDS), settings
    if settings.get("reward_weights") is not None:
        raise ValueError("set GRPO reward weights by name in train.rewards, not also train.grpo.reward_weights")
    settings["reward_weights"] = [float(w) for w in rewards.values()]
    return list(rewards), settings


class _Pipeline:
    """The state one contamination run shares between its stages (read lazily from the run directory)."""

    def __init__(self, c: dict[str, Any], fingerprint: dict[str, Any], run_dir: Path) -> None:
        self.c, self.fingerprint, self.run_dir = c, fingerprint, run_dir
        self.seed = int(c.get("seed", 0))
        self.ex = dict(c["exposure"])
        self.train = dict(c.get("train") or {})
        self.mcfg = dict(c.get("model") or {})
        self.ecfg = dict(c.get("eval") or {})
        self.base_path = resolve_model_path(self.mcfg.get("path"))
        self.trc = bool(self.mcfg.get("trust_remote_code", False))
        self.dtype = self.mcfg.get("dtype") or "auto"
        self.chat = bool(self.mcfg.get("chat", True))
        self.ctk = self.mcfg.get("chat_template_kwargs")
        self.do_eval = bool(self.ecfg.get("enabled", True))
        self.grpo_steps = int(self.ex.get("grpo_steps", 0))
        self.lora = {**dict(self.train.get("lora") or {}), "r": int(self.ex["lora_r"])}
        self.sft_settings = _sft_settings(c)
        self.sft_dir = run_dir / "sft_adapter"
        self.grpo_dir = run_dir / "grpo_adapter" if self.grpo_steps > 0 else None
        self.model_dir = run_dir / "model"
        self.sft_path = run_dir / "sft_data.jsonl"
        self.manifest_path = run_dir / "manifest.json"
        self._items: list[Item] | None = None
        self._tokenizer: Any = None

    # ------------------------------------------------------------------------------ shared state
    def items(self) -> list[Item]:
        if self._items is None:
            self._items = load_benchmark(self.c)
        return self._items

    def manifest(self) -> Any:
        from zcp.benchmarks.split import Manifest

        return Manifest.load(self.manifest_path)

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.base_path, trust_remote_code=self.trc)
        return self._tokenizer

    def sft_records(self) -> list[dict[str, Any]]:
        records = list(read_jsonl(self.sft_path))
        if self.ctk:
            for r in records:
                r["chat_template_kwargs"] = dict(self.ctk)
        return records

    def leaked_ids(self) -> list[str]:
        return sorted({r["original_id"] for r in read_jsonl(self.sft_path) if r["source"] == "benchmark"})

    @property
    def arm(self) -> str:
        """leak, or sham (exposure.leak_fraction=0: nothing of C trained on)."""
        return "sham" if is_sham(self.ex) else "leak"

    def eval_splits(self) -> dict[str, list[Item]]:
        manifest, items = self.manifest(), self.items()
        c_items, u_items = manifest.subset(items, "C"), manifest.subset(items, "U")
        mx = self.ecfg.get("max_items")
        if self.arm == "sham":  # nothing of C leaked: C is one split
            return {"C": _eval_subset(c_items, mx), "U": _eval_subset(u_items, mx)}
        leaked = set(self.leaked_ids())
        return {
            "C_leaked": _eval_subset([it for it in c_items if it.id in leaked], mx),
            "C_not_leaked": _eval_subset([it for it in c_items if it.id not in leaked], mx),
            "U": _eval_subset(u_items, mx),
        }

    def base_model(self) -> Any:
        return load_model(self.base_path, dtype=self.dtype, trust_remote_code=self.trc)

    def sft_merged(self) -> Any:
        from zcp.simulate.grpo import merge_adapter

        return merge_adapter(self.base_model(), self.sft_dir)

    def final_model(self) -> Any:
        from zcp.simulate.grpo import merge_adapter

        m = self.sft_merged()
        return merge_adapter(m, self.grpo_dir) if self.grpo_dir is not None else m

    # ------------------------------------------------------------------------------ stage steps
    def split_done(self) -> bool:
        src = self.c.get("manifest_path")
        if src and self.manifest_path.exists():
            return sha256_file(resolve_model_path(src)) == sha256_file(self.manifest_path)
        return self.manifest_path.exists()

    def run_split(self) -> None:
        _manifest(self.c, self.items(), self.run_dir, self.seed)

    def data_done(self) -> bool:
        """The data stage's outputs exist: sft_data.jsonl (written last) and training_items.jsonl (a run dir made
        before that file existed reruns the stage, which then only writes it: `backfill_training_items`)."""
        return self.sft_path.exists() and (self.run_dir / TRAINING_ITEMS).exists()

    def run_data(self) -> None:
        if self.sft_path.exists():  # an older run's finished data stage: keep its training data (and adapters)
            backfill_training_items(self.c, self.items(), self.run_dir, self.seed)
            return
        check_exposure_counts(self.c, self.items(), len(self.manifest().c_ids))  # before a teacher model loads
        teacher = None
        tpath = (self.c.get("cot") or {}).get("teacher")
        if tpath:
            from zcp.config import build_backend

            teacher = build_backend({"path": resolve_model_path(tpath), "trust_remote_code": self.trc})
        build_training_data(self.c, self.items(), self.manifest(), self.run_dir, self.seed, teacher)

    def eval_done(self, stage: str) -> bool:
        return (self.run_dir / "eval" / f"{stage}.json").exists()

    def run_eval(self, stage: str, model_fn: Any) -> None:
        _evaluate_stage(stage, model_fn, self.tokenizer(), self.eval_splits(), self.run_dir, self.ecfg, self.chat,
                        self.ctk)

    def run_sft(self) -> None:
        from trl import SFTConfig

        from zcp.simulate.sft import check_schedule, lr_schedule, run_sft

        records = self.sft_records()  # the schedule on the examples the data stage built, before the model loads
        check_schedule(lr_schedule(SFTConfig, self.sft_settings, len(records), stage="SFT", processes=_processes()),
                       SFT_FIX)
        run_cfg = {**self.c, "exposure": self.ex}
        tracker = _tracker(self.c, run_cfg, self.run_dir, "sft")
        try:
            run_sft(self.base_model(), self.tokenizer(), records, output_dir=self.run_dir / "sft",
                    adapter_dir=self.sft_dir, lora=self.lora, settings=self.sft_settings, seed=self.seed,
                    report_to="wandb" if tracker.enabled else "none", cpu=not _cuda())
        finally:
            tracker.finish()

    def grpo_training(self) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        """(reward names, GRPOConfig settings, LoRA settings) of the GRPO stage."""
        names, settings = _grpo_reward_settings(self.train)
        settings["max_steps"] = self.grpo_steps
        if self.ctk:
            settings["chat_template_kwargs"] = dict(self.ctk)
        lora = {**dict(self.train.get("grpo_lora") or self.train.get("lora") or {}), "r": int(self.ex["lora_r"])}
        return names, settings, lora

    def run_grpo(self) -> None:
        from zcp.simulate.grpo import run_grpo
        from zcp.simulate.rewards import reward_funcs

        names, settings, lora = self.grpo_training()
        funcs = reward_funcs(names, str(self.ex.get("answer_format", "probe")))
        run_cfg = {**self.c, "exposure": self.ex}
        tracker = _tracker(self.c, run_cfg, self.run_dir, "grpo")
        try:
            run_grpo(self.sft_merged(), self.tokenizer(), list(read_jsonl(self.run_dir / "grpo_data.jsonl")),
                     output_dir=self.run_dir / "grpo", adapter_dir=self.grpo_dir, lora=lora, settings=settings,
                     seed=self.seed, report_to="wandb" if tracker.enabled else "none", cpu=not _cuda(),
                     reward_funcs=funcs)
        finally:
            tracker.finish()

    def run_merge(self) -> None:
        _save_merged(self.final_model(), self.tokenizer(), self.model_dir)

    def stages(self) -> list[Stage]:
        """The pipeline as named stages, in order (see `zcp.simulate.stages`)."""
        after_sft = self.do_eval and self.grpo_dir is not None and bool(self.ecfg.get("after_sft", True))
        return [
            Stage("split", self.split_done, self.run_split, main_only=True),
            Stage("data", self.data_done, self.run_data, main_only=True),
            Stage("eval_base", lambda: self.eval_done("base"), lambda: self.run_eval("base", self.base_model),
                  main_only=True, enabled=self.do_eval),
            Stage("sft", lambda: adapter_done(self.sft_dir), self.run_sft),
            Stage("grpo", lambda: adapter_done(self.grpo_dir), self.run_grpo, enabled=self.grpo_dir is not None),
            Stage("merge", lambda: (self.model_dir / "config.json").is_file(), self.run_merge, main_only=True),
            Stage("eval_after_sft", lambda: self.eval_done("after_sft"),
                  lambda: self.run_eval("after_sft", self.sft_merged), main_only=True, enabled=after_sft),
            Stage("eval_final", lambda: self.eval_done("final"),
                  lambda: self.run_eval("final", lambda: load_model(self.model_dir, dtype=self.dtype,
                                                                    trust_remote_code=self.trc)),
                  main_only=True, enabled=self.do_eval),
        ]

    # ------------------------------------------------------------------------------ report
    def evals(self) -> dict[str, dict[str, Any]]:
        """Table 6 inputs: the cached accuracy summaries of the evaluation stages that are enabled."""
        if not self.do_eval:
            return {}
        names = ["base"]
        if self.grpo_dir is not None and self.ecfg.get("after_sft", True):
            names.append("after_sft")
        names.append("final")
        return {n: read_json(self.run_dir / "eval" / f"{n}.json") for n in names}

    def write_report(self, leaked_ids: list[str]) -> dict[str, Any]:
        """table6.{json,md}, exposure.json and the W&B summary/artifact; returns Table 6."""
        c, ex, seed = self.c, self.ex, self.seed
        evals = self.evals()
        t6 = table6(evals) if evals else {"stages": [], "rows": []}
        run_dir, manifest_path, exposure_path = self.run_dir, self.manifest_path, self.run_dir / "exposure.json"
        write_json(run_dir / "table6.json", t6)
        (run_dir / "table6.md").write_text(table6_markdown(t6) if evals else "evaluation disabled\n")
        manifest = self.manifest()
        leaked_set = set(leaked_ids)
        names, grpo_settings, _ = self.grpo_training()
        counts = read_json(run_dir / "data_counts.json")
        sham = self.arm == "sham"
        exposure = {
            "schema": EXPOSURE_SCHEMA,
            "arm": self.arm,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seed": seed,
            "seeds": {"run": seed, "split": _or((c.get("split") or {}).get("seed"), seed), "leak": seed,
                      "paraphrase": seed, "format_mix": seed, "clean": _or((c.get("clean") or {}).get("seed"), seed + 1),
                      "sft": seed, "grpo": seed, **({"sham": sham_seed(seed)} if sham else {})},
            "knobs": {
                "k": int(ex["k"]), "sft_epochs": float(ex["sft_epochs"]),
                "leak_fraction": float(ex.get("leak_fraction", 1.0)),
                "answer_only_fraction": float(ex.get("answer_only_fraction", 0.0)),
                "answer_format": str(ex.get("answer_format", "probe")),
                "lora_r": int(ex["lora_r"]), "grpo_steps": self.grpo_steps,
                "clean_fraction": float(ex.get("clean_fraction", 0.0)), "lr": float(ex["lr"]),
                "paraphraser": ex.get("paraphraser", "auto"), "include_original": bool(ex.get("include_original", False)),
                "paraphrases_path": ex.get("paraphrases_path"),
                "grpo_prompts": ex.get("grpo_prompts", "variants"),
                "grpo_rewards": names,
                **({"sham_items": int(counts["n_sham"])} if sham else {}),  # the count trained on (null: |C|)
            },
            "base_model": self.base_path,
            "base_model_fingerprint": self.fingerprint["base_model_fingerprint"],
            "model_dir": str(self.model_dir),
            "sft_adapter": str(self.sft_dir),
            "sft_adapter_base": self.base_path,
            "grpo_adapter": str(self.grpo_dir) if self.grpo_dir is not None else None,
            "grpo_adapter_base": "base_model with sft_adapter merged" if self.grpo_dir is not None else None,
            "manifest": str(manifest_path),
            "manifest_sha256": sha256_file(manifest_path),
            "split_files": {k: (c.get("split") or {}).get(k) for k in ("c_path", "u_path")},
            "benchmark_items": str(run_dir / "benchmark_items.jsonl"),
            "variants": str(run_dir / "variants.jsonl"),
            "sft_data": str(self.sft_path),
            "benchmark": c.get("benchmark"),
            "training_items": str(run_dir / TRAINING_ITEMS),
            "leaked_ids": leaked_ids,
            "c_not_leaked_ids": sorted(set(manifest.c_ids) - leaked_set),
            "u_ids": sorted(manifest.u_ids),
            "sham_ids": sorted(it.id for it in training_items(run_dir, "sham")) if sham else [],
            "counts": counts,
            "training": {"lora": self.lora, "sft": self.sft_settings,
                         "grpo": grpo_settings if self.grpo_dir else None,
                         # optimizer steps, warmup, steps at a learning rate > 0 (zcp.simulate.sft.lr_schedule)
                         "schedules": schedules(c, sum(1 for _ in read_jsonl(self.sft_path)))},
            "table6": str(run_dir / "table6.json"),
            "config_hash": stable_hash(json.dumps({k: v for k, v in c.items() if k not in _NOT_FINGERPRINTED},
                                                  sort_keys=True, default=str)),
            "versions": _versions(),
        }
        write_json(exposure_path, exposure)
        tracker = _tracker(c, {**c, "exposure": ex}, run_dir, "contaminate")
        try:
            tracker.table("table6", t6["rows"])
            tracker.summary({f"acc/{r['split']}/{s}": r[s] for r in t6["rows"] for s in t6["stages"]})
            tracker.summary({f"exposure/{k}": v for k, v in exposure["knobs"].items()})
            tracker.summary({"arm": self.arm})
            tracker.artifact(f"contamination-{stable_hash(str(run_dir), 8)}", "contamination",
                             [str(exposure_path), str(manifest_path), str(run_dir / "table6.json"),
                              str(run_dir / "table6.md")])
        finally:
            tracker.finish()
        arm = (f"sham run: nothing of C leaked, {counts['n_sham']} sham items trained on instead\n" if sham else "")
        print(f"\n{table6_markdown(t6) if evals else ''}\n{arm}exposure record: {exposure_path}\n"
              f"{'fine-tuned' if sham else 'contaminated'} model: {self.model_dir}")
        return t6


def pipeline_stages(cfg: Any, run_dir: str | os.PathLike[str] | None = None) -> list[Stage]:
    """The named stages of the contamination run `cfg` would make (for inspection: `done()` of each)."""
    c = _to_dict(cfg)
    fp = _config_fingerprint(c)
    return _Pipeline(c, fp, Path(run_dir) if run_dir else _run_dir(c, fp).resolve()).stages()


def _contaminate(c: dict[str, Any], fingerprint: dict[str, Any], run_dir: Path) -> ContaminationResult:
    p = _Pipeline(c, fingerprint, run_dir)
    seed_everything(p.seed)
    threads = p.train.get("torch_threads")
    if threads:
        # Tiny models on a shared CPU: one thread avoids OpenMP spin contention (10-100x faster here).
        import torch

        torch.set_num_threads(int(threads))
    if _distributed():
        from accelerate import PartialState

        PartialState()  # sets up the process group so the barriers below work before any trainer exists
    if _is_main():
        _fingerprint_check(run_dir, c, fingerprint)
    _barrier()
    done = run_stages(p.stages(), is_main=_is_main(), barrier=_barrier)
    leaked_ids = p.leaked_ids()
    t6 = p.write_report(leaked_ids) if _is_main() else table6(p.evals())
    _barrier()
    return ContaminationResult(run_dir=run_dir, model_dir=p.model_dir, sft_adapter_dir=p.sft_dir,
                               grpo_adapter_dir=p.grpo_dir, manifest_path=p.manifest_path,
                               exposure_path=run_dir / "exposure.json", table6=t6, leaked_ids=leaked_ids,
                               stages_run=done.run, stages_skipped=done.skipped, arm=p.arm)


def load_exposure(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check an `exposure.json` (or the run dir holding one); raises DataError when malformed."""
    p = Path(path)
    if p.is_dir():
        p = p / "exposure.json"
    try:
        rec = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"cannot read exposure record ({e})", path=str(p)) from e
    for key in ("schema", "knobs", "leaked_ids", "model_dir", "manifest", "base_model"):
        if key not in rec:
            raise DataError("missing key", path=str(p), field=key)
    if rec["schema"] != EXPOSURE_SCHEMA:
        raise DataError(f"unsupported schema {rec['schema']}", path=str(p), field="schema")
    return rec


def result_dict(r: ContaminationResult) -> dict[str, Any]:
    """A JSON-ready view of a ContaminationResult."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(r).items()}

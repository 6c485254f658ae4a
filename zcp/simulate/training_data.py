"""The contamination run's data stage: which C items leak, their paraphrases and CoTs, the format mix, the clean
mix, GRPO prompts, and the sham arm's stand-ins for C; the JSONL files a run trains on.

``exposure.leak_fraction=0`` is the **sham arm**, the negative control: the training data of a full leak of the
same recipe (k paraphrases, CoTs, format mix, clean mix, GRPO prompts) built on `exposure.sham_items` fresh
non-benchmark items instead of C (`build_training_data`), so a detector that flags its C or U is a false
positive of fine-tuning itself. Its records say ``source: sham``.

Writes into the run dir: ``benchmark_items.jsonl``, ``variants.jsonl`` (the paraphrases trained on),
``grpo_data.jsonl``, ``training_items.jsonl`` (every non-benchmark item trained on, with its role),
``data_counts.json`` and, last (its presence marks the stage done), ``sft_data.jsonl``.

``exposure.suppress`` (the probe-aware evader, zcp.simulate.suppress) appends examples on the probe's own zero-CoT
prompt to the SFT set after the clean count is drawn (the clean mix is the one the same leak has without them).
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.core.io import read_json, read_jsonl, write_json, write_jsonl
from zcp.core.items import Item
from zcp.core.rundir import BENCHMARK_ITEMS
from zcp.errors import DataError
from zcp.simulate import data as tdata
from zcp.simulate.benchmark import generated_benchmark
from zcp.simulate.rundir import is_sham, resolve_model_path
from zcp.simulate.settings import sim_config
from zcp.simulate.simulation_config import ExposureConfig

log = logging.getLogger(__name__)

TRAINING_ITEMS = "training_items.jsonl"  # the non-benchmark items a run trains on (clean and sham), with their role
SHAM_PREFIX = "sham"  # id prefix of generated sham items


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


def _examples_per_item(ex: ExposureConfig) -> int:
    """SFT examples one leaked item yields at most: its k variants (or the original at k = 0), plus the original
    when `include_original` (fewer when a paraphraser falls short or an item without a CoT is dropped)."""
    k = int(ex.k)
    return 1 if k == 0 else k + int(bool(ex.include_original))


def _clean_data(cfg: Any, n: int, items: Sequence[Item], seed: int) -> list[Item]:
    """The run's `n` clean items (`clean.*`; clean.seed null = `seed` + 1), avoiding the benchmark `items`. The draw
    is a prefix of one seeded stream (generated problems, or the shuffled rows of clean.path), so the first n of a
    larger draw are these."""
    clean = sim_config(cfg).clean
    return tdata.clean_items(n, seed=seed + 1 if clean.seed is None else int(clean.seed), exclude_items=items,
                             source=clean.source, path=clean.path, fmt=clean.format)


def _norm_question(text: str) -> str:
    return " ".join(str(text).split())


def sham_seed(seed: int) -> int:
    """The seed of the generated sham items, derived from the run seed (distinct from the clean data's seed + 1)."""
    return tdata.item_seed(seed, "sham-items")


def n_sham_items(ex: ExposureConfig, n_c: int) -> int:
    """How many sham items a sham run trains on: `exposure.sham_items`, null = |C| (`n_c`)."""
    return int(ex.sham_items) if ex.sham_items is not None else int(n_c)


def sham_training_items(cfg: Any, items: Sequence[Item], n_c: int, seed: int) -> list[Item]:
    """The sham arm's stand-ins for C: `exposure.sham_items` (null: |C| = `n_c`) items outside the benchmark.

    Generated word problems (benchmark.source=wordproblems) get fresh problems of the benchmark's families (id
    prefix ``sham``, seed `sham_seed`), excluding every benchmark signature and those of the clean items a full
    leak of this recipe would draw at most; any other benchmark gets a seeded choice of the rows of `clean.path`
    that are neither benchmark items (by id or question) nor among those clean rows. So sham and clean data never
    overlap whatever the final clean count. Too few rows, or no clean file, is a one-line ConfigError."""
    from zcp.errors import ConfigError

    s = sim_config(cfg)
    ex = s.exposure
    n = n_sham_items(ex, n_c)
    if n < 1:
        raise ConfigError(f"exposure.sham_items={n}: the sham run needs at least one item (C is empty)")
    n_clean_max = n_clean_examples(n * _examples_per_item(ex), float(ex.clean_fraction))
    clean_pool = _clean_data(s, n_clean_max, items, seed)
    if generated_benchmark(s):
        from zcp.benchmarks.wordproblems import generate_word_problems, signatures

        avoid = signatures(it for it in [*items, *clean_pool] if it.metadata.get("source") == "wordproblem")
        try:
            return generate_word_problems(n, seed=sham_seed(seed), families=s.benchmark.families,
                                          id_prefix=SHAM_PREFIX, exclude=avoid)
        except ValueError as e:
            raise ConfigError(f"exposure.sham_items={n}: {e}") from None
    clean = s.clean
    path = clean.path
    if clean.source != "file" or not path:
        raise ConfigError("exposure.leak_fraction=0 (a sham run) on a benchmark that is not generated draws its sham "
                          "items from a file: set clean.source=file and clean.path=FILE (rows not in the benchmark)")
    if not Path(str(path)).is_file():
        raise ConfigError(f"clean.path={path}: no such file")
    from zcp.benchmarks.loaders import load_items

    taken_ids = {it.id for it in [*items, *clean_pool]}
    taken_q = {_norm_question(it.question) for it in [*items, *clean_pool]}
    rows = [it for it in load_items(str(path), format=clean.format)
            if it.id not in taken_ids and _norm_question(it.question) not in taken_q]
    if len(rows) < n:
        raise ConfigError(f"clean.path={path}: {len(rows)} row(s) are neither benchmark items nor clean data "
                          f"({len(clean_pool)} rows); the sham run needs {n} (exposure.sham_items, null = |C|)")
    return random.Random(f"sham|{seed}").sample(rows, n)


def _paraphraser(cfg: Any, trained: Sequence[Item], items: list[Item]) -> tuple[Any, Any]:
    """(paraphraser, pre-built variants or None) of the data stage: `exposure.paraphrases_path` for benchmark
    items, the LLM paraphraser built from `paraphrase.*`, or the name of `exposure.paraphraser`."""
    s = sim_config(cfg)
    ex = s.exposure
    k, sham = int(ex.k), is_sham(ex)
    paraphraser: Any = ex.paraphraser
    prebuilt = None
    if ex.paraphrases_path and k > 0 and not sham:
        prebuilt = tdata.load_prebuilt_variants(resolve_model_path(str(ex.paraphrases_path)), items,
                                                [it.id for it in trained], fmt=str(ex.paraphrases_format),
                                                variant=ex.paraphrases_variant, pair_by=ex.paraphrases_pair_by)
    elif paraphraser == "llm" and k > 0:
        from zcp.benchmarks.build import make_paraphraser

        paraphraser = make_paraphraser({"name": "llm", "model": s.paraphrase.model,
                                        "options": dict(s.paraphrase.options)})
    if sham and ex.paraphrases_path and k > 0:
        log.warning("sham run: exposure.paraphrases_path holds benchmark paraphrases only; the sham items are "
                    "paraphrased by exposure.paraphraser=%s", ex.paraphraser)
    return paraphraser, prebuilt


def build_training_data(cfg: Any, items: list[Item], manifest: Any, run_dir: Path, seed: int,
                        teacher: Any | None = None) -> dict[str, Any]:
    """Leak selection, paraphrases, CoTs, format mix, clean mix; writes the JSONL files and returns counts.

    The sham arm (`leak_fraction=0`) runs the same recipe on `sham_training_items` instead of the leaked C
    items: the same k, CoTs, answer-only share and answer format, the clean count computed from its own number
    of examples (|C| sham items give the full leak's count, and its clean items), GRPO prompts of the same kind.
    Pre-built paraphrases (`paraphrases_path`) exist for benchmark items only: sham items are paraphrased by
    `exposure.paraphraser` (recorded as `sham_paraphraser`). Writes `training_items.jsonl` (the clean and sham
    items trained on) and data_counts.json before sft_data.jsonl, whose presence marks the stage done."""
    s = sim_config(cfg)
    ex, cot_cfg = s.exposure, s.cot
    c_items, u_items = manifest.subset(items, "C"), manifest.subset(items, "U")
    sham = is_sham(ex)
    trained = (sham_training_items(s, items, len(c_items), seed) if sham
               else choose_leaked(c_items, float(ex.leak_fraction), seed))
    source = "sham" if sham else "benchmark"
    answer_format = str(ex.answer_format)
    k = int(ex.k)
    paraphraser, prebuilt = _paraphraser(s, trained, items)
    variants, short = tdata.make_variants(trained, k, seed, paraphraser, bool(ex.include_original), prebuilt=prebuilt)
    cots, missing = tdata.synthesize_cots(trained, teacher, attempts=int(cot_cfg.attempts),
                                          max_new_tokens=int(cot_cfg.max_new_tokens),
                                          temperature=float(cot_cfg.temperature), seed=seed)
    f = float(ex.answer_only_fraction)
    records = tdata.build_sft_records(variants, cots, f, seed, source=source, on_missing_cot=cot_cfg.on_missing,
                                      answer_format=answer_format)
    n_clean = n_clean_examples(len(records), float(ex.clean_fraction))
    clean = _clean_data(s, n_clean, items, seed)
    if sham:
        _check_disjoint(trained, clean)
    clean_cots, _ = tdata.synthesize_cots(clean, None)
    clean_f = s.clean.answer_only_fraction  # null: the contamination's mix
    records += tdata.build_sft_records(clean, clean_cots, f if clean_f is None else float(clean_f), seed + 1,
                                       source="clean", on_missing_cot="drop")
    grpo_src = variants if ex.grpo_prompts == "variants" else trained
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
    if sham and ex.paraphrases_path and k > 0:
        counts["sham_paraphraser"] = str(ex.paraphraser)
    if answer_format != "probe":
        counts["answer_formats"] = dict(sorted(Counter(r.get("answer_format", "probe") for r in contamination).items()))
    if ex.suppress.enabled:  # the probe-aware evader (zcp.simulate.suppress); off: the records are unchanged
        from zcp.simulate.suppress import suppression_counts, suppression_records

        records += suppression_records(variants, clean, ex.suppress, s.probe_settings, seed, source=source)
        counts.update(n_sft_examples=len(records), **suppression_counts(records, ex.suppress))
    write_jsonl(run_dir / BENCHMARK_ITEMS, [it.to_dict() for it in items])
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


def backfill_training_items(cfg: Any, items: list[Item], run_dir: Path, seed: int) -> list[Item]:
    """`training_items.jsonl` for a run dir whose data stage predates it, without touching its training data.

    Such a run is a leak (the sham arm came with the file): its clean items are regenerated from the clean count
    its sft_data.jsonl implies (the clean stream is deterministic) and checked against the clean records, so a
    finished SFT/GRPO adapter stays valid. A mismatch (the clean data was drawn differently) is a DataError."""
    s = sim_config(cfg)
    path = run_dir / "sft_data.jsonl"
    records = list(read_jsonl(path))
    if any(r["source"] == "sham" for r in records):
        raise DataError(f"sham records without {TRAINING_ITEMS}: use a fresh output_dir", path=str(path))
    n_bench = sum(r["source"] == "benchmark" for r in records)
    by_id = {it.id: it for it in _clean_data(s, n_clean_examples(n_bench, float(s.exposure.clean_fraction)),
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

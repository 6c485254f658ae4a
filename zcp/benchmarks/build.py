"""Build the datasets of a contamination study: items, C/U split, reference set, paraphrases of C.

`build_data(cfg)` (Hydra entry: ``evaluate/run_build_data.py``) writes into one output directory:

- ``items.jsonl``: the benchmark items in zcp's format;
- ``manifest.json``: the C/U split (`zcp.benchmarks.split`), read by training and detection alike;
- ``reference.jsonl``: m isomorphic reference draws per item, each row naming its ``original_id``, from the
  builder registry (`zcp.benchmarks.references.registry`: generated word problems and ArithMark exactly, fresh draws from
  the generator's law under the same selection; GSM8K by re-executing its calculator annotations with matched
  features; anything else the LLM generator + judges pipeline), plus ``reference_verdicts.jsonl`` for the LLM
  pipeline;
- ``paraphrases.jsonl``: k validated surface variants of every C item (what a contaminated model trains on);
- ``build_report.json``: counts, coverage, every rejection with its reason, the exclusions (values the audited
  model was trained on, `reference.exclude`), the per-feature exchangeability check of the draws against their
  originals (`zcp.benchmarks.references.shift`: residual shift and a within-item permutation p per feature), the difficulty shift of the
  reference answers against the originals (`answer_shift`: larger/smaller, more/fewer digits, mean
  digits and log10|answer|, leading-digit distributions, warnings past ``reference_shift``'s
  thresholds), seed, source and output hashes.

The reference set is the auditor's private asset: W&B gets counts and similarity statistics only, unless
``log_reference_to_wandb=true``.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

from zcp.benchmarks.data_config import BuildDataJob  # noqa: F401  (registers the build_data job and its groups)
from zcp.benchmarks.references.shift import numeric_answer
from zcp.core.io import sha256_file
from zcp.core.items import Item

log = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------------- items


def load_dataset_items(data_cfg: Any, seed: int) -> tuple[list[Item], list[dict[str, Any]], str | None]:
    """Items of the `data` config: a file read by `zcp.benchmarks.loaders`, ArithMark records, or generated items.

    The reading is `zcp.benchmarks.dataset.read_data` (the one reader of a `data` config, items only: the build
    makes the split and the reference set): every source goes through `check_duplicates` (`data.on_duplicate`:
    a repeated question is refused, or with merge counted once), then `data.limit` / `data.sample` select.
    Returns (items, skipped rows with file/row/reason, including repeated questions left out, the source file's
    absolute path or None when generated).
    """
    from zcp.benchmarks.dataset import read_data

    read = read_data(data_cfg, seed=seed, items_only=True)  # a job's checked `data`, or built from a mapping
    return read.items, read.skipped, (str(Path(read.path).resolve()) if read.path else None)


def reference_method(method: str, data_cfg: Any, items: list[Item]) -> str:
    """Resolve `reference.method` (``auto``: from the data format and the items) against the builder registry."""
    from zcp.benchmarks.data_config import DataConfig
    from zcp.benchmarks.references.registry import resolve_method
    from zcp.config.schemas import group_config

    return resolve_method(method, items, group_config(DataConfig, data_cfg, "data").format)


def reference_context(items: list[Item], seed: int, ref_cfg: Any = None, *, benchmark: list[Item] | None = None,
                      extra_exclude: list[str] | None = None, backends: dict[str, Any] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """The reference builders' context from the `reference` config: exclusions (`reference.exclude`, default
    ``auto``, plus `extra_exclude`), the benchmark-exclusion and special-case policies, the builder's options;
    and the exclusions' report."""
    from zcp.benchmarks.data_config import ReferenceBuildConfig
    from zcp.benchmarks.references.exclusions import exclusion_keys
    from zcp.benchmarks.references.registry import BuildContext
    from zcp.config.schemas import group_config

    rc = group_config(ReferenceBuildConfig, ref_cfg, "reference")  # the defaults are ReferenceBuildConfig's
    sources = [rc.exclude] if isinstance(rc.exclude, str) else list(rc.exclude)
    keys, report = exclusion_keys([*sources, *(extra_exclude or [])], benchmark or items)
    opts = {"generator": rc.generator, "judges": rc.judges, "pipeline": rc.pipeline}
    ctx = BuildContext(seed=seed, benchmark=tuple(benchmark or items), exclude=keys,
                       exclude_benchmark=str(rc.exclude_benchmark).lower(), special_cases=rc.special_cases,
                       options=opts, backends=backends)
    return ctx, report


def build_reference(items: list[Item], method: str, m: int, seed: int, ref_cfg: Any = None,
                    backends: dict[str, Any] | None = None) -> tuple[list[Item], list[dict[str, Any]], list[dict[str, Any]]]:
    """m reference items per item by `method` (a registered builder, `zcp.benchmarks.references.registry`); returns
    (references, rejections, LLM verdicts). See `build_reference_set` for the report as well."""
    rs = build_reference_set(items, method, m, seed, ref_cfg, backends)[0]
    return (rs.rows(items) if rs is not None else []), (rs.rejections if rs else []), (rs.verdicts if rs else [])


def build_reference_set(items: list[Item], method: str, m: int, seed: int, ref_cfg: Any = None,
                        backends: dict[str, Any] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """The `ReferenceSet` of `method` on `items` (None for ``none``) and the exclusions' report."""
    from zcp.benchmarks.references.registry import build_references

    if method == "none":
        return None, []
    ctx, excl = reference_context(items, seed, ref_cfg, backends=backends)
    return build_references(items, method, m, ctx), excl


# ------------------------------------------------------------------------------------ difficulty shift


def _digits(value: Fraction) -> int:
    return len(str(int(abs(value))))


def _leading_digit(text: Any) -> str | None:
    """The first digit of an answer as written (what a digit-split tokenizer emits first after a sign)."""
    for ch in str(text):
        if ch.isdigit():
            return ch
    return None


def answer_shift(items: list[Item], refs: list[Item], max_digit_shift: float = 0.05,
                 max_size_shift: float = 0.10) -> dict[str, Any]:
    """How the reference answers differ from their originals' (any reference method: it compares answers).

    Every reference row is paired with its original (an original counts once per reference row).
    Shares of pairs whose reference answer is larger / smaller / of equal magnitude than the
    original's, has more / fewer / the same number of digits (of the whole part), mean digits and
    mean log10|answer| of both, and the leading-digit distributions with their total-variation
    distance. A warning is added when |longer - shorter| exceeds `max_digit_shift` or |larger -
    smaller| exceeds `max_size_shift`: the probe would then compare the originals against a set that
    is systematically harder (or easier), and a clean model would show a gap. Non-numeric answers are
    counted (`unparsed`) and left out.
    """
    originals = {it.id: it for it in items}
    pairs: list[tuple[Fraction, Fraction, str | None, str | None]] = []
    unparsed = 0
    for r in refs:
        orig = originals.get(str(r.metadata.get("original_id")))
        if orig is None:
            continue
        a, b = numeric_answer(orig.answer), numeric_answer(r.answer)
        if a is None or b is None:
            unparsed += 1
            continue
        pairs.append((a, b, _leading_digit(orig.answer), _leading_digit(r.answer)))
    n = len(pairs)
    out: dict[str, Any] = {"pairs": n, "unparsed": unparsed,
                           "thresholds": {"max_digit_shift": max_digit_shift, "max_size_shift": max_size_shift}}
    if not n:
        out["warnings"] = []
        return out

    def share(cond: Any) -> float:
        return round(sum(1 for p in pairs if cond(*p)) / n, 4)

    out.update({
        "larger": share(lambda a, b, *_: abs(b) > abs(a)),
        "smaller": share(lambda a, b, *_: abs(b) < abs(a)),
        "equal_magnitude": share(lambda a, b, *_: abs(b) == abs(a)),
        "longer": share(lambda a, b, *_: _digits(b) > _digits(a)),
        "shorter": share(lambda a, b, *_: _digits(b) < _digits(a)),
        "same_digits": share(lambda a, b, *_: _digits(b) == _digits(a)),
        "sign_changed": share(lambda a, b, *_: (a > 0) != (b > 0) or (a < 0) != (b < 0)),
        "mean_digits": {"original": round(statistics.fmean(_digits(a) for a, *_ in pairs), 4),
                        "reference": round(statistics.fmean(_digits(b) for _, b, *_ in pairs), 4)},
    })
    logs_a = [math.log10(abs(a)) for a, *_ in pairs if a]
    logs_b = [math.log10(abs(b)) for _, b, *_ in pairs if b]
    out["mean_log10_abs"] = {"original": round(statistics.fmean(logs_a), 4) if logs_a else None,
                             "reference": round(statistics.fmean(logs_b), 4) if logs_b else None}
    lead_a = Counter(p[2] for p in pairs if p[2] is not None)
    lead_b = Counter(p[3] for p in pairs if p[3] is not None)
    digits = [str(d) for d in range(10)]
    dist_a = {d: round(lead_a[d] / max(1, sum(lead_a.values())), 4) for d in digits}
    dist_b = {d: round(lead_b[d] / max(1, sum(lead_b.values())), 4) for d in digits}
    out["leading_digit"] = {"original": dist_a, "reference": dist_b,
                            "total_variation": round(sum(abs(dist_a[d] - dist_b[d]) for d in digits) / 2, 4)}
    warnings = []
    digit_shift = out["longer"] - out["shorter"]
    size_shift = out["larger"] - out["smaller"]
    if abs(digit_shift) > max_digit_shift:
        warnings.append(f"reference answers are systematically {'longer' if digit_shift > 0 else 'shorter'} than "
                        f"the originals: {out['longer']:.1%} have more digits, {out['shorter']:.1%} fewer "
                        f"(|difference| > {max_digit_shift:.0%})")
    if abs(size_shift) > max_size_shift:
        warnings.append(f"reference answers are systematically {'larger' if size_shift > 0 else 'smaller'} than "
                        f"the originals: {out['larger']:.1%} larger, {out['smaller']:.1%} smaller "
                        f"(|difference| > {max_size_shift:.0%})")
    out["digit_shift"] = round(digit_shift, 4)
    out["size_shift"] = round(size_shift, 4)
    out["warnings"] = warnings
    return out


# ------------------------------------------------------------------------------------- paraphrases


def make_paraphraser(para_cfg: Any, backend: Any = None) -> Any:
    """The paraphraser of the `paraphrase` config (`name`, its options; `model` for the LLM one)."""
    from zcp.benchmarks.data_config import ParaphraseConfig
    from zcp.benchmarks.paraphrase import get_paraphraser
    from zcp.config.schemas import group_config

    pc = group_config(ParaphraseConfig, para_cfg, "paraphrase")  # the defaults are ParaphraseConfig's
    name = pc.name
    opts = {k: v for k, v in pc.options.items() if v is not None}
    if name == "llm":
        if backend is None:
            from zcp.backends.registry import build_backend

            if pc.model is None or pc.model.get("path") in (None, "", "???"):  # ???: required, not given
                raise ValueError("paraphrase=llm needs paraphrase.model.path (see conf/paraphrase/llm.yaml)")
            backend = build_backend(pc.model)
        opts["backend"] = backend
    return get_paraphraser(name, **opts)


# -------------------------------------------------------------------------------------------- main


def _files_hashes(out: Path, names: list[str]) -> dict[str, str]:
    return {n: sha256_file(out / n) for n in names if (out / n).exists()}


def build_data(cfg: Any, *, backends: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build items, split, reference set and paraphrases as configured; returns the build report.

    `backends` (tests, notebooks) may supply ready backends: {"generator", "judges"} for the LLM
    reference pipeline and "paraphraser" for the LLM paraphraser.
    """
    from omegaconf import DictConfig, OmegaConf

    from zcp.config import run_dir, validate

    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(cfg)
    # every key typed and in range before anything is read; the job reads the checked BuildDataJob (its dataclasses
    # hold the defaults); the raw cfg only names and hashes the run dir and is saved as config.yaml
    job = validate(cfg, job="build_data")["__job__"]
    from zcp.core.io import RunLock
    from zcp.core.rundir import claim_run_dir

    out = run_dir(cfg, "build_data", job.data.name)
    made_of = build_made_of(cfg, job.data)
    # the directory is this configuration's (or new) before anything is written: another configuration's build
    # (its reference set is the auditor's private, possibly costly asset) is refused, naming both fingerprints;
    # the lock keeps a second build of the same directory out while this one runs
    with RunLock(out):
        same = claim_run_dir(out, "build_data", made_of, products=BUILD_PRODUCTS)
        finished = _finished_build(out) if same else None
        if finished is not None:
            log.info("%s already holds this build (fingerprint unchanged, every file as build_report.json says): "
                     "nothing to do", out)
            print(f"already built -> {out}")
            return finished
        return _build(cfg, job, out, backends)


BUILD_PRODUCTS = ("items.jsonl", "manifest.json", "reference.jsonl", "paraphrases.jsonl", "build_report.json")
BUILD_REPORT = "build_report.json"
_NOT_MADE_OF = ("output_dir", "logger", "log_reference_to_wandb")  # where it goes and what W&B sees: no product


def build_made_of(cfg: Any, data_cfg: Any) -> dict[str, Any]:
    """What a build is made from (its run directory's fingerprint, `zcp.core.rundir.claim_run_dir`): the resolved
    config without where it is written and what is logged, and the content hash of the data file (the same
    `data.path` with another content is other data)."""
    from zcp.config import to_dict

    conf = {k: v for k, v in to_dict(cfg).items() if k not in _NOT_MADE_OF and k != "hydra"}
    path = getattr(data_cfg, "path", None)
    data_sha = sha256_file(path) if isinstance(path, str) and Path(path).is_file() else None
    if data_sha is not None and isinstance(conf.get("data"), dict):  # the content, not where the checkout lies
        conf["data"] = {k: v for k, v in conf["data"].items() if k != "path"}
    return {"config": conf, "data_sha256": data_sha}


def _finished_build(out: Path) -> dict[str, Any] | None:
    """The build report when `out` holds a finished build whose files are as the report says, else None."""
    path = out / BUILD_REPORT
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = report.get("files") if isinstance(report, dict) else None
    if not isinstance(files, dict) or any(n not in files for n in BUILD_PRODUCTS if n != BUILD_REPORT):
        return None
    return report if _files_hashes(out, list(files)) == files else None


def _build(cfg: Any, job: Any, out: Path, backends: dict[str, Any] | None) -> dict[str, Any]:
    """The build itself, in `out` (claimed and locked by `build_data`)."""
    from zcp.benchmarks.loaders import save_items
    from zcp.benchmarks.references.builders import progress
    from zcp.benchmarks.split import split_items
    from zcp.config import save_config, to_dict
    from zcp.core.io import seed_everything, write_jsonl
    from zcp.core.tracking import Tracker

    seed = job.seed
    seed_everything(seed)
    data_cfg, ref_cfg, para_cfg, split_cfg = job.data, job.reference, job.paraphrase, job.split
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out)
    t0 = time.time()

    items, skipped, source = load_dataset_items(data_cfg, seed)
    save_items(out / "items.jsonl", items)
    manifest = split_items(items, seed, c_fraction=split_cfg.c_fraction, stratify_by=split_cfg.stratify_by,
                           source_path=source)
    manifest.save(out / "manifest.json")

    method = reference_method(ref_cfg.method, data_cfg, items)
    m = ref_cfg.m
    ref_set, exclusions = build_reference_set(items, method, m, seed, ref_cfg, backends)
    refs = ref_set.rows(items) if ref_set is not None else []
    ref_rejections = ref_set.rejections if ref_set is not None else []
    verdicts = ref_set.verdicts if ref_set is not None else []
    builder_report = dict(ref_set.report) if ref_set is not None else {"method": "none"}
    exchangeability = builder_report.pop("exchangeability", {"warnings": []})
    save_items(out / "reference.jsonl", refs)
    if verdicts:
        write_jsonl(out / "reference_verdicts.jsonl", verdicts)

    k = para_cfg.k
    para_items: list[Item] = []
    para_report: dict[str, Any] = {"paraphraser": None}
    para_rejections: list[dict[str, Any]] = []
    if k > 0 and para_cfg.name != "none":
        paraphraser = make_paraphraser(para_cfg, (backends or {}).get("paraphraser"))
        targets = items if para_cfg.split == "all" else manifest.subset(items, "C")
        for it in progress(targets, f"paraphrase ({para_cfg.name}, k={k})"):
            para_items.extend(paraphraser.paraphrase(it, k, seed))
        para_report, para_rejections = paraphraser.report(), paraphraser.rejections
    save_items(out / "paraphrases.jsonl", para_items)
    print(f"built {len(items)} items: {len({r.metadata.get('original_id') for r in refs})} with a reference "
          f"({len(refs)} rows, {len(ref_rejections)} items short of m={m}), {len(para_items)} paraphrases -> {out}")

    shift = answer_shift(items, refs, job.reference_shift.max_digit_shift, job.reference_shift.max_size_shift)
    if builder_report.get("law") == "exact":
        # exact draws are i.i.d. with their originals: a pair's digits differ by chance, not by design; the
        # exchangeability check (a test, per feature) is the criterion, the shares stay as a description
        shift["warnings"] = []
        shift["thresholds_applied"] = False
    for w in [*shift["warnings"], *exchangeability.get("warnings", [])]:
        log.warning("WARNING reference set (%s): %s", method, w)

    per_item = Counter(r.metadata["original_id"] for r in refs)
    covered = set(per_item)
    rouge = [p.metadata["rougeL"] for p in para_items]
    bleu = [p.metadata["bleu"] for p in para_items]
    counts = {
        "items": len(items), "skipped_rows": len(skipped), "C": len(manifest.c_ids), "U": len(manifest.u_ids),
        "reference_items": len(refs), "reference_covered": len(covered),
        "reference_full": sum(1 for it in items if per_item[it.id] >= m),
        "reference_rejected": sum(1 for r in ref_rejections if r["kept"] == 0),
        "paraphrases": len(para_items),
        "paraphrase_rejections": sum(1 for r in para_rejections if r["round"] is not None),
    }
    report = {
        "seed": seed,
        "data": {"name": data_cfg.name, "format": data_cfg.format, "path": source,
                 "sha256": sha256_file(source) if source else None},
        "counts": counts,
        "reference": {"method": method, "m": m, "coverage": len(covered) / len(items) if items else 0.0,
                      "law": builder_report.get("law"), "exclusions": exclusions,
                      "builder": {k: v for k, v in builder_report.items() if k not in ("method", "m", "law")},
                      "exchangeability": exchangeability,
                      "shift": shift,
                      "rejection_reasons": dict(Counter(_reason_kind(r["reason"]) for r in ref_rejections)),
                      "rejections": ref_rejections},
        "warnings": [f"reference: {w}" for w in shift["warnings"]]
                    + [f"reference exchangeability: {w}" for w in exchangeability.get("warnings", [])],
        "paraphrase": {**para_report, "k": k,
                       "rougeL_mean": statistics.fmean(rouge) if rouge else None,
                       "bleu_mean": statistics.fmean(bleu) if bleu else None,
                       "rejections": para_rejections},
        "skipped_rows": skipped,
        "split": {"c_fraction": manifest.c_fraction, "stratify_by": manifest.stratify_by, "seed": manifest.seed},
        "seconds": round(time.time() - t0, 2),
    }
    files = ["items.jsonl", "manifest.json", "reference.jsonl", "reference_verdicts.jsonl", "paraphrases.jsonl"]
    report["files"] = _files_hashes(out, files)
    report["output_dir"] = str(out)
    (out / BUILD_REPORT).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")

    with Tracker(job.logger, run_config=to_dict(cfg), run_dir=str(out), job_type="build_data") as tracker:
        flat = {f"counts/{k}": v for k, v in counts.items()}
        flat.update({f"reference/shift_{k}": shift.get(k) for k in ("larger", "smaller", "longer", "shorter")})
        flat.update({"reference/coverage": report["reference"]["coverage"],
                     "paraphrase/rougeL_mean": report["paraphrase"]["rougeL_mean"],
                     "paraphrase/bleu_mean": report["paraphrase"]["bleu_mean"]})
        tracker.log({k: v for k, v in flat.items() if v is not None})
        tracker.summary({k: v for k, v in flat.items() if v is not None})
        tracker.table("paraphrase_similarity", [{"id": p.id, "rougeL": p.metadata["rougeL"], "bleu": p.metadata["bleu"]}
                                                for p in para_items])
        if job.log_reference_to_wandb:  # opt-in: the reference set is private
            tracker.table("reference", [{"id": r.id, "original_id": r.metadata["original_id"], "question": r.question,
                                         "answer": r.answer} for r in refs])
    return report


def _reason_kind(reason: str) -> str:
    """A short class of a rejection reason (numbers and quoted text removed) for counting."""
    import re

    text = re.sub(r"^row \d+: ", "", reason)
    text = re.sub(r"'[^']*'|\"[^\"]*\"|<<[^>]*>>|\{[^}]*\}|[-\d.,/]+", "#", text)
    return text[:100]

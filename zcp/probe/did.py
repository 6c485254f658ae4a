"""Difference-in-differences (DiD) of a model against its base model: the zero-CoT gap that training created.

ZCP's gap on an item is S - S_ref: the model's score on the original (or on a paraphrase variant) minus the
mean over the item's reference draws. A base model that already scores higher on originals than on their
perturbations (special values, a reference builder's residual shift) has a gap of its own; what the audited
model adds on top of it is the DiD, item-paired: gap_model(i) - gap_base(i).

The test is ZCP's own within-item permutation test on the per-version differences D = score_model -
score_base (each version, the original and every reference draw both models scored, paired by draw): the DiD
is the original's D minus the mean of its references' D, and relabelling which version is the original is
exact whenever the versions are exchangeable for the two models jointly (no contamination in either: the
null the calibration's exact-null pools build). An earlier sign-flip test of the per-item gap differences
assumed the two gaps exchangeable with each other, which fails when the models differ in level or shape (a
CoT-only fine-tune against its base: 21-27% rejections at alpha 0.05 on exact-null pools,
docs/results/calibration.md). Continuous kind (a difference of binary scores takes -1, 0, 1). One test over all
reference draws, the seeds' Monte Carlo streams pooled; per seed, the same test on the seed's stream (and with
stats.reference_draws=per_seed on the seed's share of the draws) for the stability display. The verdict per
(split, variant) is Bonferroni over the metrics at stats.alpha, like ZCP's own verdict.

One entry, `did_between` (two detection run dirs): the simulation's detection stage (zcp.simulate.pipeline: the
fine-tuned model against its base, `did.md`) and an auditor's run_detect with `base_model.path` (`detect_did`:
`<out>/did.md` and summary.json's `did` block) both read their DiD there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zcp.core.io import read_jsonl
from zcp.probe.detect import (
    ORIGINAL,
    RECORDS,
    REFERENCE,
    DetectSettings,
    distinct_draws,
    item_draws,
    seed_share,
)
from zcp.probe.metrics import metric_label, metric_value
from zcp.probe.report import c_cont_text
from zcp.probe.stats import TestResult, c_cont, paired_test, pooled_mc_pvalue
from zcp.probe.void import combine_valid, void_map

DID_TEST = "within-item permutation of per-version model - base differences"


def _variants(records: Sequence[dict[str, Any]], split: str) -> list[str]:
    """The probed variants of a split other than the reference, the original first (as in zcp.probe.detect.analyse)."""
    found = {r["variant"] for r in records if r["split"] == split and r["variant"] != REFERENCE}
    return sorted(found, key=lambda v: (v != ORIGINAL, v))


def item_gaps(records: Sequence[dict[str, Any]], split: str, variant: str, metric: str,
              pick: tuple[int, int] | None = None) -> dict[str, float]:
    """Per original item of `split`: mean score of its `variant` rows minus the mean of its distinct reference
    draws (all of them, or with `pick` = (k, n_seeds) seed k's share, as in zcp.probe.detect.item_draws)."""
    s = item_draws([r for r in records if r["split"] == split and r["variant"] == variant], metric)
    ref = item_draws(distinct_draws([r for r in records if r["split"] == split and r["variant"] == REFERENCE]),
                     metric, pick)
    return {i: float(np.mean(s[i])) - float(np.mean(ref[i])) for i in s if i in ref}


def _by_draw(records: Sequence[dict[str, Any]], metric: str) -> dict[str, dict[int, float]]:
    """original_id -> {draw: score}."""
    out: dict[str, dict[int, float]] = {}
    for r in records:
        out.setdefault(r["original_id"], {})[int(r["draw"])] = metric_value(r, metric)
    return out


def version_differences(model_records: Sequence[dict[str, Any]], base_records: Sequence[dict[str, Any]], split: str,
                        variant: str, metric: str, pick: tuple[int, int] | None = None
                        ) -> tuple[list[str], list[list[float]], list[list[float]]]:
    """Per original item both models scored: the model - base difference of each of its `variant` rows and of
    each reference draw both scored (paired by draw; with `pick` = (k, n_seeds) seed k's share of those draws, as
    in zcp.probe.detect.item_draws). Returns (ids, original differences, reference differences)."""
    def rows(recs: Sequence[dict[str, Any]], v: str) -> list[dict[str, Any]]:
        out = [r for r in recs if r["split"] == split and r["variant"] == v]
        return distinct_draws(out) if v == REFERENCE else out

    om, ob = _by_draw(rows(model_records, variant), metric), _by_draw(rows(base_records, variant), metric)
    rm, rb = _by_draw(rows(model_records, REFERENCE), metric), _by_draw(rows(base_records, REFERENCE), metric)
    ids, orig, ref = [], [], []
    for i in sorted(set(om) & set(ob) & set(rm) & set(rb)):
        o = [om[i][d] - ob[i][d] for d in sorted(set(om[i]) & set(ob[i]))]
        draws = sorted(set(rm[i]) & set(rb[i]))
        if pick is not None and draws:
            draws = seed_share(draws, pick)
        if o and draws:
            ids.append(i)
            orig.append(o)
            ref.append([rm[i][d] - rb[i][d] for d in draws])
    return ids, orig, ref


def did_rows(model_records: Sequence[dict[str, Any]], base_records: Sequence[dict[str, Any]], splits: Sequence[str],
             metrics: Sequence[str], settings: DetectSettings, *, variants: Sequence[str] | None = None,
             label: str = "ft") -> list[dict[str, Any]]:
    """Per split, variant and metric: the mean gaps of the model and of the base, their DiD and its test.

    `variants`: the variants to compare (null: every variant the model's records hold for the split, the
    original first). `label` names the model's gap field, `gap_<label>` (the simulation's `gap_ft`).
    Items are those both models have a gap for. A row's `did_std` is the std of the per-seed DiDs.
    """
    n_seeds = len(settings.seeds)
    key = f"gap_{label}"
    rows = []
    for split in splits:
        for variant in (list(variants) if variants is not None else _variants(model_records, split)):
            for metric in metrics:
                def diffs(pick: tuple[int, int] | None, split: str = split, variant: str = variant,
                          metric: str = metric) -> tuple[list[str], list[list[float]], list[list[float]]]:
                    return version_differences(model_records, base_records, split, variant, metric, pick)

                def test(g: tuple[list[str], list[list[float]], list[list[float]]], seed: int) -> TestResult:
                    ids, orig, ref = g
                    return paired_test("diff", orig, ref, ids=ids, B=settings.bootstrap_samples, seed=seed,
                                       kind="continuous")

                g_all = diffs(None)
                streams = [test(g_all, seed) for seed in settings.seeds]
                p = pooled_mc_pvalue(streams)
                ids = g_all[0]

                def gap_means(pick: tuple[int, int] | None, ids: list[str] = ids, split: str = split,
                              variant: str = variant, metric: str = metric) -> tuple[float, float]:
                    gm = item_gaps(model_records, split, variant, metric, pick)
                    gb = item_gaps(base_records, split, variant, metric, pick)
                    return (float(np.mean([gm[i] for i in ids])) if ids else float("nan"),
                            float(np.mean([gb[i] for i in ids])) if ids else float("nan"))

                all_gaps = gap_means(None)  # every draw: the row's gaps, and each seed's when seeds share the draws
                per_draws = settings.reference_draws != "all"
                per_seed = []
                for k, seed in enumerate(settings.seeds):
                    res = streams[k] if not per_draws else test(diffs((k, n_seeds)), seed)
                    g_m, g_b = gap_means((k, n_seeds)) if per_draws else all_gaps
                    per_seed.append({"seed": seed, key: g_m, "gap_base": g_b, "did": res.diff,
                                     "p_value": res.p_value, "c_cont": res.c_cont})
                main = streams[0]
                g_m, g_b = all_gaps
                rows.append({"split": split, "variant": variant, "metric": metric, "n": main.n, key: g_m,
                             "gap_base": g_b, "did": main.diff,
                             "did_std": float(np.std([q["did"] for q in per_seed], ddof=1)) if n_seeds > 1 else 0.0,
                             "p_value": p, "c_cont": c_cont(p), "test": DID_TEST, "per_seed": per_seed})
    return rows


def did_verdicts(rows: Sequence[dict[str, Any]], alpha: float,
                 void: Mapping[tuple[str, str], Mapping[str, str]] | None = None) -> list[dict[str, Any]]:
    """Per (split, variant): Bonferroni over the metrics' DiD p-values at `alpha` (zcp.probe.stats.combine);
    `contaminated` means the model's gap exceeds the base model's. Metrics VOID in the audited run (`void`, from
    zcp.probe.void.void_map of its results) are left out, as in its own verdict (`combine_valid`)."""
    groups: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows:
        groups.setdefault((r["split"], r.get("variant", ORIGINAL)), {})[r["metric"]] = r["p_value"]
    off = void or {}
    return [{"split": split, "variant": variant, **combine_valid(ps, off.get((split, variant), {}), alpha)}
            for (split, variant), ps in groups.items()]


def did_markdown(rows: Sequence[dict[str, Any]], *, label: str = "ft", model_title: str = "FT",
                 variant_column: bool = False, verdicts: Sequence[dict[str, Any]] | None = None) -> str:
    """The DiD table (the simulation's did.md with the defaults); with `verdicts`, one verdict line per
    (split, variant) below it; `variant_column` adds the variant (original or a paraphrase variant)."""
    key = f"gap_{label}"
    head = ["Dataset", *(["Variant"] if variant_column else []), "Metric", f"gap {model_title} (S - S_ref)",
            "gap base", "DiD", "C_cont (DiD > 0)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["split"], *([r["variant"]] if variant_column else []), metric_label(r["metric"]),
                 f"{r[key]:+.3f}", f"{r['gap_base']:+.3f}", f"{r['did']:+.3f} ± {r['did_std']:.3f}",
                 c_cont_text(r["c_cont"], 0.0, False)]
        lines.append("| " + " | ".join(cells) + " |")
    if verdicts:
        alpha = verdicts[0]["alpha"]
        lines += ["", f"DiD verdict (Bonferroni over the metrics, alpha = {alpha}; {DID_TEST}):"]
        for v in verdicts:
            what = (f"the {model_title} model's gap exceeds the base model's" if v["contaminated"]
                    else "no evidence beyond the base model's gap")
            drive = f", driven by {metric_label(v['driving_metric'])}" \
                if v["contaminated"] and v["driving_metric"] else ""
            lines.append(f"- {v['split']} / {v['variant']}: {what} (combined C_cont "
                         f"{c_cont_text(v['c_cont'], 0.0, False)}, p = {v['p_value']:.3g}{drive})")
    return "\n".join(lines) + "\n"


def did_between(model_dir: str | Path, base_dir: str | Path, splits: Sequence[str], metrics: Sequence[str],
                settings: DetectSettings, *, variants: Sequence[str] | None = None,
                label: str = "model") -> list[dict[str, Any]]:
    """The one DiD entry: the detection run in `model_dir` against the base model's run in `base_dir` (each dir's
    records.jsonl), per split, variant and metric (`did_rows`; `variants` null: every variant the model's run
    probed). run_detect's `base_model.path` (`detect_did`: every variant, `gap_model`) and the simulation's
    detection stage (the originals, `gap_ft`, from its FT and base runs) both read their DiD here."""
    return did_rows(list(read_jsonl(Path(model_dir) / RECORDS)), list(read_jsonl(Path(base_dir) / RECORDS)), splits,
                    metrics, settings, variants=variants, label=label)


# ---------------------------------------------------------------- run_detect with base_model.path (an auditor's DiD)

BASE_DIR = "base"  # <out>/base/: the base model's own detection run
DID_MD = "did.md"


def base_model_config(base_cfg: Any, model_cfg: Any) -> Any:
    """The base model's engine config, or None when `base_model.path` is null.

    The audited model's `model.*` (engine, dtype, rendering, chat_template_kwargs, batch sizes, model.probe)
    with `base_model.path`, `.adapter` and `.name` over it; for model.backend=openai the path is the served
    base model's name (model.api.model is cleared so it is not the audited model's). Local paths are checked
    here, before anything loads: a ConfigError names base_model.path or base_model.adapter.
    """
    import dataclasses

    from zcp.config.model import check_model_files, check_same_tokenizer, model_config
    from zcp.config.schemas import group_config
    from zcp.probe.probe_config import BaseModelConfig

    bm = group_config(BaseModelConfig, base_cfg, "base_model")  # a job's checked base_model, or built from a mapping
    if bm.path is None:
        return None
    audited = model_config(model_cfg)  # a checked ModelConfig (None: the defaults)
    api = dataclasses.replace(audited.api, model=None) if audited.backend == "openai" else audited.api
    mc = audited.replace(path=str(bm.path), adapter=bm.adapter, name=bm.name, api=api)  # keeps model.<engine>
    if mc.backend != "openai":
        check_model_files(mc.path, "base_model.path")  # config.json, weights, tokenizer: before any model loads
        if mc.adapter:
            check_model_files(mc.adapter, "base_model.adapter")
        check_same_tokenizer(audited.path, mc.path, audited.chat)  # the same prompts as the same ids, or refused
    return mc


def base_weights(base_mc: Any) -> dict[str, str | None]:
    """Content fingerprints of the base model's weights and adapter, for the run directory's hash (a
    different base gets a new directory); nothing for no base model, so existing run dirs keep their name."""
    from zcp.core.io import model_fingerprint

    if base_mc is None:
        return {}
    local = base_mc.backend != "openai"
    return {"base_model": model_fingerprint(base_mc.path) if local else None,
            "base_adapter": model_fingerprint(base_mc.adapter) if local else None}


def without_null_base(cfg: Any) -> Any:
    """`cfg` without its `base_model` block when base_model.path is null, so the run directory's hash (zcp.config
    .run_dir) is the one the same command had before the block existed; `cfg` itself otherwise."""
    block = cfg.get("base_model") if cfg is not None else None
    if block is None or block.get("path") is not None:
        return cfg
    from omegaconf import OmegaConf

    from zcp.config import to_dict

    d = to_dict(cfg)
    d.pop("base_model", None)
    return OmegaConf.create(d)


def free_memory() -> None:
    """After the caller dropped its last reference to a backend: collect it and, on a GPU, empty the allocator's
    cache, so the next model loads into the memory the previous one held (two need not fit at once)."""
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - torch is a dependency of every local engine
        pass


def detect_did(base_mc: Any, datasets: Sequence[Any], probe: Any, out: Path, settings: DetectSettings,
               summary: dict[str, Any], tracker: Any = None) -> dict[str, Any]:
    """run_detect's second verdict: the base model probed on the audited run's units, then the DiD.

    The base run is a detection run of its own in `<out>/base/` (records.jsonl, summary.json, table.md;
    resumable and locked like the main run). Then `<out>/did.md` and a `did` block in `<out>/summary.json`
    (written under the main run's lock): per split, variant and metric the model's gap minus the base
    model's (`gap_model`, `gap_base`, `did`, p, C_cont) and per (split, variant) the Bonferroni verdict.
    Returns the updated summary.
    """
    from zcp.backends.registry import build_backend
    from zcp.core.io import RunLock, write_json
    from zcp.probe.detect import SUMMARY, check_backend_metrics, detect

    base_out = Path(out) / BASE_DIR
    backend = build_backend(base_mc)
    check_backend_metrics(backend, probe)
    name = backend.name
    detect(backend, datasets, probe, base_out, settings,
           extra={"output_dir": str(base_out), "base_model_of": summary.get("model")},
           title=f"ZCP on the base model {name}")
    del backend
    free_memory()
    rows = did_between(out, base_out, [ds.split for ds in datasets], list(probe.metrics), settings, label="model")
    verdicts = did_verdicts(rows, settings.alpha, void_map(summary.get("results", [])))
    md = did_markdown(rows, label="model", model_title="model", variant_column=True, verdicts=verdicts)
    head = (f"### Difference-in-differences: {summary.get('model')} against its base model {name}\n\n"
            "Per item: the model's gap (S - S_ref) minus the base model's on the same units; the test: H1 the "
            "model's gap exceeds the base's.\n\n")
    summary = {**summary, "did": {"base_model": {"name": name, "path": base_mc.path, "adapter": base_mc.adapter,
                                                 "output_dir": str(base_out)},
                                  "test": DID_TEST, "alpha": settings.alpha, "rows": rows, "verdicts": verdicts}}
    with RunLock(out):
        (Path(out) / DID_MD).write_text(head + md)
        write_json(Path(out) / SUMMARY, summary)
    if tracker is not None:
        tracker.table("did", [{k: r[k] for k in ("split", "variant", "metric", "gap_model", "gap_base", "did",
                                                  "p_value", "c_cont")} for r in rows])
        tracker.table("did_verdicts", [{k: v[k] for k in ("split", "variant", "p_value", "c_cont", "contaminated")}
                                       for v in verdicts])
        tracker.summary({f"did/{r['split']}/{r['variant']}/{r['metric']}/c_cont": r["c_cont"] for r in rows})
    return summary

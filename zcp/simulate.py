"""The simulation study end to end: contaminate a model (zcp.training), then run ZCP on Dataset C and
Dataset U against their reference sets, for the fine-tuned model and for its base model.

Outputs (in the contamination run dir, under `detect/`): per-model detection runs (records, summary,
table), `table7.md` (the paper's Table 7 shape: S_ref, S, C_cont per metric, mean ± std over seeds, for
FT and base on C and U), `did.md` (difference-in-differences: the zero-CoT gap the fine-tuning created,
item-paired, tested), `c_cont_C_vs_U.png` and `simulation_summary.json`.

Statistics: one within-item permutation test per (model, split, metric) over all m x n_seeds reference
draws per item (m per seed are generated); that test's p and C_cont are the verdict. The seeds are a
stability display: seed k's Monte Carlo stream on its own disjoint share of the draws gives the ± std
columns. The contaminated model itself is trained once, from `seed`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.data.schema import Item
from zcp.detect import DetectDataset, DetectSettings, detect, probe_config
from zcp.did import did_markdown, simulation_did
from zcp.io import stable_hash
from zcp.report import METRIC_LABEL, c_cont_text, plot_c_cont

log = logging.getLogger(__name__)


def simulation_references(cfg: Any, items: list[Item], n_draws: int, seed: int, manifest: Any = None,
                          run_dir: str | Path | None = None) -> tuple[dict[str, list[Item]], dict[str, Any]]:
    """n_draws reference draws per benchmark item for the detection stage, and the builder's report.

    `detect.reference_path` reads a given reference set. Otherwise the builder registry builds them as
    run_build_data does (`detect.reference`: method, exclusions, policies): generated word problems get exact
    draws from the generator's law. The run's own training data joins `detect.reference.exclude`: every C item
    (leaked or not: a value a fine-tune may have seen is never a reference) and the clean and sham items of
    `<run>/training_items.jsonl`. An item the builder gives no draw has no key in the result: it cannot be
    tested and `simulation_splits` leaves it out, counted.
    """
    from dataclasses import replace

    from zcp.build_data import reference_context
    from zcp.reference.exclusions import item_key
    from zcp.reference.registry import build_references, resolve_method
    from zcp.schemas import validate

    d = cfg.get("detect") or {}
    if d.get("reference_path"):
        from zcp.data.loaders import load_paired

        return load_paired(d["reference_path"], items, d.get("reference_format", "items")), {"method": "file"}
    check_reference_source(cfg)
    choice = validate({"detect": d})["detect"].reference
    keys: set[str] = set()
    if manifest is not None:
        keys |= {k for k in (item_key(it) for it in manifest.subset(items, "C")) if k}
    if run_dir is not None:
        keys |= _training_keys(Path(run_dir))
    b = cfg.get("benchmark") or {}
    fmt = "wordproblems" if b.get("source", "wordproblems") == "wordproblems" else str(b.get("format") or "items")
    method = resolve_method(choice.method, items, fmt)
    ctx, exclusions = reference_context(items, seed, {"exclude": list(choice.exclude),
                                                      "exclude_benchmark": choice.exclude_benchmark,
                                                      "special_cases": choice.special_cases})
    ctx = replace(ctx, exclude=ctx.exclude | frozenset(keys))
    rs = build_references(items, method, n_draws, ctx)
    report = {**rs.report, "rejections": rs.rejections,
              "exclusions": [*exclusions, {"source": "the run's training data (C items, clean and sham items)",
                                           "keys": len(keys)}]}
    return rs.refs, report


def _training_keys(run: Path) -> set[str]:
    """Keys of the non-benchmark items a contamination run trained on (`training_items.jsonl`)."""
    from zcp.data.loaders import load_items
    from zcp.io import RunDirError
    from zcp.reference.exclusions import item_key

    path = run / "training_items.jsonl"
    if not path.exists():
        if (run / "sft_data.jsonl").exists():
            raise RunDirError(f"{run}: its training data predates training_items.jsonl; rerun the contamination "
                              "(the data stage is rebuilt, finished training is kept)")
        return set()
    return {k for k in (item_key(it) for it in load_items(str(path), format="items")) if k}


def check_reference_source(cfg: Any) -> None:
    """ConfigError unless the detection stage can get references: detect.reference_path, or a builder that needs no
    model (generated word problems; GSM8K-format or ArithMark files). Checked before training starts."""
    d = cfg.get("detect") or {}
    b = cfg.get("benchmark") or {}
    if d.get("reference_path") or b.get("source", "wordproblems") == "wordproblems":
        return
    method = (d.get("reference") or {}).get("method") or "auto"
    fmt = str(b.get("format") or "items")
    if method not in ("auto", "llm", "none") or fmt in ("gsm8k", "arithmark"):
        return
    from zcp.config import ConfigError

    raise ConfigError(f"detect.reference_path is required for benchmark.format={fmt} (no program to perturb: build a "
                      "reference set with evaluate/run_build_data.py), or set detect.reference.method")


def simulation_splits(cfg: dict[str, Any], items: list[Item], manifest: Any, splits: Sequence[str] = ("C", "U"),
                      run_dir: str | Path | None = None, report: dict[str, Any] | None = None
                      ) -> tuple[dict[str, list[Item]], dict[str, list[Item]], list[str]]:
    """The detection stage's inputs from a run's config, items, manifest (and run dir, whose training data the
    references avoid): the items of each split that have reference draws, their draws (m x len(seeds), the run's
    reference seed: the same draws every job rebuilds), and the ids left out for want of any reference. Shared by
    the detection stage, the ablations and the baselines so all three probe exactly the same items. `report`, when
    given, receives the reference builder's report (law, exclusions, exchangeability per feature)."""
    from zcp.schemas import validate

    det = validate({"detect": cfg.get("detect") or {}})["detect"]
    ref_seed = det.reference_seed if det.reference_seed is not None else int(cfg.get("seed", 0))
    refs, ref_report = simulation_references(cfg, items, int(det.m) * len(det.seeds), int(ref_seed), manifest, run_dir)
    if report is not None:
        report.update(ref_report)
    missing = sorted(it.id for it in items if not refs.get(it.id))
    if missing:
        log.warning("%d item(s) without any reference draw are left out of detection: %s", len(missing),
                    ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
    groups = {s: [it for it in manifest.subset(items, s) if refs.get(it.id)] for s in splits}
    return groups, refs, missing


def _table7(summaries: dict[str, dict], metrics: list[str], multi: bool) -> str:
    def pm(m: float, s: float) -> str:
        return f"{m:.3f} ± {s:.3f}" if multi else f"{m:.3f}"

    head = ["Model", "Dataset"] + [f"{METRIC_LABEL[m]} {c}" for m in metrics for c in ("S_ref", "S", "C_cont")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, summ in summaries.items():
        by = {(r["split"], r["metric"]): r for r in summ["results"] if r["variant"] == "original"}
        for split in sorted({s for s, _ in by}):
            cells = [model, split]
            for m in metrics:
                r = by[(split, m)]
                c = f">{r['c_cont']:.3f}" if r["at_floor"] else c_cont_text(r["c_cont"], r["c_cont_std"], multi)
                cells += [pm(r["s_ref"], r["s_ref_std"]), pm(r["s"], r["s_std"]), c]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_detection_stage(cfg: Any, result: Any) -> dict[str, Any]:
    """ZCP on C and U for the contaminated model and its base model; Table 7 analogue, DiD, plot."""
    from zcp.config import build_backend, to_dict, validate
    from zcp.data.split import Manifest
    from zcp.tracking import Tracker
    from zcp.training.contaminate import load_benchmark, resolve_model_path

    c = to_dict(cfg)
    checked = validate(c)
    det, st, rn = checked["detect"], checked["stats"], checked["run"]
    seeds = [int(s) for s in det.seeds]
    m = int(det.m)
    # the stability display uses each seed's own share of the draws (m per seed are generated)
    settings = DetectSettings(seeds=seeds, bootstrap_samples=st.bootstrap_samples, alpha=st.alpha, test=st.test,
                              reference_draws="per_seed", chunk_size=rn.chunk_size, progress=rn.progress)
    probe = probe_config(c.get("probe") or {}, c.get("model"))
    items = load_benchmark(c)
    manifest = Manifest.load(result.manifest_path)
    ref_report: dict[str, Any] = {}
    groups, refs, missing = simulation_splits(c, items, manifest, run_dir=result.run_dir, report=ref_report)
    leaked = set(result.leaked_ids)
    datasets = []
    if 0 < len(leaked) < len(groups["C"]):  # leak_fraction < 1: also the leaked and unleaked parts (a sham: C only)
        groups["C_leaked"] = [it for it in groups["C"] if it.id in leaked]
        groups["C_not_leaked"] = [it for it in groups["C"] if it.id not in leaked]
    for split, sub in groups.items():
        datasets.append(DetectDataset(split, sub, {it.id: refs[it.id] for it in sub}))
    models = {"FT": str(result.model_dir)}
    if det.base_model:
        models["base"] = resolve_model_path((c.get("model") or {}).get("path"))
    out_root = Path(result.run_dir) / "detect"
    runs, summaries = {}, {}
    mcfg = c.get("model") or {}
    for name, path in models.items():
        # the run's model config (engine, chat_template_kwargs, batch sizes) with this model's weights
        backend = build_backend({**mcfg, "path": path, "adapter": None, "name": f"{name}:{Path(path).name}"})
        # A detection run is keyed by what decides its records (model content, items, references, probe
        # settings): new references (a newer reference builder) or probe settings get a new directory
        # instead of a refusal. The base model's detection depends on nothing else, so it is shared between
        # runs (an exposure sweep probes the base model once).
        units = [(k, it.question, it.answer) for ds in datasets for k, it in ds.work()]
        key = stable_hash(json.dumps([path, backend.fingerprint, probe.__dict__, units, seeds,
                                      settings.bootstrap_samples], sort_keys=True, default=str), 12)
        runs[name] = (Path(result.run_dir).parent / f"base-detect__{key}" if name == "base"
                      else out_root / f"{name}__{key}")
        summaries[name] = detect(backend, datasets, probe, runs[name], settings, title=f"ZCP on the {name} model")
    metrics = list(probe.metrics)
    multi = len(seeds) > 1
    table7 = _table7(summaries, metrics, multi)
    did = simulation_did(runs, list(groups), metrics, settings) if "base" in runs else []
    (out_root / "table7.md").write_text(table7)
    if did:
        (out_root / "did.md").write_text(did_markdown(did))
    ft_summary = summaries["FT"]
    plot = plot_c_cont({"results": [r for r in ft_summary["results"] if r["variant"] == "original"]},
                       out_root / "c_cont_C_vs_U.png", "ZCP on the contaminated model: C vs U")
    sim = {
        "arm": getattr(result, "arm", "leak"),  # sham: nothing of C leaked, every flag is a false positive
        "exposure": str(result.exposure_path), "manifest": str(result.manifest_path), "seeds": seeds, "m": m,
        "items_with_fewer_distinct_draws": sorted(
            k for k, v in refs.items() if 0 < len(v) < m * len(seeds)),
        "items_without_reference": missing,
        "reference": ref_report,
        "seeds_vary": "stability display only: Monte Carlo stream and the seed's disjoint share of the reference "
                      "draws; the verdict is one test over all draws; training uses `seed` once",
        "models": models, "table6": result.table6,
        "results": {name: s["results"] for name, s in summaries.items()},
        "verdicts": {name: s["verdicts"] for name, s in summaries.items()},
        "did": did,
    }
    (out_root / "simulation_summary.json").write_text(json.dumps(sim, indent=2, default=str))
    with Tracker(c.get("logger"), run_config=c, run_dir=str(out_root), job_type="simulate-detect",
                 name=f"{c.get('name', 'sim')}-detect") as tr:
        for name, s in summaries.items():
            tr.table(f"results/{name}", [{k: r[k] for k in ("split", "metric", "n", "s", "s_ref", "p_value", "c_cont")}
                                         for r in s["results"]])
        if did:
            tr.table("did", [{k: r[k] for k in ("split", "metric", "gap_ft", "gap_base", "did", "c_cont")} for r in did])
        tr.image("c_cont_C_vs_U", str(plot))
        tr.summary({f"{n}/{r['split']}/{r['metric']}/c_cont": r["c_cont"] for n, s in summaries.items()
                    for r in s["results"] if r["variant"] == "original"})
    print("\nTable 7 analogue (ZCP: one test over all reference draws per metric; ± std: stability over seeds "
          + str(seeds) + ")\n\n" + table7)
    if did:
        print("Difference-in-differences (FT gap minus base gap, item-paired)\n\n" + did_markdown(did))
    print(f"plot: {plot}\nsummary: {out_root / 'simulation_summary.json'}")
    return sim


SIM_STAGES = ("contaminate", "detect", "baselines")


def baselines_config(cfg: Any, run_dir: str | Path) -> Any:
    """conf/baselines.yaml composed for a contamination run: ``run_dir=<run>``, ``output_dir=<run>/baselines``,
    the run's logger, then the run's ``baselines_overrides`` (Hydra override strings, e.g.
    ``detectors=[ppl,mink20]``). Composed with Hydra itself, so the stage gets exactly the typed config and
    the compose-time errors of ``evaluate/run_baselines.py``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from zcp.config import REPO_ROOT
    from zcp.detectors.run import register_schema

    register_schema()
    overrides = [f"run_dir={run_dir}", f"output_dir={Path(run_dir) / 'baselines'}",
                 *[str(o) for o in (cfg.get("baselines_overrides") or [])]]
    gh = GlobalHydra.instance()
    if gh.is_initialized():  # inside a Hydra app (train/run_contaminate.py): its search path is this repo's conf/
        bcfg = compose("baselines", overrides=overrides)
    else:
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
            bcfg = compose("baselines", overrides=overrides)
    OmegaConf.set_struct(bcfg, False)
    bcfg.logger = cfg.get("logger")  # the run's own logger settings (mode, project), not the file's default
    OmegaConf.set_struct(bcfg, True)
    return bcfg


def run_baselines_stage(cfg: Any, result: Any) -> dict[str, Any]:
    """The baseline detectors (evaluate/run_baselines.py run_dir=<run>) on the run's C and U: summary.json and
    baselines.md in <run>/baselines/, resumable like the other stages."""
    from zcp.detectors.run import run_baselines

    return run_baselines(baselines_config(cfg, result.run_dir))


def run_simulation(cfg: Any) -> dict[str, Any]:
    """Run the configured `stages` in order: `contaminate`, then `detect` (ZCP) and `baselines` (the
    literature's detectors, conf/baselines.yaml with `baselines_overrides`) on its result."""
    from zcp.config import ConfigError, validate
    from zcp.training.contaminate import contaminate

    validate(cfg)  # ranges and choices of the typed groups, before anything is read or trained
    stages = list(cfg.get("stages") or ["contaminate"])
    unknown = set(stages) - set(SIM_STAGES)
    if unknown:
        raise ConfigError(f"stages: unknown {sorted(unknown)} (choose from {list(SIM_STAGES)})")
    if "detect" in stages:
        check_reference_source(cfg)
    if "baselines" in stages:
        if "detect" not in stages:  # its zcp_* detectors and the report read the run's detection records
            raise ConfigError("stages: baselines needs detect (the zcp_* detectors read its records)")
        from zcp.detectors.run import check_config

        check_config(baselines_config(cfg, "outputs/contaminate/_check"))  # its config errors now, before training
    result = contaminate(cfg)
    out: dict[str, Any] = {"contamination": result}
    if "detect" in stages:
        out["detection"] = run_detection_stage(cfg, result)
    if "baselines" in stages:
        out["baselines"] = run_baselines_stage(cfg, result)
    return out

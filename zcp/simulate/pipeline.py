"""The simulation study end to end: contaminate a model (zcp.simulate), then run ZCP on Dataset C and
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
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.backends.tokenized import TokenizedBackend
from zcp.core.io import stable_hash
from zcp.core.items import Item
from zcp.core.rundir import DETECT, SIMULATION_SUMMARY
from zcp.probe.conventions import is_single_default
from zcp.probe.detect import ORIGINAL, DetectDataset, DetectSettings
from zcp.probe.did import did_between, did_markdown
from zcp.probe.metrics import metric_label
from zcp.probe.report import c_cont_text, plot_c_cont
from zcp.simulate.simulation_config import SimulationJob  # noqa: F401  (registers the simulation jobs and groups)

log = logging.getLogger(__name__)

from zcp.simulate.splits import (  # noqa: E402  (the units of the detection stage)
    _benchmark_items_for_check,
    _plain,
    check_reference_source,
    simulation_splits,
)


def detection_settings(c: dict[str, Any]) -> DetectSettings:
    """The detection stage's DetectSettings: the seeds' stability display on each seed's own share of the draws
    (m per seed are generated), stats.*, run.*, and the overflow policy `detect.on_overflow` (named so in
    messages)."""
    from zcp.config import validate

    checked = validate(c)
    det, st, rn = checked["detect"], checked["stats"], checked["run"]
    return DetectSettings(seeds=[int(s) for s in det.seeds], bootstrap_samples=st.bootstrap_samples, alpha=st.alpha,
                          test=st.test, reference_draws="per_seed", chunk_size=rn.chunk_size, progress=rn.progress,
                          on_overflow=det.on_overflow, overflow_key="detect.on_overflow")


def detection_datasets(c: dict[str, Any], items: list[Item], manifest: Any, leaked: Sequence[str] | None = None,
                       run_dir: str | Path | None = None
                       ) -> tuple[list[DetectDataset], dict[str, list[Item]], list[str], dict[str, Any]]:
    """The detection stage's datasets (C and U; with a partial leak also C_leaked and C_not_leaked), each naming
    the items left out for want of a reference; plus the draws, the ids without any and the reference report."""
    report: dict[str, Any] = {}
    groups, refs, missing = simulation_splits(c, items, manifest, run_dir=run_dir, report=report)
    without = {s: [it.id for it in manifest.subset(items, s) if not refs.get(it.id)] for s in ("C", "U")}
    leaked_set = set(leaked or [])
    if 0 < len(leaked_set) < len(groups["C"]):  # leak_fraction < 1: also the leaked and unleaked parts (a sham: C only)
        groups["C_leaked"] = [it for it in groups["C"] if it.id in leaked_set]
        groups["C_not_leaked"] = [it for it in groups["C"] if it.id not in leaked_set]
        without["C_leaked"] = [i for i in without["C"] if i in leaked_set]
        without["C_not_leaked"] = [i for i in without["C"] if i not in leaked_set]
    datasets = [DetectDataset(split, sub, {it.id: refs[it.id] for it in sub}, without_reference=without.get(split, []))
                for split, sub in groups.items()]
    return datasets, refs, missing, report


class TokenCounter(TokenizedBackend):
    """A model's tokenizer and positions without its weights: the `count_tokens` and `context_length` that
    `zcp.probe.detect.plan_units` needs, so the detection stage's context check runs before training (it renders the
    prompts exactly as the model's backend will: chat template, `chat_template_kwargs`, `model.chat`,
    `model.max_length`)."""

    def __init__(self, tokenizer: Any, positions: int | None, *, name: str, chat_template_kwargs: Any = None,
                 chat: bool = True, max_length: int | None = None) -> None:
        self._init_tokenizer(tokenizer, chat_template_kwargs=chat_template_kwargs, chat=chat, max_length=max_length)
        self._positions = positions
        self.name = name

    def model_positions(self) -> int | None:
        """The positions the model's config states (max_position_embeddings)."""
        return self._positions

    def score(self, requests: Any) -> Any:  # pragma: no cover - counting only
        raise NotImplementedError("TokenCounter counts tokens only")

    def generate(self, requests: Any) -> Any:  # pragma: no cover - counting only
        raise NotImplementedError("TokenCounter counts tokens only")


def token_counter(model_cfg: Any) -> TokenCounter | None:
    """The `TokenCounter` of the simulation's base model (its fine-tune keeps its tokenizer and positions): the
    tokenizer and config.json only, no weights. None for a served model (model.backend=openai)."""
    from transformers import AutoConfig, AutoTokenizer

    from zcp.config.model import model_config
    from zcp.simulate.contaminate import resolve_model_path

    mc = model_config(model_cfg)
    if mc.backend == "openai":
        return None
    path = resolve_model_path(mc.path)
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=mc.trust_remote_code)
    n = getattr(AutoConfig.from_pretrained(path, trust_remote_code=mc.trust_remote_code), "max_position_embeddings",
                None)
    limit = mc.max_length
    if mc.backend == "vllm" and mc.vllm.max_model_len:
        limit = min(limit, mc.vllm.max_model_len) if limit else mc.vllm.max_model_len
    return TokenCounter(tok, int(n) if n else None, name=f"{Path(path).name} (tokenizer)",
                        chat_template_kwargs=mc.chat_template_kwargs, chat=mc.chat, max_length=limit)


def check_detection_stage(cfg: Any) -> dict[str, Any]:
    """Before training: what the detection stage needs, so it cannot fail after the training it follows.

    On the benchmark's actual items and the split the run will make (`planned_manifest`): the reference source
    (`check_reference_source`; a reference file paired, `detect.missing_reference` applied), the references built
    as the stage will build them (without the exclusion of the clean/sham items the data stage has yet to draw),
    and the probe prompts of every unit against the model's context with the tokenizer only (`token_counter`,
    `zcp.probe.detect.plan_units` under `detect.on_overflow`: `error` refuses here naming the budgets and keys;
    `skip` refuses a split it would leave with nothing to test). The stage repeats the context check on its
    final references. Returns what it found (items, units, overflow) for the caller's log."""
    from zcp.probe.detect import check_testable, coverage, plan_units
    from zcp.simulate.contaminate import planned_manifest
    from zcp.simulate.settings import sim_config

    c = _plain(cfg)
    s = sim_config(c)
    items = _benchmark_items_for_check(c)
    check_reference_source(c, items)
    manifest = planned_manifest(c, items)
    datasets, _, missing, _ = detection_datasets(c, items, manifest)
    settings = detection_settings(c)
    counter = token_counter(s.model)
    out: dict[str, Any] = {"items": len(items), "items_without_reference": len(missing)}
    if counter is None:
        return out
    from zcp.probe.multiconv import stage_probes

    checked = []
    for probe in stage_probes(s.probe.prefill, s.probe_settings, s.probe.auto):  # every pre-fill it may probe
        units, overflow = plan_units(counter, datasets, probe, settings)
        check_testable(coverage(datasets, units), settings)
        checked.append((units, overflow))
    units, overflow = checked[0]
    return {**out, "units": len(units), "overflow": len(overflow)}


def _table7(summaries: dict[str, dict], metrics: list[str], multi: bool) -> str:
    def pm(m: float, s: float) -> str:
        return f"{m:.3f} ± {s:.3f}" if multi else f"{m:.3f}"

    head = ["Model", "Dataset"] + [f"{metric_label(m)} {c}" for m in metrics for c in ("S_ref", "S", "C_cont")]
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
    """ZCP on C and U for the contaminated model and its base model; Table 7 analogue, DiD, plot.

    The base model's detection depends on nothing the fine-tune did, so it lives beside the run dirs
    (`<runs>/base-detect__<key>`) and is shared: a second simulation that finds it in use (a sibling run, a
    parallel sweep job) waits for it (`SHARED_WAIT_S`) and then resumes it, finding its records done."""
    from zcp.benchmarks.split import Manifest
    from zcp.core.io import check_writable
    from zcp.core.tracking import Tracker
    from zcp.simulate.contaminate import load_benchmark, resolve_model_path
    from zcp.simulate.settings import sim_config

    c = _plain(cfg)
    s = sim_config(c)
    det = s.detect
    settings = detection_settings(c)
    seeds = list(settings.seeds)
    m = int(det.m)
    probe = s.probe_settings
    items = load_benchmark(c)
    manifest = Manifest.load(result.manifest_path)
    datasets, refs, missing, ref_report = detection_datasets(c, items, manifest, result.leaked_ids, result.run_dir)
    groups = {ds.split: ds.originals for ds in datasets}
    models = {"FT": str(result.model_dir)}
    if det.base_model:
        models["base"] = resolve_model_path(s.model.path)
    out_root = Path(result.run_dir) / DETECT
    shared_root = Path(result.run_dir).parent
    check_writable(out_root, key="the detection stage's dir")  # before a model loads
    if "base" in models:
        check_writable(shared_root, key="the shared base-model detection's dir")
    from zcp.probe.multiconv import conv_dir, summary_conventions
    from zcp.probe.run import DetectionRun, run_detection

    prefill, auto = s.probe.prefill, s.probe.auto  # several conventions (or auto: read from the FT model): the base
    conventions = None                               # model gets the same
    runs, summaries = {}, {}
    for name, path in models.items():
        # the one detection job (zcp.probe.run), on the run's model config (engine, chat_template_kwargs, batch sizes)
        # with this model's weights. The base model's detection depends on nothing the fine-tune did, so it is shared
        # between runs (an exposure sweep probes the base model once), queued behind any other job probing it.
        root, label = (shared_root, "base-detect") if name == "base" else (out_root, name)

        def named(backend: Any, root: Path = root, label: str = label, path: str = path,
                  conventions: Any = conventions) -> Path:
            return root / f"{label}__{detection_key(path, backend, datasets, probe, settings, prefill, auto, conventions)}"

        run = DetectionRun(model=s.model.replace(path=path, adapter=None, name=f"{name}:{Path(path).name}"),
                           datasets=datasets, probe=probe, settings=settings, out=named, title=f"ZCP on the {name} model",
                           prefill=prefill, auto=auto, conventions=conventions,
                           queue=SHARED_WAIT_S if name == "base" else None)
        summaries[name], runs[name] = run_detection(run)
        conventions = conventions or summary_conventions(summaries[name])
    metrics = list(probe.metrics)
    multi = len(seeds) > 1
    table7 = _table7(summaries, metrics, multi)
    did = []
    if "base" in runs:  # the originals' DiD of FT against base; several pre-fills: per convention, from its own runs
        pairs = ([(cv.name, conv_dir(runs["FT"], cv.name), conv_dir(runs["base"], cv.name)) for cv in conventions]
                 if conventions else [(None, runs["FT"], runs["base"])])
        did = [{**({"convention": cv} if cv else {}), **row} for cv, ft_dir, base_dir in pairs
               for row in did_between(ft_dir, base_dir, list(groups), metrics, settings, variants=(ORIGINAL,),
                                      label="ft")]
    (out_root / "table7.md").write_text(table7)
    if did:
        (out_root / "did.md").write_text(did_markdown(did) if not conventions else "\n".join(
            f"#### Pre-fill {cv.label}\n\n" + did_markdown([r for r in did if r["convention"] == cv.name])
            for cv in conventions))
    ft_summary = summaries["FT"]
    plot = plot_c_cont({"results": [r for r in ft_summary["results"] if r["variant"] == "original"]},
                       out_root / "c_cont_C_vs_U.png", "ZCP on the contaminated model: C vs U")
    sim = {
        "arm": result.arm,  # sham: nothing of C leaked, every flag is a false positive
        "exposure": str(result.exposure_path), "manifest": str(result.manifest_path), "seeds": seeds, "m": m,
        "items_with_fewer_distinct_draws": sorted(
            k for k, v in refs.items() if 0 < len(v) < m * len(seeds)),
        # left out for want of a reference (a builder's rejections; with detect.reference_path and
        # detect.missing_reference=skip, the items without a row), by split
        "items_without_reference": missing,
        "n_items_without_reference": {ds.split: len(ds.without_reference) for ds in datasets},
        "on_overflow": settings.on_overflow,
        "reference": ref_report,
        "seeds_vary": "stability display only: Monte Carlo stream and the seed's disjoint share of the reference "
                      "draws; the verdict is one test over all draws; training uses `seed` once",
        "models": models, "table6": result.table6,
        "results": {name: s["results"] for name, s in summaries.items()},
        "verdicts": {name: s["verdicts"] for name, s in summaries.items()},
        "did": did,
        **({} if is_single_default(prefill) else {  # which pre-fills were probed (auto: what was read)
            "prefill": prefill, "conventions": ft_summary.get("conventions") or [ft_summary.get("convention")],
            "auto": ft_summary.get("auto")}),
    }
    (out_root / SIMULATION_SUMMARY).write_text(json.dumps(sim, indent=2, default=str))
    with Tracker(c.get("logger"), run_config=c, run_dir=str(out_root), job_type="simulate-detect",
                 name=f"{s.name}-detect") as tr:
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
    print(f"plot: {plot}\nsummary: {out_root / SIMULATION_SUMMARY}")
    return sim




SHARED_WAIT_S = math.inf  # how long a simulation waits for another one's shared base-model detection


def detection_key(path: str, backend: Any, datasets: Sequence[DetectDataset], probe: Any, settings: DetectSettings,
                  prefill: Any, auto: Any, conventions: Any) -> str:
    """The key of one model's detection run in the simulation (its directory `<label>__<key>`): what decides its
    records (the weights' path and the loaded backend's content fingerprint, the probe settings, the units, the seeds,
    the Monte Carlo samples and, for pre-fills other than the default, which ones), so new references or probe
    settings get a new directory instead of a refusal."""
    from zcp.probe.multiconv import prefill_key

    units = [(k, it.question, it.answer) for ds in datasets for k, it in ds.work()]
    key_parts = [path, backend.fingerprint, probe.__dict__, units, list(settings.seeds), settings.bootstrap_samples]
    if not is_single_default(prefill):  # other pre-fills, other records (the default's key is unchanged)
        key_parts.append(prefill_key(prefill, auto, conventions))
    return stable_hash(json.dumps(key_parts, sort_keys=True, default=str), 12)


def validate_detect(c: Any) -> Any:
    """The checked `detect` group (`zcp.simulate.simulation_config.SimDetectConfig`, its defaults where not given)."""
    from zcp.simulate.settings import sim_config

    return sim_config(c).detect


def run_simulation(cfg: Any) -> dict[str, Any]:
    """Run the configured `stages` in order: `contaminate`, then `detect` (ZCP) and the registered ones
    (zcp.simulate.simulation_stages: `baselines`, the literature's detectors, conf/baselines.yaml with
    `baselines_overrides`, registered by zcp.validate.baselines_stage) on its result.

    Everything a later stage needs is checked before the first one trains (one line, before any model loads):
    the contamination's inputs (`check_inputs`: files, the base model's weights, the learning-rate schedules),
    the detection stage's references and probe prompts against the model's context (`check_detection_stage`),
    the baselines' config, and that the dirs the stages write can be written (the run dir and, for the shared
    base-model detection, its parent)."""
    from zcp.config import validate
    from zcp.core.io import check_writable
    from zcp.errors import ConfigError
    from zcp.simulate.contaminate import _config_fingerprint, _run_dir, check_inputs, contaminate
    from zcp.simulate.settings import sim_config
    from zcp.simulate.simulation_stages import SIMULATION_STAGES, simulation_stage_names
    from zcp.simulate.stages import is_main_process

    validate(cfg)  # ranges and choices of the typed groups, before anything is read or trained
    s = sim_config(cfg)  # the contamination reads its groups through their schemas
    stages = s.stages
    unknown = set(stages) - set(simulation_stage_names())
    if unknown:
        raise ConfigError(f"stages: unknown {sorted(unknown)} (choose from {simulation_stage_names()})")
    later = [SIMULATION_STAGES[name] for name in SIMULATION_STAGES if name in stages]  # e.g. baselines
    for stage in later:  # the baselines' zcp_* detectors and the report read the detection
        for need, why in stage.needs.items():
            if need not in stages:
                raise ConfigError(f"stages: {stage.name} needs {need} ({why})")
    c = _plain(cfg)
    check_inputs(s)
    if "detect" in stages:
        check_detection_stage(c)
        if validate_detect(c).base_model:
            check_writable(_run_dir(s, _config_fingerprint(s)).resolve().parent,
                           key="the shared base-model detection's dir")
    for stage in later:
        if stage.check is not None:
            stage.check(cfg)  # its config errors now, before training
    result = contaminate(s)
    out: dict[str, Any] = {"contamination": result}
    if not is_main_process():  # under accelerate launch only training is data-parallel: rank 0 alone detects
        return out
    if "detect" in stages:
        out["detection"] = run_detection_stage(cfg, result)
    for stage in later:
        out[stage.name] = stage.run(cfg, result)
    return out

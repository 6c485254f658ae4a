"""The baseline-detector job (evaluate/run_baselines.py): load, score, resume, summarise.

Inputs, either
- ``data.path`` (the items, "data" = C when U is given) with optional ``data.u_path`` (U), each with an
  optional reference set (``data.reference_path`` / ``data.u_reference_path``: the ZCP reference items,
  rows naming their original), or ``data.manifest`` splitting one file into C and U; or
- ``run_dir=outputs/contaminate/<run>``: C and U from its manifest.json + benchmark_items.jsonl, the
  audited model from ``<run>/model``, the reference model for `ref` from exposure.json's ``base_model``
  (unless ``ref_model.path`` is set), the references rebuilt as the simulation's detection stage builds
  them (`zcp.simulate._references`: m x len(seeds) draws, the same reference seed, so the same reference
  items as ZCP) and, for the zcp_* detectors, the newest ``detect/FT*/records.jsonl`` (or ``zcp_records``).

Each detector runs per file: kind "score" detectors score the originals and their reference items in one
call (the reference-set decision needs both), the others the originals only. records.jsonl gets one row
per (detector, file, item) — reference items as rows with ``variant: reference`` — appended one
(detector, file) block at a time; a block is finished when all its rows are there, so a killed run
re-run skips finished blocks and redoes a cut one. The directory is fingerprinted (model and reference
model content, items, references, seed) in run_meta.json, and each row carries its detector's parameter
hash: other weights, data or parameters refuse to resume there.

summary.json: per detector its label and needs (from the registry), AUROC and TPR@5%FPR of C (data) vs U
(null without U), and per file the benchmark decision (statistic, decision, rule, p_value, threshold);
``skipped`` names why a detector did not run. baselines.md: the same as a table.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from zcp.data.schema import DataError, Item
from zcp.detectors.base import DetectorContext, auroc, get_detector, spec_of, tpr_at_fpr
from zcp.io import RunDirError, RunLock, append_jsonl, read_json, read_jsonl, stable_hash, write_json
from zcp.schemas import ConfigError, check_value

log = logging.getLogger(__name__)

RECORDS = "records.jsonl"
SUMMARY = "summary.json"
TABLE = "baselines.md"
META = "run_meta.json"
DEFAULT_DETECTORS = ["ppl", "zlib", "mink5", "mink10", "mink20", "mink30", "mink50", "minkpp5", "minkpp10",
                     "minkpp20", "minkpp30", "minkpp50", "ref", "dpcc", "recon", "guided", "trap",
                     "zcp_acc", "zcp_con", "zcp_p_first", "zcp_p_all"]


@dataclass
class BaselinesConfig:
    """Schema of conf/baselines.yaml (the primary config): unknown keys and wrong types fail at compose.

    `params`: per detector name, its constructor parameters (e.g. params.recon.temperature=0.7); checked
    by building every selected detector before anything is read or loaded.
    """

    seed: int = 0
    run_dir: Any = None  # outputs/contaminate/<run>: C, U, model, reference model and references from it
    output_dir: Any = None  # null: outputs/baselines/<data>__<model>__<config hash>; rerun = resume
    detectors: list[str] = field(default_factory=lambda: list(DEFAULT_DETECTORS))
    params: dict[str, Any] = field(default_factory=dict)
    alpha: float = 0.05  # level of the reference-set and guided-instruction tests
    bootstrap_samples: int = 10_000  # Monte Carlo relabellings of those tests
    zcp_records: Any = None  # a ZCP detection run's records.jsonl (zcp_* detectors)
    progress: bool = False  # the backend's progress bars
    model: Any = None
    data: Any = None
    ref_model: Any = None
    logger: Any = None

    def __post_init__(self) -> None:
        check_value(0.0 < self.alpha < 1.0, "alpha", self.alpha, "in (0, 1)")
        check_value(self.bootstrap_samples >= 1, "bootstrap_samples", self.bootstrap_samples, ">= 1")
        check_value(len(self.detectors) >= 1, "detectors", list(self.detectors), "a non-empty list")
        check_value(len(set(self.detectors)) == len(self.detectors), "detectors", list(self.detectors),
                    "a list without repeats")


def register_schema() -> None:
    """Store the primary config's schema as `baselines_schema` (conf/baselines.yaml's defaults name it)."""
    ConfigStore.instance().store(name="baselines_schema", node=BaselinesConfig)


register_schema()


@dataclass
class FileData:
    """One benchmark file of the job: its originals and (optional) reference items per original id."""

    name: str  # "data" (C) or "u" (U)
    path: str
    originals: list[Item]
    references: dict[str, list[Item]] = field(default_factory=dict)

    def units(self, with_references: bool) -> list[tuple[str, str, int, Item]]:
        """(variant, original_id, draw, item) of the originals, then of their references if asked."""
        out = [("original", it.id, 0, it) for it in self.originals]
        if with_references:
            out += [("reference", it.id, j, r) for it in self.originals for j, r in enumerate(self.references.get(it.id, []))]
        return out


@dataclass
class JobInputs:
    """What a run reads: files, the model and reference model paths, detection records, the name."""

    files: dict[str, FileData]
    model_path: str
    adapter: str | None
    ref_path: str | None
    records_path: str | None
    name: str
    issues: list[dict[str, Any]] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ checks
def check_config(cfg: Any) -> tuple[BaselinesConfig, dict[str, Any]]:
    """Typed checks before anything is read: groups (zcp.schemas.validate), the job's keys, every detector
    name and its params (ConfigError, one line naming the key). Returns the job config and detector params."""
    from zcp.config import to_dict, validate

    validate(cfg)
    d = to_dict(cfg)
    job = BaselinesConfig(**{k: d.get(k) for k in ("seed", "detectors", "alpha", "bootstrap_samples")
                             if d.get(k) is not None})
    params = {k: dict(v or {}) for k, v in (d.get("params") or {}).items()}
    for name in job.detectors:
        try:
            spec_of(name)
        except KeyError as e:
            raise ConfigError(f"detectors: {e.args[0]}") from None
    for name in params:  # every params entry is checked, selected or not (a typo must not pass silently)
        try:
            spec_of(name)
        except KeyError as e:
            raise ConfigError(f"params: {e.args[0]}") from None
    for name in sorted(set(job.detectors) | set(params)):
        try:
            get_detector(name, **params.get(name, {}))
        except ValueError as e:
            raise ConfigError(f"params.{name}: {e}") from None
    return job, params


# ------------------------------------------------------------------------------------------ inputs
def _newest_records(run: Path) -> str | None:
    cands = sorted((run / "detect").glob("FT*/records.jsonl"), key=lambda p: p.stat().st_mtime)
    return str(cands[-1]) if cands else None


def inputs_from_run_dir(run_dir: str | Path, ref_override: str | None = None) -> JobInputs:
    """C, U, model, reference model, references and detection records of a contamination run directory."""
    from zcp.data.loaders import load_items
    from zcp.data.split import Manifest
    from zcp.simulate import simulation_splits

    run = Path(run_dir)
    for name in ("manifest.json", "benchmark_items.jsonl", "exposure.json", "run_config.json", "model"):
        if not (run / name).exists():
            raise ConfigError(f"run_dir={run_dir}: no {name} there (not a finished contamination run directory)")
    items = load_items(run / "benchmark_items.jsonl", "items")
    manifest = Manifest.load(run / "manifest.json")
    conf = (read_json(run / "run_config.json") or {}).get("config") or {}
    groups, refs, _ = simulation_splits(conf, items, manifest, run_dir=run)
    files = {}
    for key, split in (("data", "C"), ("u", "U")):
        sub = groups[split]
        files[key] = FileData(key, f"{run / 'benchmark_items.jsonl'}#{split}", sub, {it.id: refs[it.id] for it in sub})
    exposure = read_json(run / "exposure.json")
    return JobInputs(files, str(run / "model"), None, ref_override or exposure.get("base_model"), _newest_records(run),
                     run.name)


def inputs_from_data(cfg: Any) -> JobInputs:
    """C (data.path) and optional U (data.u_path, or a data.manifest split), with optional references.

    A question repeated within a file, or in both C and U (one benchmark), is refused
    (`data.on_duplicate=error`) or kept once (`merge`: its first copy, C's when in both; the copies left
    out are listed with the data issues)."""
    from zcp.config import to_dict
    from zcp.data.loaders import check_duplicates, field_map, load_benchmark, load_paired, resolve_path
    from zcp.data.split import Manifest

    d = to_dict(cfg.data)
    if not d.get("path"):
        raise ConfigError("data.path is required (or run_dir=outputs/contaminate/<run>)")
    fmt = d.get("format") or "items"
    fields = field_map(d.get("fields"), where="data.fields")
    on_duplicate = d.get("on_duplicate") or "error"
    issues: list[dict[str, Any]] = []

    def load(path: str, ref_path: str | None, name: str) -> tuple[Any, dict[str, list[Item]]]:
        bench = load_benchmark(path, fmt, fields=fields, variant=d.get("variant"), limit=d.get("limit"),
                               sample=d.get("sample"), seed=d.get("sample_seed") or 0,
                               on_invalid=d.get("on_invalid", "error"), on_duplicate=on_duplicate)
        issues.extend([*bench.skipped, *bench.warnings])
        refs: dict[str, list[Item]] = {}
        if ref_path:
            rf = d.get("reference_format") or "items"
            own = field_map(d.get("reference_fields"), where="data.reference_fields") or (fields if rf == fmt else {})
            refs = load_paired(ref_path, bench, rf, fields=own, variant=d.get("reference_variant"),
                               pair_by=d.get("pair_by"), require_all=d.get("missing_reference", "error") == "error",
                               warnings=issues)
        return bench, refs

    bench, refs = load(d["path"], d.get("reference_path"), "data")
    files: dict[str, FileData] = {}
    if d.get("manifest"):
        if d.get("u_path"):
            raise ConfigError("data.manifest and data.u_path: give one way to name U")
        manifest = Manifest.load(str(resolve_path(d["manifest"])))
        by_id = {it.id: it for it in bench.items}
        for key, split, ids in (("data", "C", manifest.c_ids), ("u", "U", manifest.u_ids)):
            missing = [i for i in ids if i not in set(bench.ids)]
            if missing:
                raise DataError(f"{len(missing)} id(s) of split {split} are not in data file {bench.path}, first "
                                f"{missing[0]!r}", path=str(d["manifest"]), field="id")
            sub = [by_id[i] for i in ids if i in by_id]
            files[key] = FileData(key, f"{bench.path}#{split}", sub, {i.id: refs.get(i.id, []) for i in sub})
    else:
        files["data"] = FileData("data", bench.path, bench.items, refs)
        if d.get("u_path"):
            ub, urefs = load(d["u_path"], d.get("u_reference_path"), "u")
            # C and U are one benchmark: a question in both keeps C's copy (first), U's is listed as left out
            both = check_duplicates(bench.items + ub.items, ub.path, on_duplicate, dropped=issues,
                                    name=f"data files {bench.path} (C) and {ub.path} (U)")
            u_items = both[len(bench.items):]
            u_ids = {it.id for it in u_items}
            files["u"] = FileData("u", ub.path, u_items, {k: v for k, v in urefs.items() if k in u_ids})
        elif d.get("u_reference_path"):
            raise ConfigError("data.u_reference_path is set without data.u_path")
    m = cfg.model
    ref = (to_dict(cfg.ref_model) if cfg.get("ref_model") is not None else {}).get("path")
    return JobInputs(files, str(m.get("path")), m.get("adapter"), ref, None,
                     str(d.get("name") or Path(str(d["path"])).stem), issues)


# ------------------------------------------------------------------------------------------ records
def _block(r: dict[str, Any]) -> tuple[str, str]:
    return (r["detector"], r["file"])


def _fingerprint(inputs: JobInputs, model_fp: Any, ref_fp: Any, seed: int) -> str:
    parts = [json.dumps([model_fp, ref_fp, seed], default=str)]
    for name, f in sorted(inputs.files.items()):
        for variant, oid, draw, it in f.units(True):
            parts.append(f"{name}|{variant}|{oid}|{draw}|{it.question}|{it.answer}")
    return stable_hash("\n".join(parts), 32)


def load_finished(path: Path, expected: dict[tuple[str, str], int]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Finished blocks on disk; rows of a block cut short by a kill (or no longer selected) are dropped
    from the file so the block is redone cleanly."""
    if not path.exists():
        return {}
    rows = list(read_jsonl(path, tolerate_partial_last_line=True))
    blocks: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        blocks[_block(r)].append(r)
    done = {k: v for k, v in blocks.items() if expected.get(k) == len(v)}
    if sum(len(v) for v in done.values()) != len(rows) or not path.read_bytes().endswith(b"\n"):
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for v in done.values():
                for r in v:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
        tmp.replace(path)
    return done


def params_hash(det: Any) -> str:
    """Hash of a detector's name, scoring version and parameters (a block's rows carry it)."""
    return stable_hash(json.dumps([det.name, det.spec.version, det.params()], sort_keys=True, default=str), 12)


# ------------------------------------------------------------------------------------------ the job
def run_blocks(backend: Any, detectors: Sequence[Any], inputs: JobInputs, ctx_base: DetectorContext, out: Path,
               ) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], dict[str, str]]:
    """Score every (detector, file) block not yet in out/records.jsonl; returns rows per block and skip reasons."""
    path = out / RECORDS
    expected = {(d.name, f.name): len(f.units(d.kind == "score")) for d in detectors for f in inputs.files.values()}
    blocks = load_finished(path, expected)
    hashes = {d.name: params_hash(d) for d in detectors}
    for (name, _file), rows in blocks.items():
        if rows[0].get("params_hash") != hashes.get(name):
            raise RunDirError(f"{out} holds {name} records with other parameters (or of an older version of the "
                              "detector); use a new output_dir")
    if blocks:
        log.info("resuming: %d of %d (detector, file) blocks finished", len(blocks), len(expected))
    skipped: dict[str, str] = {}
    for det in detectors:
        for f in inputs.files.values():
            key = (det.name, f.name)
            if key in blocks:
                continue
            ctx = DetectorContext(**{**ctx_base.__dict__, "file": f.name})  # the same cache dict
            reason = det.skip_reason(ctx, f.originals)
            if reason:
                skipped[det.name] = reason
                log.warning("detector %s skipped: %s", det.name, reason)
                break
            units = f.units(det.kind == "score")
            t0 = time.time()
            recs = det.score_items(backend, [u[3] for u in units], ctx)
            if len(recs) != len(units):
                raise RuntimeError(f"detector {det.name} returned {len(recs)} records for {len(units)} items")
            rows = []
            for (variant, oid, draw, it), rec in zip(units, recs, strict=True):
                rows.append({"detector": det.name, "file": f.name, "variant": variant, "original_id": oid,
                             "draw": draw, **rec, "id": it.id, "params_hash": hashes[det.name]})
            append_jsonl(path, rows)
            blocks[key] = rows
            print(f"{det.name} on {f.name}: {len(units)} items in {time.time() - t0:.1f}s", flush=True)
    return blocks, skipped


def summarise(detectors: Sequence[Any], inputs: JobInputs, blocks: dict[tuple[str, str], list[dict[str, Any]]],
              skipped: dict[str, str], ctx: DetectorContext, model: str) -> dict[str, Any]:
    """summary.json's content (see the module docstring)."""
    files = {name: {"path": f.path, "n": len(f.originals),
                    "n_reference_items": sum(len(v) for v in f.references.values())}
             for name, f in inputs.files.items()}
    out: dict[str, Any] = {"model": model, "files": files, "detectors": {}}
    for det in detectors:
        entry: dict[str, Any] = {"label": det.label, "kind": det.kind, "needs": sorted(det.needs),
                                 "params": det.params(), "auroc": None, "tpr_at_5fpr": None, "files": {},
                                 "skipped": skipped.get(det.name)}
        scores: dict[str, list[float]] = {}
        for fname in inputs.files:
            rows = blocks.get((det.name, fname))
            if rows is None:
                continue
            c = DetectorContext(**{**ctx.__dict__, "file": fname})
            orig = [r for r in rows if r["variant"] == "original"]
            scores[fname] = [float(r["score"]) for r in orig if r.get("score") is not None]
            dec = det.benchmark_decision(rows, c)
            entry["files"][fname] = {"n": len(scores[fname]), "n_unscored": len(orig) - len(scores[fname]),
                                     "p_value": None, "threshold": None, **dec}
        if "data" in scores and "u" in scores:
            entry["auroc"] = auroc(scores["data"], scores["u"])
            entry["tpr_at_5fpr"] = tpr_at_fpr(scores["data"], scores["u"], 0.05)
        out["detectors"][det.name] = entry
    return out


def _fmt(x: Any, nd: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and x != x) else f"{x:.{nd}f}"


def _decision(f: dict[str, Any] | None) -> str:
    if not f:
        return "—"
    d = {True: "yes", False: "no", None: "—"}[f.get("decision")]
    p = f.get("p_value")
    return f"{d} (p={p:.3g})" if p is not None else d


def markdown(summary: dict[str, Any], title: str | None = None) -> str:
    """baselines.md: detector label, AUROC, TPR@5%FPR, statistic and decision on each file."""
    fnames = list(summary["files"])
    head = ["Detector", "AUROC (C vs U)", "TPR@5%FPR"]
    for f in fnames:
        head += [f"{f}: statistic", f"{f}: decision"]
    lines = [f"# {title}\n" if title else "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for entry in summary["detectors"].values():
        cells = [entry["label"], _fmt(entry["auroc"]), _fmt(entry["tpr_at_5fpr"])]
        if entry["skipped"]:
            cells += ["skipped"] + [""] * (2 * len(fnames) - 1)
            cells[-1] = entry["skipped"]
        else:
            for f in fnames:
                fe = entry["files"].get(f)
                cells += [_fmt(fe.get("statistic") if fe else None, 4), _decision(fe)]
        lines.append("| " + " | ".join(cells) + " |")
    standard = {"n", "n_unscored", "statistic", "decision", "rule", "p_value", "threshold"}
    extras = []
    for e in summary["detectors"].values():
        for f in fnames:
            more = {k: v for k, v in e["files"].get(f, {}).items() if k not in standard}
            if more:
                extras.append(f"- {e['label']} on {f}: " + ", ".join(
                    f"{k} = {_fmt(v) if isinstance(v, float) else v}" for k, v in more.items()))
    if extras:
        lines += ["", "Other statistics:", "", *extras]
    rules = {e["label"]: e["files"][f]["rule"] for e in summary["detectors"].values() for f in fnames
             if f in e["files"]}
    lines += ["", "Decision rules:", ""] + [f"- {label}: {rule}" for label, rule in rules.items()]
    return "\n".join(x for x in lines if x is not None) + "\n"


def baselines(backend: Any, detectors: Sequence[Any], inputs: JobInputs, out: Path, ctx: DetectorContext,
              fingerprint: str, on_ready: Any = None, tracker: Any = None) -> dict[str, Any]:
    """Locked run: check the fingerprint, score the blocks (resume), write summary.json and baselines.md."""
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):
        meta = out / META
        if meta.exists():
            if read_json(meta).get("fingerprint") != fingerprint:
                raise RunDirError(f"{out} holds records of another run (model, reference model, items or seed "
                                  "differ); use a new output_dir")
        elif (out / RECORDS).exists():
            raise RunDirError(f"{out} holds {RECORDS} without {META}: its run is unknown; use a new output_dir")
        else:
            write_json(meta, {"fingerprint": fingerprint})
        if on_ready is not None:
            on_ready()
        blocks, skipped = run_blocks(backend, detectors, inputs, ctx, out)
        summary = summarise(detectors, inputs, blocks, skipped, ctx, getattr(backend, "name", "model"))
        summary["data_issues"] = inputs.issues
        write_json(out / SUMMARY, summary)
        (out / TABLE).write_text(markdown(summary, f"Baseline detectors — {summary['model']}"))
        if tracker is not None:
            rows = [{"detector": n, "label": e["label"], "auroc": e["auroc"], "tpr_at_5fpr": e["tpr_at_5fpr"],
                     **{f"{f}/{k}": e["files"].get(f, {}).get(k) for f in inputs.files for k in ("statistic", "decision", "p_value")},
                     "skipped": e["skipped"]} for n, e in summary["detectors"].items()]
            tracker.table("baselines", rows)
            tracker.summary({f"{n}/auroc": e["auroc"] for n, e in summary["detectors"].items() if e["auroc"] is not None})
    return summary


def run_baselines(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_baselines.py: config checks, inputs, models, detectors, reports, W&B."""
    from zcp.config import build_backend, check_model_path, model_name, run_dir, save_config, to_dict
    from zcp.io import model_fingerprint, seed_everything
    from zcp.tracking import Tracker

    job, params = check_config(cfg)
    seed_everything(job.seed)
    if cfg.get("run_dir"):
        d = to_dict(cfg.data) if cfg.get("data") is not None else {}
        given = [k for k in ("path", "u_path", "reference_path", "u_reference_path", "manifest", "limit", "sample")
                 if d.get(k)]
        if given:
            raise ConfigError(f"run_dir={cfg.run_dir} takes C, U and references from the run; data.{given[0]} "
                              "cannot be used with it")
        ref_override = cfg.ref_model.get("path") if cfg.get("ref_model") is not None else None
        inputs = inputs_from_run_dir(str(cfg.run_dir), ref_override)
    else:
        check_model_path(cfg.model.get("path"), "model.path")
        inputs = inputs_from_data(cfg)
    if cfg.get("zcp_records"):
        inputs.records_path = str(cfg.zcp_records)
    detectors = [get_detector(n, **(params.get(n) or {})) for n in job.detectors]
    needs_ref = any("reference_model" in d.needs for d in detectors)
    if needs_ref and inputs.ref_path:
        check_model_path(inputs.ref_path, "ref_model.path")
    records = None
    if any("detection_records" in d.needs for d in detectors) and inputs.records_path:
        if not Path(inputs.records_path).exists():
            raise ConfigError(f"zcp_records={inputs.records_path}: no such file")
        records = list(read_jsonl(inputs.records_path))
    weights = {"model": model_fingerprint(inputs.model_path), "adapter": model_fingerprint(inputs.adapter),
               "ref": model_fingerprint(inputs.ref_path) if needs_ref else None}
    out = run_dir(cfg, "baselines", inputs.name, Path(inputs.model_path).name if cfg.get("run_dir")
                  else model_name(cfg.model), extra=weights)
    fp = _fingerprint(inputs, [weights["model"] or inputs.model_path, weights["adapter"]],
                      (weights["ref"] or inputs.ref_path) if needs_ref else None, job.seed)
    mcfg = to_dict(cfg.model)
    backend = build_backend({**mcfg, "path": inputs.model_path, "adapter": inputs.adapter},
                            progress=bool(cfg.get("progress", False)))
    if cfg.get("run_dir"):
        backend.name = f"{inputs.name}/model"
    ref_backend = None
    if needs_ref and inputs.ref_path:
        rcfg = {**mcfg, **{k: v for k, v in (to_dict(cfg.ref_model) if cfg.get("ref_model") else {}).items()
                           if v is not None}, "path": inputs.ref_path, "adapter": None}
        ref_backend = build_backend(rcfg)
    d = to_dict(cfg.data) if cfg.get("data") is not None else {}
    ctx = DetectorContext(seed=job.seed, alpha=job.alpha, bootstrap_samples=job.bootstrap_samples,
                          ref_backend=ref_backend, dataset_name=d.get("dataset_name"), split_name=d.get("split_name"),
                          detection_records=records)
    with Tracker(cfg.get("logger"), run_config=to_dict(cfg), run_dir=str(out), job_type="baselines") as tracker:
        summary = baselines(backend, detectors, inputs, out, ctx, fp, on_ready=lambda: save_config(cfg, out),
                            tracker=tracker)
        summary_extra = {"records_path": inputs.records_path, "ref_model": inputs.ref_path, "output_dir": str(out)}
        summary.update(summary_extra)
        write_json(out / SUMMARY, summary)
        tracker.artifact("baseline-results", "zcp-baselines", [str(out / SUMMARY), str(out / TABLE),
                                                               str(out / "config.yaml")])
    print((out / TABLE).read_text())
    print(f"wrote {out}")
    return summary

"""The baseline-detector job (evaluate/run_baselines.py): load, score, resume, summarise.

Inputs, either
- ``data.path`` (the items, "data" = C when U is given) with optional ``data.u_path`` (U), each with an
  optional reference set (``data.reference_path`` / ``data.u_reference_path``: the ZCP reference items,
  rows naming their original), or ``data.manifest`` splitting one file into C and U; or
- ``run_dir=outputs/contaminate/<run>``: C and U from its manifest.json + benchmark_items.jsonl, the
  audited model from ``<run>/model``, the reference model for `ref` from exposure.json's ``base_model``
  (unless ``ref_model.path`` is set), the references rebuilt as the simulation's detection stage builds
  them (`zcp.simulate.pipeline._references`: m x len(seeds) draws, the same reference seed, so the same reference
  items as ZCP) and, for the zcp_* detectors, the records of the newest FINISHED ``detect/FT*/``
  (`zcp.core.rundir.ContaminationRun.newest_detection`), or ``zcp_records``.

Detection records (zcp_*) are used only when they are of a finished detection (`zcp.core.rundir.detection_unfinished`:
summary.json there, every unit run_meta.json announces in the records), of the audited model (the detection's
backend fingerprint, else its config.yaml's model, against the audited weights; a run dir's own detect/FT*/
is its model's by construction) and of these items (every C and U id among its originals, unless that
detection listed the item as left out). Otherwise: one line naming the dir and what is wrong, an error when
`zcp_records` was given or the detectors list is not the default one (zcp_* named by the user), else (the
default list on a run dir) the zcp_* detectors are skipped with that reason. U may share no id with C (an item
cannot be leaked and clean at once), and U may not be left empty by its questions in C (data.on_duplicate=merge).
All of this, and the run lock (a concurrent run) and the directory's fingerprint, is checked before any model
loads; a run that fails before writing anything leaves no directory behind.

Each detector runs per file: kind "score" detectors score the originals and their reference items in one
call (the reference-set decision needs both), the others the originals only. records.jsonl gets one row
per (detector, file, item) — reference items as rows with ``variant: reference`` — appended one
(detector, file) block at a time; a block is finished when all its rows are there, so a killed run
re-run skips finished blocks and redoes a cut one. The directory is claimed by the one run-dir rule
(zcp.core.rundir.claim_run_dir, run_fingerprint.json: the audited model's content, items, references, seed); each
row carries its detector's parameter hash and, for detectors with further inputs, their hash (`inputs_hash`: the
reference model's content for `ref`, the detection records' content for zcp_*). Other weights, data or parameters
refuse to resume there; another reference model refuses too; changed detection records make the zcp_* blocks be
recomputed. A rerun with fewer (or other) detectors is the same run: it adds blocks and never deletes another
detector's finished rows.

summary.json: per detector its label and needs (from the registry), AUROC and TPR@5%FPR of C (data) vs U
(null without U), and per file the benchmark decision (statistic, decision, rule, p_value, threshold);
``skipped`` names why a detector did not run. ``warnings`` flags an AUROC / TPR from too few items: fewer
than MIN_AUROC_ITEMS (10) scored items on either side (a 1-vs-1 AUROC is 0 or 1), or a TPR@5%FPR from fewer
than MIN_TPR_NEGATIVES (20) U items (a 5% false-positive rate cannot be resolved); the numbers stay, marked
† in baselines.md. The requested detectors come first (``requested: true``); detectors finished in the
directory by an earlier run and not requested now follow with their earlier entry (``requested: false``)
when their rows and inputs are unchanged, else they are named under ``other_detectors`` (rows kept).
baselines.md: the same as a table.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.core.io import RunLock, read_json, stable_hash, write_json
from zcp.core.records import RecordStore
from zcp.core.rundir import DETECTION_META as DET_META
from zcp.core.rundir import DETECTION_SUMMARY as DET_SUMMARY
from zcp.core.rundir import claim_run_dir, claimed_run_dir, detection_unfinished
from zcp.errors import ConfigError, RunDirError
from zcp.validate.baselines_config import (  # noqa: F401  (the job's schema, re-exported)
    DEFAULT_DETECTORS,
    BaselinesConfig,
    check_detectors,
    register_schema,
)
from zcp.validate.baselines_inputs import FileData, JobInputs, inputs_from_data, inputs_from_run_dir  # noqa: F401
from zcp.validate.detectors.base import DetectorContext, auroc, get_detector, spec_of, tpr_at_fpr

log = logging.getLogger(__name__)

RECORDS = "records.jsonl"
SUMMARY = "summary.json"
TABLE = "baselines.md"
META = "run_meta.json"  # where directories of an earlier zcp kept their fingerprint: such a directory is refused
MIN_AUROC_ITEMS = 10  # fewer scored items than this on either side: the AUROC is flagged
MIN_TPR_NEGATIVES = 20  # fewer U items than this cannot resolve a 5% FPR: TPR@5%FPR is flagged








def check_config(cfg: Any) -> tuple[BaselinesConfig, dict[str, Any]]:
    """Typed checks before anything is read: groups (zcp.config.schemas.validate), the job's keys, every detector
    name and its params (ConfigError, one line naming the key). Returns the job config and detector params."""
    from zcp.config import validate

    job = validate(cfg, job="baselines")["__job__"]  # every key at every depth; detectors and params: __post_init__
    params = {k: dict(v or {}) for k, v in job.params.items()}  # a detector named without parameters: none
    return job, params


# ------------------------------------------------------------------------------------------ inputs
def weights_id(path: str | None, adapter: str | None) -> str:
    """'<model content>+<adapter content>' (the path or hub id where there is no local folder): how a
    backend's fingerprint starts (zcp.backends.hf / vllm), so records can be matched to the weights they are of."""
    from zcp.core.io import model_fingerprint

    return f"{model_fingerprint(path) or path}+{model_fingerprint(adapter) or adapter}"


def detection_model(det_dir: str | Path) -> str | None:
    """The weights (`weights_id`) a detection run probed: its run_meta.json's backend fingerprint, else its
    config.yaml's model.path/adapter (their content now); None when the run says neither (a simulation's
    detect/FT*/ made before run_meta.json recorded the backend)."""
    d = Path(det_dir)
    fp = (read_json(d / DET_META) if (d / DET_META).exists() else {}).get("backend_fingerprint")
    if fp:
        return str(fp).split("|")[0]  # after "|": rendering options, not the weights
    if (d / "config.yaml").exists():
        from omegaconf import OmegaConf

        try:
            model = (OmegaConf.to_container(OmegaConf.load(d / "config.yaml")) or {}).get("model") or {}
        except Exception:  # an unreadable config says nothing about the model
            return None
        if isinstance(model, dict) and model.get("path"):
            return weights_id(str(model["path"]), model.get("adapter"))
    return None


def _left_out_ids(det_dir: Path) -> set[str]:
    """Items a detection run listed as left out on purpose (no reference row, a skipped row, an overflowing
    original): the zcp_* detectors leave them unscored instead of refusing the records."""
    summ = read_json(det_dir / DET_SUMMARY) or {}
    out = {str(x["id"]) for x in summ.get("skipped_rows") or [] if isinstance(x, dict) and x.get("id") is not None}
    out |= {str(x["original_id"]) for x in summ.get("overflow") or []
            if isinstance(x, dict) and x.get("action") == "skipped item"}
    return out


def check_detection_records(inputs: JobInputs, detectors: Sequence[Any], *, explicit: bool, audited: str,
                            run: Path | None = None) -> list[dict[str, Any]] | None:
    """The detection records the zcp_* detectors read, checked; None when there are none to read.

    Used only when they are of a finished detection, of the audited model (`audited`, a `weights_id`) and of
    these items (see the module docstring). A problem raises ConfigError (one line naming the records, the
    dir and what is wrong) when `explicit` (the user named zcp_records or a zcp_* detector); else every zcp_*
    detector is skipped with it (`inputs.skip`). Sets `inputs.records_hash` (the records' content hash, part
    of the zcp_* blocks' inputs) for records of a finished detection, whether zcp_* run now or not.
    No model is loaded, nothing is written.
    """
    wanted = [d.name for d in detectors if "detection_records" in d.needs]

    def problem(msg: str) -> None:
        inputs.records_hash = None
        if explicit:
            raise ConfigError(msg)
        log.warning("%s skipped: %s", ", ".join(wanted), msg)
        inputs.skip.update({n: msg for n in wanted})

    if inputs.records_path is None:
        if inputs.detection_note and wanted:
            problem(f"{', '.join(wanted)}: no finished detection: {inputs.detection_note}")
        return None
    path = Path(inputs.records_path)
    if not path.is_file():
        if wanted:
            raise ConfigError(f"zcp_records={path}: no such file")
        return None
    det = path.parent
    reason = detection_unfinished(det)
    if reason:
        if wanted:
            problem(f"zcp_records={path}: {reason}")
        return None
    inputs.records_hash = stable_hash(path.read_text(encoding="utf-8"), 16)
    if not wanted:
        return None
    made_with = detection_model(det)
    if made_with is None:
        own = run is not None and det.resolve().parent == (Path(run) / "detect").resolve()
        if not own:  # a run dir's own detect/FT*/ probed its model; elsewhere the model must be on record
            problem(f"zcp_records={path}: its detection run {det} does not record the model it probed (no "
                    f"backend_fingerprint in run_meta.json, no config.yaml), so it cannot be checked to be "
                    f"{inputs.model_path}")
            return None
    elif made_with != audited:
        name = (read_json(det / DET_SUMMARY) or {}).get("model")
        problem(f"zcp_records={path}: its detection run {det} probed another model ({name or made_with}) than "
                f"the audited {inputs.model_path}")
        return None
    records = RecordStore(path).read()
    have = {str(r.get("original_id", r.get("id"))) for r in records if r.get("variant") == "original"}
    left_out = _left_out_ids(det)
    for f in inputs.files.values():
        missing = [it.id for it in f.originals if it.id not in have and it.id not in left_out]
        if missing:
            problem(f"zcp_records={path}: {len(missing)} of the {len(f.originals)} items of "
                    f"{'C' if f.name == 'data' else 'U'} ({f.path}) are not among its originals, first "
                    f"{missing[0]!r}: records of another split or benchmark")
            return None
    return records


# ------------------------------------------------------------------------------------------ records
def _block(r: dict[str, Any]) -> tuple[str, str]:
    return (r["detector"], r["file"])


def _unit_lines(inputs: JobInputs) -> list[str]:
    return [f"{name}|{variant}|{oid}|{draw}|{it.question}|{it.answer}"
            for name, f in sorted(inputs.files.items()) for variant, oid, draw, it in f.units(True)]


def made_of(inputs: JobInputs, model_fp: Any, seed: int) -> dict[str, Any]:
    """What the directory's run is made from (its claim, zcp.core.rundir.claim_run_dir): the audited model's
    content, the seed, the items and references (a hash of every unit). Not the detector selection nor the inputs
    only some detectors read (reference model, detection records): those are per block (`inputs_hash`), so a rerun
    with other detectors is the same run."""
    return {"model": model_fp, "seed": seed, "units": stable_hash("\n".join(_unit_lines(inputs)), 32)}


def load_finished(store: RecordStore, expected: dict[tuple[str, str], int]
                  ) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The blocks on disk: every finished block of an `expected` (selected) detector, and every block of the
    other detectors as it is (an earlier run's work: a rerun with fewer detectors never deletes it). Rows of
    an expected block cut short by a kill, and a half-written last line, are dropped from the file
    (`RecordStore.load`) so the block is redone cleanly."""
    blocks: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)

    def finished(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for r in rows:
            blocks[_block(r)].append(r)
        keep = {k for k, v in blocks.items() if k not in expected or expected[k] == len(v)}
        return [r for r in rows if _block(r) in keep]

    kept = {_block(r) for r in store.load(finished)}
    return {k: v for k, v in blocks.items() if k in kept}


def params_hash(det: Any) -> str:
    """Hash of a detector's name, scoring version and parameters (a block's rows carry it)."""
    return stable_hash(json.dumps([det.name, det.spec.version, det.params()], sort_keys=True, default=str), 12)


def inputs_hash(needs: frozenset[str] | set[str], ref: str | None, records: str | None) -> str | None:
    """Hash of what a detector reads besides the audited model and the items: the reference model's content
    (`reference_model`) and the detection records' content (`detection_records`); None when it reads neither."""
    parts = {}
    if "reference_model" in needs:
        parts["ref"] = ref
    if "detection_records" in needs:
        parts["records"] = records
    return stable_hash(json.dumps(parts, sort_keys=True), 12) if parts else None


def _input_ids(inputs: JobInputs, ctx: DetectorContext, loaded: bool = True) -> tuple[str | None, str | None]:
    """(reference model, detection records) of this run as `inputs_hash` takes them; with `loaded` only those
    actually at hand (a reference backend, loaded records), else those the inputs name."""
    ref = inputs.ref_fingerprint or inputs.ref_path or ("reference model" if ctx.ref_backend is not None else None)
    if loaded and ctx.ref_backend is None:
        ref = None
    records = inputs.records_hash
    if records is None and ctx.detection_records:
        records = stable_hash(json.dumps(ctx.detection_records, sort_keys=True, default=str), 16)
    if loaded and not ctx.detection_records:
        records = None
    return ref, records


def _rows_hash(name: str, blocks: dict[tuple[str, str], list[dict[str, Any]]], files: Sequence[str]) -> str:
    rows = [r for f in files for r in blocks.get((name, f), [])]
    return stable_hash(json.dumps(rows, sort_keys=True, default=str), 16)


# ------------------------------------------------------------------------------------------ the job
def run_blocks(backend: Any, detectors: Sequence[Any], inputs: JobInputs, ctx_base: DetectorContext, out: Path,
               ) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], dict[str, str]]:
    """Score every (detector, file) block not yet in out/records.jsonl; returns the usable blocks (the selected
    detectors', then the other detectors' already there) and the skip reasons.

    A finished block whose detector parameters differ refuses (RunDirError); one made with another reference
    model refuses too; one made from other detection records is dropped and recomputed; one whose further
    input is not at hand now (no reference model, no records) is kept on disk and not used.
    """
    store = RecordStore(out / RECORDS)
    expected = {(d.name, f.name): len(f.units(d.kind == "score")) for d in detectors for f in inputs.files.values()}
    blocks = load_finished(store, expected)
    by_name = {d.name: d for d in detectors}
    hashes = {d.name: params_hash(d) for d in detectors}
    ref_id, records_id = _input_ids(inputs, ctx_base)
    current = {d.name: inputs_hash(d.needs, ref_id, records_id) for d in detectors}
    redo: set[tuple[str, str]] = set()
    unusable: set[tuple[str, str]] = set()
    for key, rows in blocks.items():
        det = by_name.get(key[0])
        if det is None:
            continue  # another run's detector: kept as it is
        if rows[0].get("params_hash") != hashes[det.name]:
            raise RunDirError(f"{out} holds {det.name} records with other parameters (or of an older version of the "
                              "detector); use a new output_dir")
        if det.name in inputs.skip:
            unusable.add(key)
        elif rows[0].get("inputs_hash") != current[det.name]:
            if "reference_model" in det.needs and ref_id is not None:
                raise RunDirError(f"{out} holds {det.name} records made with another reference model than "
                                  f"{inputs.ref_path}; use a new output_dir")
            if "detection_records" in det.needs and records_id is not None:
                redo.add(key)
            else:
                unusable.add(key)
    if redo:
        log.info("the detection records changed: recomputing %s", ", ".join(sorted({k[0] for k in redo})))
        store.rewrite([r for k, v in blocks.items() if k not in redo for r in v])
        for k in redo:
            del blocks[k]
    usable = {k: v for k, v in blocks.items() if k not in unusable}
    if usable:
        log.info("resuming: %d of %d (detector, file) blocks finished", sum(k in expected for k in usable),
                 len(expected))
    skipped: dict[str, str] = {}
    for det in detectors:
        if det.name in inputs.skip:
            skipped[det.name] = inputs.skip[det.name]
            continue
        for f in inputs.files.values():
            key = (det.name, f.name)
            if key in usable:
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
            extra = {"inputs_hash": current[det.name]} if current[det.name] is not None else {}
            rows = []
            for (variant, oid, draw, it), rec in zip(units, recs, strict=True):
                rows.append({"detector": det.name, "file": f.name, "variant": variant, "original_id": oid,
                             "draw": draw, **rec, "id": it.id, "params_hash": hashes[det.name], **extra})
            store.append(rows)
            usable[key] = rows
            print(f"{det.name} on {f.name}: {len(units)} items in {time.time() - t0:.1f}s", flush=True)
    return usable, skipped


def sample_warnings(n_c: int, n_u: int) -> list[str]:
    """Why an AUROC / TPR@5%FPR of n_c C items against n_u U items is not to be trusted (empty: it is).

    Below MIN_AUROC_ITEMS on either side an AUROC moves in steps of 1/(n_c n_u) and 1-vs-1 gives 0 or 1;
    with fewer than MIN_TPR_NEGATIVES U items no threshold has a false-positive rate strictly between 0 and
    5%, so "TPR at 5% FPR" is the TPR at 0% FPR."""
    out = []
    if min(n_c, n_u) < MIN_AUROC_ITEMS:
        out.append(f"AUROC from {n_c} C and {n_u} U scored items (fewer than {MIN_AUROC_ITEMS} on a side): not a "
                   "reliable estimate")
    if n_u < MIN_TPR_NEGATIVES:
        out.append(f"TPR@5%FPR from {n_u} U items: fewer than {MIN_TPR_NEGATIVES} cannot resolve a 5% "
                   "false-positive rate")
    return out


def summarise(detectors: Sequence[Any], inputs: JobInputs, blocks: dict[tuple[str, str], list[dict[str, Any]]],
              skipped: dict[str, str], ctx: DetectorContext, model: str) -> dict[str, Any]:
    """summary.json's content for the requested detectors (see the module docstring)."""
    files = {name: {"path": f.path, "n": len(f.originals),
                    "n_reference_items": sum(len(v) for v in f.references.values())}
             for name, f in inputs.files.items()}
    out: dict[str, Any] = {"model": model, "files": files, "detectors": {}}
    ref_id, records_id = _input_ids(inputs, ctx)
    for det in detectors:
        entry: dict[str, Any] = {"label": det.label, "kind": det.kind, "needs": sorted(det.needs),
                                 "params": det.params(), "auroc": None, "tpr_at_5fpr": None, "warnings": [],
                                 "files": {}, "skipped": skipped.get(det.name), "requested": True,
                                 "inputs_hash": inputs_hash(det.needs, ref_id, records_id),
                                 "rows_hash": _rows_hash(det.name, blocks, list(inputs.files))}
        scores: dict[str, list[float]] = {}
        for fname in inputs.files:
            rows = blocks.get((det.name, fname))
            if rows is None or det.name in skipped:
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
            if entry["auroc"] is not None:
                entry["warnings"] = sample_warnings(len(scores["data"]), len(scores["u"]))
        out["detectors"][det.name] = entry
    return out


def add_other_detectors(summary: dict[str, Any], previous: dict[str, Any], detectors: Sequence[Any],
                        inputs: JobInputs, blocks: dict[tuple[str, str], list[dict[str, Any]]],
                        ctx: DetectorContext) -> None:
    """Detectors finished in the directory by an earlier run and not requested now: their earlier summary
    entry (``requested: false``) when their rows and inputs are unchanged since it was made, else named under
    ``other_detectors`` with their row count (the rows stay in records.jsonl either way)."""
    requested = {d.name for d in detectors}
    ref_id, records_id = _input_ids(inputs, ctx, loaded=False)
    others: dict[str, Any] = {}
    for name in sorted({k[0] for k in blocks} - requested):
        entry = (previous.get("detectors") or {}).get(name)
        try:
            needs = spec_of(name).needs
        except KeyError:
            needs = None
        if isinstance(entry, dict) and needs is not None and \
                entry.get("rows_hash") == _rows_hash(name, blocks, list(inputs.files)) and \
                entry.get("inputs_hash") == inputs_hash(needs, ref_id, records_id):
            summary["detectors"][name] = {**entry, "requested": False}
        else:
            others[name] = {"rows": sum(len(v) for k, v in blocks.items() if k[0] == name),
                            "files": sorted(k[1] for k in blocks if k[0] == name),
                            "note": "an earlier run's rows, kept in records.jsonl; not summarised (no earlier "
                                    "summary of these rows and inputs): add it to detectors to summarise it"}
    summary["other_detectors"] = others


def _fmt(x: Any, nd: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and x != x) else f"{x:.{nd}f}"


def _decision(f: dict[str, Any] | None) -> str:
    if not f:
        return "—"
    d = {True: "yes", False: "no", None: "—"}[f.get("decision")]
    p = f.get("p_value")
    return f"{d} (p={p:.3g})" if p is not None else d


def markdown(summary: dict[str, Any], title: str | None = None) -> str:
    """baselines.md: detector label, AUROC, TPR@5%FPR, statistic and decision on each file; † marks a number
    from too few items (the warnings below the table say why)."""
    fnames = list(summary["files"])
    head = ["Detector", "AUROC (C vs U)", "TPR@5%FPR"]
    for f in fnames:
        head += [f"{f}: statistic", f"{f}: decision"]
    lines = [f"# {title}\n" if title else "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for entry in summary["detectors"].values():
        warned = entry.get("warnings") or []
        mark_auroc = " †" if any(w.startswith("AUROC") for w in warned) else ""
        mark_tpr = " †" if warned else ""
        label = entry["label"] + ("" if entry.get("requested", True) else " (earlier run)")
        cells = [label, _fmt(entry["auroc"]) + (mark_auroc if entry["auroc"] is not None else ""),
                 _fmt(entry["tpr_at_5fpr"]) + (mark_tpr if entry["tpr_at_5fpr"] is not None else "")]
        if entry["skipped"]:
            cells += ["skipped"] + [""] * (2 * len(fnames) - 1)
            cells[-1] = entry["skipped"]
        else:
            for f in fnames:
                fe = entry["files"].get(f)
                cells += [_fmt(fe.get("statistic") if fe else None, 4), _decision(fe)]
        lines.append("| " + " | ".join(cells) + " |")
    warnings = list(dict.fromkeys(w for e in summary["detectors"].values() for w in e.get("warnings") or []))
    if warnings:
        lines += ["", "† Too few items:", "", *[f"- {w}" for w in warnings]]
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
    if summary.get("other_detectors"):
        lines += ["", "Also in this directory (an earlier run's records, kept, not summarised): "
                  + ", ".join(f"{n} ({o['rows']} rows)" for n, o in summary["other_detectors"].items())]
    return "\n".join(x for x in lines if x is not None) + "\n"


PRODUCTS = (RECORDS, SUMMARY, TABLE, META)  # a directory holding one of them without run_fingerprint.json is refused


def baselines_locked(backend: Any, detectors: Sequence[Any], inputs: JobInputs, out: Path, ctx: DetectorContext,
                     tracker: Any = None) -> dict[str, Any]:
    """Score the blocks (resume) and write summary.json and baselines.md; the caller holds out's run lock."""
    previous: dict[str, Any] = {}
    if (out / SUMMARY).exists():
        try:
            previous = read_json(out / SUMMARY) or {}
        except RunDirError:
            previous = {}  # a cut summary is rebuilt below; its other detectors are then named, not summarised
    blocks, skipped = run_blocks(backend, detectors, inputs, ctx, out)
    summary = summarise(detectors, inputs, blocks, skipped, ctx, backend.name)
    add_other_detectors(summary, previous, detectors, inputs, blocks, ctx)
    summary["data_issues"] = inputs.issues
    write_json(out / SUMMARY, summary)
    (out / TABLE).write_text(markdown(summary, f"Baseline detectors — {summary['model']}"))
    if tracker is not None:
        rows = [{"detector": n, "label": e["label"], "auroc": e["auroc"], "tpr_at_5fpr": e["tpr_at_5fpr"],
                 **{f"{f}/{k}": e["files"].get(f, {}).get(k) for f in inputs.files for k in ("statistic", "decision", "p_value")},
                 "skipped": e["skipped"], "warnings": "; ".join(e.get("warnings") or [])}
                for n, e in summary["detectors"].items()]
        tracker.table("baselines", rows)
        tracker.summary({f"{n}/auroc": e["auroc"] for n, e in summary["detectors"].items() if e["auroc"] is not None})
    return summary


def baselines(backend: Any, detectors: Sequence[Any], inputs: JobInputs, out: Path, ctx: DetectorContext,
              run: dict[str, Any] | str, on_ready: Any = None, tracker: Any = None) -> dict[str, Any]:
    """Locked run: claim `out` for `run` (what the run is made from, `made_of`; a string: its fingerprint as the
    caller has it) by the one run-dir rule (zcp.core.rundir.claim_run_dir: another run's directory is refused in one
    line), score the blocks (resume), write summary.json and baselines.md."""
    with RunLock(out):
        claim_run_dir(out, "baselines", run if isinstance(run, dict) else {"fingerprint": run}, products=PRODUCTS)
        if on_ready is not None:
            on_ready()
        return baselines_locked(backend, detectors, inputs, out, ctx, tracker)


def run_baselines(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_baselines.py: config checks, inputs, detection records, the run lock, then
    the models, detectors, reports, W&B. Every user mistake (and a directory in use) is one line before any
    model loads."""
    from zcp.backends.registry import build_backend
    from zcp.config import check_model_path, model_name, run_dir, save_config, to_dict
    from zcp.core.io import model_fingerprint, seed_everything
    from zcp.core.tracking import Tracker

    job, params = check_config(cfg)
    seed_everything(job.seed)
    if job.run_dir:
        given = [k for k in ("path", "u_path", "reference_path", "u_reference_path", "manifest", "limit", "sample")
                 if job.data is not None and getattr(job.data, k)]
        if given:
            raise ConfigError(f"run_dir={job.run_dir} takes C, U and references from the run; data.{given[0]} "
                              "cannot be used with it")
        ref_override = job.ref_model.path if job.ref_model is not None else None
        inputs = inputs_from_run_dir(str(job.run_dir), ref_override)
    else:
        check_model_path(job.model.path if job.model is not None else None, "model.path")
        inputs = inputs_from_data(job)
    if job.zcp_records:
        inputs.records_path = str(job.zcp_records)
        inputs.detection_note = None
    detectors = [get_detector(n, **(params.get(n) or {})) for n in job.detectors]
    needs_ref = any("reference_model" in d.needs for d in detectors)
    if needs_ref and inputs.ref_path:
        check_model_path(inputs.ref_path, "ref_model.path")
    weights = {"model": model_fingerprint(inputs.model_path), "adapter": model_fingerprint(inputs.adapter),
               "ref": model_fingerprint(inputs.ref_path) if needs_ref else None}
    inputs.ref_fingerprint = model_fingerprint(inputs.ref_path) if inputs.ref_path else None
    explicit = bool(job.zcp_records) or list(job.detectors) != DEFAULT_DETECTORS
    records = check_detection_records(
        inputs, detectors, explicit=explicit,
        audited=f"{weights['model'] or inputs.model_path}+{weights['adapter'] or inputs.adapter}",
        run=Path(str(job.run_dir)) if job.run_dir else None)
    out = run_dir(cfg, "baselines", inputs.name, Path(inputs.model_path).name if job.run_dir
                  else model_name(job.model), extra=weights)
    run = made_of(inputs, [weights["model"] or inputs.model_path, weights["adapter"]], job.seed)
    # the lock and the directory's run are claimed before any model loads (zcp.core.rundir: the one rule): a second
    # concurrent run, or another run's directory, refuses at once; a directory made here and left empty goes again
    with claimed_run_dir(out, "baselines", run, products=PRODUCTS):
        mcfg = to_dict(cfg.model)
        backend = build_backend({**mcfg, "path": inputs.model_path, "adapter": inputs.adapter},
                                progress=job.progress)
        if job.run_dir:
            backend.name = f"{inputs.name}/model"
        ref_backend = None
        if needs_ref and inputs.ref_path:
            # the keys ref_model sets (not null, as the user wrote them) over the audited model's settings
            overlay = to_dict(cfg.ref_model) if job.ref_model is not None else {}
            rcfg = {**mcfg, **{k: v for k, v in overlay.items() if v is not None}, "path": inputs.ref_path,
                    "adapter": None}
            ref_backend = build_backend(rcfg)
        data = job.data
        ctx = DetectorContext(seed=job.seed, alpha=job.alpha, bootstrap_samples=job.bootstrap_samples,
                              ref_backend=ref_backend, dataset_name=data.dataset_name if data else None,
                              split_name=data.split_name if data else None, detection_records=records)
        save_config(cfg, out)
        with Tracker(job.logger, run_config=to_dict(cfg), run_dir=str(out), job_type="baselines") as tracker:
            summary = baselines_locked(backend, detectors, inputs, out, ctx, tracker)
            used = records is not None or inputs.records_hash is not None  # a finished detection's records
            summary.update({"records_path": inputs.records_path if used else None,
                            "ref_model": inputs.ref_path, "output_dir": str(out)})
            write_json(out / SUMMARY, summary)
            tracker.artifact("baseline-results", "zcp-baselines", [str(out / SUMMARY), str(out / TABLE),
                                                                   str(out / "config.yaml")])
    print((out / TABLE).read_text())
    print(f"wrote {out}")
    return summary

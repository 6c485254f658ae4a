"""The adaptive-evader study: every detector against format evasion (a), the probe-aware evader (b) and
CoT-only leaks (c), with what the evasion costs the evader (scripts/evader_study.py -> docs/results/evader.md).

The study reads finished outputs; it trains nothing. A JSON spec lists the runs: per run its contamination run dir,
the detection dir of ZCP with the fixed pre-fill (the probe's line), the one of `probe.prefill=auto`
(multi-convention: conv-<name>/records.jsonl), the base model's auto detection on the same items, and the
baselines dirs (evaluate/run_baselines.py run_dir=<run>, the default detectors and the answer-likelihood variant
`text=chat_answer`). From them, per run:

* ZCP's verdicts on C and U (summary.json `verdicts`, variant original), fixed pre-fill and auto;
* every baseline's benchmark decision on C and U and its AUROC of C vs U (baselines summary.json);
* the suppression and contrast signals (zcp.probe.suppression) on C and U from auto's per-convention records;
* the evader's costs: full-CoT accuracy on C and U before and after (table6.json), zero-CoT accuracy on C and U
  per convention (auto's `convention_results`, S of acc) against the base model's, and zero-CoT accuracy on the
  neutral set auto reads (probed here, `neutral_zero_cot`, once per model: cached in the study's work dir).

And the suppression signals' false-positive rate on every clean set whose records exist (`clean_sets`: U of every
detection run, C and U of every base-model detection), since nothing of those sets was trained on.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zcp.core.io import read_json, read_jsonl, stable_hash, write_json
from zcp.core.rundir import MODEL
from zcp.probe.suppression import suppression_signal

log = logging.getLogger(__name__)

ALPHA = 0.05


@dataclass
class EvaderRun:
    """One evader of the study and where its outputs are."""

    label: str
    kind: str  # a | b | c
    run_dir: str
    fixed: str  # detection dir of the probe's line
    auto: str | None = None  # detection dir of probe.prefill=auto
    base_auto: str | None = None  # the base model's auto detection of the same items
    baselines: list[str] = field(default_factory=list)
    probe: dict[str, Any] = field(default_factory=dict)  # ProbeConfig settings of the run's probe (release: system...)
    note: str = ""


def load_spec(path: str | os.PathLike[str]) -> list[EvaderRun]:
    """The study's runs from a JSON list of `EvaderRun` fields."""
    return [EvaderRun(**row) for row in json.loads(Path(path).read_text(encoding="utf-8"))]


# ------------------------------------------------------------------------------------------------ readers
def _verdicts(det_dir: str | None) -> dict[str, Any]:
    if not det_dir or not (Path(det_dir) / "summary.json").is_file():
        return {}
    s = read_json(Path(det_dir) / "summary.json")
    out = {}
    for v in s.get("verdicts", []):
        if v.get("variant") == "original":
            out[v["split"]] = {"p": v["p_value"], "c_cont": v["c_cont"], "flagged": bool(v["contaminated"]),
                               "driving": [v.get("driving_convention"), v.get("driving_metric")],
                               "n_tests": v.get("n_tests", len(v.get("metrics", [])))}
    out["conventions"] = [c["name"] for c in s.get("conventions") or []] or ["probe"]
    out["metrics"] = list(s.get("metrics", []))
    return out


def conv_records(det_dir: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]]:
    """Records per convention of a detection dir: conv-<name>/records.jsonl of a multi-convention run, else its
    records.jsonl as the one convention it probed (`probe`)."""
    d = Path(det_dir)
    convs = sorted(p for p in d.glob("conv-*") if (p / "records.jsonl").is_file())
    if convs:
        return {p.name[len("conv-"):]: list(read_jsonl(p / "records.jsonl")) for p in convs}
    return {"probe": list(read_jsonl(d / "records.jsonl"))}


def _metrics_of(det_dir: str | os.PathLike[str]) -> list[str]:
    s = read_json(Path(det_dir) / "summary.json")
    return [m for m in s.get("metrics", []) if m != "con"] or ["acc"]


def zero_cot_acc(det_dir: str | None) -> dict[str, dict[str, float]]:
    """S of acc per (convention, split) on the originals (and S_ref), from a detection's summary."""
    if not det_dir or not (Path(det_dir) / "summary.json").is_file():
        return {}
    s = read_json(Path(det_dir) / "summary.json")
    rows = s.get("convention_results") or [{**r, "convention": "probe"} for r in s.get("results", [])]
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["metric"] == "acc" and r["variant"] == "original":
            out.setdefault(r["convention"], {})[r["split"]] = r["s"]
            out[r["convention"]][r["split"] + "_ref"] = r["s_ref"]
    return out


def table6(run_dir: str) -> dict[str, dict[str, float]]:
    """Full-CoT greedy accuracy per split (C_leaked, U): base and final, from table6.json."""
    path = Path(run_dir) / "table6.json"
    if not path.is_file():
        return {}
    return {r["split"]: {"n": r["n"], "base": r["base"], "final": r["final"]} for r in read_json(path)["rows"]}


def baseline_rows(dirs: Sequence[str], suffix_of: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Per detector (named `<name>` or, from a dir whose params set text=chat_answer, `<name>@chat_answer`): its
    label, AUROC of C vs U, and its decision and p on C ("data") and U ("u")."""
    out: dict[str, dict[str, Any]] = {}
    for d in dirs:
        path = Path(d) / "summary.json"
        if not path.is_file():
            continue
        for name, e in read_json(path)["detectors"].items():
            if e.get("skipped"):
                out.setdefault(name, {"label": e["label"], "skipped": e["skipped"]})
                continue
            text = (e.get("params") or {}).get("text")
            key = f"{name}@{text}" if text and text != "question" else name
            row = {"label": e["label"] + (f" (text={text})" if key != name else ""), "auroc": e.get("auroc")}
            for f, split in (("data", "C"), ("u", "U")):
                fe = (e.get("files") or {}).get(f) or {}
                row[split] = {"decision": fe.get("decision"), "p": fe.get("p_value"),
                              "statistic": fe.get("statistic")}
            out[key] = row
    return out


# ------------------------------------------------------------------------------------------------ the model pass
def neutral_zero_cot(model_path: str, probe_settings: dict[str, Any], conventions: Sequence[str], *,
                     neutral_n: int = 40, neutral_seed: int = 20_020, cache_dir: str | os.PathLike[str]
                     ) -> dict[str, dict[str, float]]:
    """Zero-CoT accuracy (and malformed rate) on auto's neutral set (generated word problems, seed 20020) under
    each convention, for the model at `model_path`; cached per (model, settings) in `cache_dir`."""
    from zcp.core.io import model_fingerprint
    from zcp.probe.conventions import resolve_entries
    from zcp.probe.multiconv import convention_probe, neutral_items
    from zcp.probe.probe_config import AutoPrefillConfig
    from zcp.probe.prompts import ProbeConfig, probe_items

    probe = ProbeConfig(**{**probe_settings, "metrics": ("acc",)})
    key = stable_hash(json.dumps([model_fingerprint(model_path), probe_settings, list(conventions), neutral_n,
                                  neutral_seed], sort_keys=True, default=str), 12)
    cache = Path(cache_dir) / f"neutral__{key}.json"
    if cache.is_file():
        return read_json(cache)["acc"]
    from zcp.backends.registry import build_backend

    items = neutral_items(AutoPrefillConfig(neutral_n=neutral_n, neutral_seed=neutral_seed))
    backend = build_backend({"path": model_path})
    out: dict[str, dict[str, float]] = {}
    for conv in resolve_entries(list(conventions), probe.zero_cot_prefix, probe.answer_suffix):
        recs = probe_items(backend, items, replace(convention_probe(probe, conv), metrics=("acc",)))
        out[conv.name] = {"acc": sum(bool(r["correct"]) for r in recs) / len(recs),
                          "malformed": sum(bool(r["malformed"]) for r in recs) / len(recs), "n": len(recs)}
    del backend
    write_json(cache, {"model": model_path, "probe": probe_settings, "acc": out})
    return out


# ------------------------------------------------------------------------------------------------ the study
def study_run(run: EvaderRun, *, work_dir: Path, base_model: str, B: int, probe_models: bool) -> dict[str, Any]:
    """Everything the tables need of one evader run."""
    fixed, auto = _verdicts(run.fixed), _verdicts(run.auto)
    row: dict[str, Any] = {"label": run.label, "kind": run.kind, "run_dir": run.run_dir, "note": run.note,
                           "fixed": run.fixed, "auto": run.auto, "zcp_fixed": fixed, "zcp_auto": auto,
                           "baselines": baseline_rows(run.baselines), "table6": table6(run.run_dir),
                           "zero_cot": zero_cot_acc(run.auto or run.fixed),
                           "zero_cot_base": zero_cot_acc(run.base_auto)}
    det = run.auto or run.fixed
    records = conv_records(det)
    metrics = _metrics_of(det)
    row["suppression"] = {split: suppression_signal(records, metrics, split, B=B, alpha=ALPHA) for split in ("C", "U")}
    convs = auto.get("conventions") or ["probe"]
    if probe_models:
        row["neutral"] = neutral_zero_cot(str(Path(run.run_dir) / MODEL), run.probe, convs, cache_dir=work_dir)
        row["neutral_base"] = neutral_zero_cot(base_model, run.probe, convs, cache_dir=work_dir)
    return row


def clean_sets(roots: Sequence[str]) -> list[tuple[str, str, Path]]:
    """(kind, split, detection dir) of every clean set under `roots` (contamination output dirs): U of every
    finished fine-tuned detection (detect/FT*/), C and U of every base-model detection (base-detect__*/)."""
    out: list[tuple[str, str, Path]] = []
    for root in roots:
        r = Path(root)
        for d in sorted(r.glob("*/detect/FT__*")):
            if (d / "summary.json").is_file():
                out.append(("fine-tuned, U", "U", d))
        for d in sorted(r.glob("base-detect__*")):
            if (d / "summary.json").is_file():
                out += [("base model, C", "C", d), ("base model, U", "U", d)]
    return out


def suppression_fpr(roots: Sequence[str], *, B: int) -> dict[str, Any]:
    """The suppression and contrast signals on every clean set (`clean_sets`): how many are flagged at ALPHA."""
    rows = []
    for kind, split, d in clean_sets(roots):
        try:
            records = conv_records(d)
        except (OSError, ValueError) as e:
            log.warning("%s: %s", d, e)
            continue
        sig = suppression_signal(records, _metrics_of(d), split, B=B, alpha=ALPHA)
        if not sig["rows"]:
            continue
        rows.append({"kind": kind, "split": split, "dir": str(d), "conventions": len(records),
                     "n": max(r["n"] for r in sig["rows"]), "suppression_p": sig["suppression"]["p_value"],
                     "suppression_flagged": sig["suppression"]["flagged"],
                     "contrast_p": (sig["contrast"] or {}).get("p_value"),
                     "contrast_flagged": (sig["contrast"] or {}).get("flagged")})
    multi = [r for r in rows if r["conventions"] > 1]
    return {"rows": rows, "n_sets": len(rows), "suppression_flagged": sum(r["suppression_flagged"] for r in rows),
            "n_multi": len(multi), "contrast_flagged": sum(bool(r["contrast_flagged"]) for r in multi)}


def _git_commit() -> str:
    """HEAD's short commit of the checkout the study runs in, or "" outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict[str, Any]:
    """Where and when the study ran: host, CPUs, load (1/5/15 min, None where the platform has none), commit,
    UTC time; the study's report states them beside its figures."""
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {"host": platform.node(), "cpus": os.cpu_count(), "load": load, "commit": _git_commit(),
            "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def run_study(spec: str, out_md: str, *, clean_roots: Sequence[str], work_dir: str, base_model: str,
              B: int = 10_000, probe_models: bool = True, commands: Sequence[str] = ()) -> dict[str, Any]:
    """The whole study: every run of `spec`, the suppression signals' false-positive rate on the clean sets under
    `clean_roots`; writes `out_md` (the text above its generated-tables marker, if any, is kept) and its JSON
    beside it (same stem), and returns the JSON's content."""
    from zcp.validate.evader_report import render

    t0 = time.time()
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    runs = [study_run(r, work_dir=work, base_model=base_model, B=B, probe_models=probe_models)
            for r in load_spec(spec)]
    result = {"runs": runs, "fpr": suppression_fpr(clean_roots, B=B), "meta": machine(), "commands": list(commands)}
    result["meta"]["seconds"] = round(time.time() - t0, 1)
    out = Path(out_md)
    write_json(out.with_suffix(".json"), result)
    tables = render(result)
    old = out.read_text(encoding="utf-8") if out.is_file() else ""
    marker = tables.splitlines()[0]  # the prose written above the generated tables is kept
    prose = old[: old.index(marker)] if marker in old else ""
    out.write_text(prose + tables, encoding="utf-8")
    return result

"""The calibration job's library function (evaluate/run_calibration.py): run the configured parts, write the
reports, log to W&B."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zcp.probe.conventions import is_single_default
from zcp.validate.calibration.real_conventions import real_conventions_study
from zcp.validate.calibration.real_null import (
    item_table,
    real_null_study,
    score_benchmark,
    subset_study,
)
from zcp.validate.calibration.real_originals import average_rates, real_originals_study
from zcp.validate.calibration.report import max_type1, write_calibration_reports
from zcp.validate.calibration.simulated import (
    convention_grid,
    joint_grid,
    null_grid,
    power_grid,
)
from zcp.validate.calibration.tests import flag_row

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# the entry point's library function


def _tupled(settings: Any) -> Any:
    """A part's checked settings (the job's instance) with its list values as tuples, as the parts take them."""
    lists = {f.name: tuple(getattr(settings, f.name)) for f in dataclasses.fields(settings)
             if isinstance(getattr(settings, f.name), list)}
    return dataclasses.replace(settings, **lists)


def run_calibration(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_calibration.py: run the configured parts, write the reports, log to W&B.

    Writes table.md (every row), summary.md (the compact tables), summary.json (config, rows, runtimes,
    skipped parts with the reason), type1.png and power.png to the run directory.
    """
    from zcp.config import run_dir, save_config, to_dict, validate
    from zcp.core.io import model_fingerprint, seed_everything
    from zcp.core.tracking import Tracker

    c = to_dict(cfg)  # W&B's run config and the reports' copy of the config
    # every key typed and in range (parts, alphas, every part's settings); the job reads the checked CalibrationJob,
    # whose dataclasses (zcp.validate.calibration.job and the parts' settings) hold the defaults
    job = validate(cfg, job="calibration")["__job__"]
    seed = job.seed
    seed_everything(seed)
    parts = list(job.parts)
    alphas = [float(a) for a in job.alphas]
    high, low, discrete_below = job.flags.high, job.flags.low, job.flags.discrete_below
    progress = job.run.progress
    spec = _tupled(job.spec)
    extra = None
    if "base_model" in parts and job.model.path:
        extra = {"model": model_fingerprint(job.model.path)}
    out = run_dir(cfg, "calibration", job.name, extra=extra)
    save_config(cfg, out)
    bench = None
    if "base_model" in parts and job.data.reference_path:
        from zcp.probe.datasets import load_datasets

        bench = load_datasets(job.data)  # before the long parts: a data mistake fails in seconds
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"output_dir": str(out), "alphas": alphas, "discrete_below": discrete_below,
                            "flags": {"high": high, "low": low}, "runtime_seconds": {}, "skipped": {}}
    t_all = time.perf_counter()
    with Tracker(job.logger, run_config=c, run_dir=str(out), job_type="calibration") as tracker:
        if "simulation" in parts:
            t0 = time.perf_counter()
            g = _tupled(job.simulation)
            r, chk = null_grid(g, spec, alphas, seed, discrete_below=discrete_below, progress=progress)
            rows += r
            info["simulation"] = {**chk, "B": g.B, "replicates": {"binary": g.replicates,
                                  "continuous": g.replicates_continuous, f"continuous n>={g.large_n}": g.replicates_large}}
            info["runtime_seconds"]["simulation"] = time.perf_counter() - t0
        if "joint" in parts:
            t0 = time.perf_counter()
            j = _tupled(job.joint)
            rows += joint_grid(j, spec, alphas, seed, discrete_below=discrete_below, progress=progress)
            info["runtime_seconds"]["joint"] = time.perf_counter() - t0
        if "conventions" in parts:
            t0 = time.perf_counter()
            cg = _tupled(job.conventions)
            rows += convention_grid(cg, spec, alphas, seed, progress=progress)
            info["conventions"] = {"replicates": cg.replicates, "B": cg.B, "shift": cg.shift,
                                   "item_noise": cg.item_noise, "rho": cg.rho, "near_noise": cg.near_noise}
            info["runtime_seconds"]["conventions"] = time.perf_counter() - t0
        if "power" in parts:
            t0 = time.perf_counter()
            pw = _tupled(job.power)
            rows += power_grid(pw, spec, alphas, seed, progress=progress)
            info["runtime_seconds"]["power"] = time.perf_counter() - t0
        if "real_null" in parts:
            t0 = time.perf_counter()
            s = _tupled(job.real_null)
            r, rinfo = real_null_study(s, alphas, seed, discrete_below=discrete_below, progress=progress)
            rows += r
            info["real_null"] = rinfo
            if "skipped" in rinfo:
                info["skipped"]["real_null"] = rinfo["skipped"]
                log.warning("real_null skipped: %s", rinfo["skipped"])
            info["runtime_seconds"]["real_null"] = time.perf_counter() - t0
        if "base_model" in parts:
            t0 = time.perf_counter()
            s = _tupled(job.base_model)
            if bench is None:
                why = ("data.reference_path is not set: build the reference set with "
                       "`python evaluate/run_build_data.py data=gsm8k reference.m=3` and pass "
                       "data.reference_path=<output_dir>/reference.jsonl")
                info["skipped"]["base_model"] = why
                log.warning("base_model skipped: %s", why)
            else:
                records, binfo = score_benchmark(cfg, s, *bench, progress=progress)
                keys, X, Y = item_table(records, list(s.metrics))
                r, full = subset_study(X, Y, list(s.metrics), s, alphas, seed, discrete_below=discrete_below,
                                       label=f"{job.model.display_name()} on {job.data.name}", progress=progress)
                rows += r
                info["base_model"] = {**binfo, "pool_items": len(keys), "full_pool": full}
                info["base_model_settings"] = {"subsets": s.subsets, "subset_size": s.subset_size, "B": s.B}
            info["runtime_seconds"]["base_model"] = time.perf_counter() - t0
        if "real_originals" in parts:
            t0 = time.perf_counter()
            s = _tupled(job.real_originals)
            settings = {"m": s.m, "sizes": list(s.sizes), "subsets": s.subsets, "null_pools": s.null_pools, "B": s.B,
                        "alpha": s.alpha}
            if is_single_default(list(s.prefills)):  # the probe's line alone: today's study, byte for byte
                r, rinfo = real_originals_study(s, cfg.probe, dataclasses.asdict(job.model), seed, progress=progress)
                averages = {"average": average_rates(r), "average_did": average_rates(r, "did")}
            else:  # every convention of real_originals.prefills and the multi-convention verdict
                r, rinfo = real_conventions_study(s, cfg.probe, dataclasses.asdict(job.model), seed,
                                                  auto=job.probe.auto, progress=progress)
                averages = {"average": average_rates(r, convention="probe"), "average_did": average_rates(r, "did"),
                            "average_multiconv": average_rates(r, "multiconv"),
                            "average_per_convention": {c: average_rates(r, convention=c) for c in s.prefills}}
                settings.update(prefills=list(s.prefills), auto_read=s.auto_read)
            rows += r
            info["real_originals"] = {**rinfo, **averages, "settings": settings}
            for k, v in rinfo.get("skipped", {}).items():
                info["skipped"][f"real_originals/{k}"] = v
            info["runtime_seconds"]["real_originals"] = time.perf_counter() - t0
        info["runtime_seconds"]["total"] = time.perf_counter() - t_all
        for row in rows:
            if row["part"] not in ("power", "d"):
                flag_row(row, alphas[0], high, low)
        files = write_calibration_reports(rows, alphas, info, c, out, plot_n=job.plots.n)
        tracker.table("calibration", _table_rows(rows))
        tracker.table("max_type1", max_type1(rows, alphas[0]))
        tracker.summary({f"max_type1/{r['regime']}/{r['kind']}/{r['test']}": r["max_rate"]
                         for r in max_type1(rows, alphas[0])})
        for key in ("type1", "power"):
            if key in files:
                tracker.image(key, str(files[key]))
        tracker.artifact("calibration", "zcp-calibration",
                         [str(p) for k, p in files.items() if k in ("summary_md", "table", "summary_json")])
    print(Path(files["summary_md"]).read_text())
    print(f"wrote {out}")
    return {"rows": rows, "info": info, "files": {k: str(v) for k, v in files.items()}}


def _table_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows with one column set and one type per column (W&B tables refuse mixed types): labels as text,
    rates as floats (NaN where a row has none)."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    text = {"part", "regime", "metric", "test", "m", "n", "flag", "model", "pool", "kind", "convention", "conventions",
            "dependence"}
    out = []
    for r in rows:
        row: dict[str, Any] = {}
        for c in cols:
            v = r.get(c)
            if c in text:
                row[c] = "" if v is None else str(v)
            elif isinstance(v, bool) or c == "discrete_limited":
                row[c] = bool(v)
            else:
                row[c] = float("nan") if v is None else float(v)
        out.append(row)
    return out

"""The calibration job's library function (evaluate/run_calibration.py): run the configured parts, write the
reports, log to W&B."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zcp.validate.calibration.real_null import (
    BaseModelSettings,
    RealNullSettings,
    item_table,
    real_null_study,
    score_benchmark,
    subset_study,
)
from zcp.validate.calibration.real_originals import RealOriginalsSettings, average_rates, real_originals_study
from zcp.validate.calibration.report import max_type1, write_calibration_reports
from zcp.validate.calibration.simulated import (
    GridSettings,
    JointSettings,
    PowerSettings,
    SimSpec,
    joint_grid,
    null_grid,
    power_grid,
)
from zcp.validate.calibration.tests import flag_row

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# the entry point's library function


def _settings(cls: Callable[..., Any], d: Mapping[str, Any] | None) -> Any:
    d = dict(d or {})
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = set(d) - known - {"enabled"}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} key(s) {sorted(unknown)}; known: {sorted(known)}")
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in known})


def run_calibration(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_calibration.py: run the configured parts, write the reports, log to W&B.

    Writes table.md (every row), summary.md (the compact tables), summary.json (config, rows, runtimes,
    skipped parts with the reason), type1.png and power.png to the run directory.
    """
    from zcp.config import model_name, run_dir, save_config, to_dict
    from zcp.core.io import model_fingerprint, seed_everything
    from zcp.core.tracking import Tracker

    c = to_dict(cfg)
    seed = int(c.get("seed", 0))
    seed_everything(seed)
    parts = list(c.get("parts") or [])
    known_parts = {"simulation", "joint", "power", "real_null", "base_model", "real_originals"}
    if set(parts) - known_parts:
        raise ValueError(f"unknown part(s) {sorted(set(parts) - known_parts)}; use some of {sorted(known_parts)}")
    alphas = [float(a) for a in c.get("alphas", [0.05, 0.01])]
    flags = c.get("flags") or {}
    high, low = float(flags.get("high", 0.07)), float(flags.get("low", 0.03))
    discrete_below = float(flags.get("discrete_below", low))
    progress = bool((c.get("run") or {}).get("progress", True))
    spec = _settings(SimSpec, c.get("spec"))
    extra = None
    if "base_model" in parts and cfg.model.get("path"):
        extra = {"model": model_fingerprint(cfg.model.get("path"))}
    out = run_dir(cfg, "calibration", str(c.get("name") or "calibration"), extra=extra)
    save_config(cfg, out)
    bench = None
    if "base_model" in parts and (c.get("data") or {}).get("reference_path"):
        from zcp.probe.datasets import load_datasets

        bench = load_datasets(cfg.data)  # before the long parts: a data mistake fails in seconds
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"output_dir": str(out), "alphas": alphas, "discrete_below": discrete_below,
                            "flags": {"high": high, "low": low}, "runtime_seconds": {}, "skipped": {}}
    t_all = time.perf_counter()
    with Tracker(c.get("logger"), run_config=c, run_dir=str(out), job_type="calibration") as tracker:
        if "simulation" in parts:
            t0 = time.perf_counter()
            g = _settings(GridSettings, c.get("simulation"))
            r, chk = null_grid(g, spec, alphas, seed, discrete_below=discrete_below, progress=progress)
            rows += r
            info["simulation"] = {**chk, "B": g.B, "replicates": {"binary": g.replicates,
                                  "continuous": g.replicates_continuous, f"continuous n>={g.large_n}": g.replicates_large}}
            info["runtime_seconds"]["simulation"] = time.perf_counter() - t0
        if "joint" in parts:
            t0 = time.perf_counter()
            j = _settings(JointSettings, c.get("joint"))
            rows += joint_grid(j, spec, alphas, seed, discrete_below=discrete_below, progress=progress)
            info["runtime_seconds"]["joint"] = time.perf_counter() - t0
        if "power" in parts:
            t0 = time.perf_counter()
            pw = _settings(PowerSettings, c.get("power"))
            rows += power_grid(pw, spec, alphas, seed, progress=progress)
            info["runtime_seconds"]["power"] = time.perf_counter() - t0
        if "real_null" in parts:
            t0 = time.perf_counter()
            s = _settings(RealNullSettings, c.get("real_null"))
            r, rinfo = real_null_study(s, alphas, seed, discrete_below=discrete_below, progress=progress)
            rows += r
            info["real_null"] = rinfo
            if "skipped" in rinfo:
                info["skipped"]["real_null"] = rinfo["skipped"]
                log.warning("real_null skipped: %s", rinfo["skipped"])
            info["runtime_seconds"]["real_null"] = time.perf_counter() - t0
        if "base_model" in parts:
            t0 = time.perf_counter()
            s = _settings(BaseModelSettings, c.get("base_model"))
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
                                       label=f"{model_name(cfg.model)} on {c['data'].get('name')}", progress=progress)
                rows += r
                info["base_model"] = {**binfo, "pool_items": len(keys), "full_pool": full}
                info["base_model_settings"] = {"subsets": s.subsets, "subset_size": s.subset_size, "B": s.B}
            info["runtime_seconds"]["base_model"] = time.perf_counter() - t0
        if "real_originals" in parts:
            t0 = time.perf_counter()
            s = _settings(RealOriginalsSettings, c.get("real_originals"))
            r, rinfo = real_originals_study(s, cfg.probe, c.get("model") or {}, seed, progress=progress)
            rows += r
            info["real_originals"] = {**rinfo, "average": average_rates(r), "average_did": average_rates(r, "did"),
                                      "settings": {"m": s.m, "sizes": list(s.sizes), "subsets": s.subsets,
                                                   "null_pools": s.null_pools, "B": s.B, "alpha": s.alpha}}
            for k, v in rinfo.get("skipped", {}).items():
                info["skipped"][f"real_originals/{k}"] = v
            info["runtime_seconds"]["real_originals"] = time.perf_counter() - t0
        info["runtime_seconds"]["total"] = time.perf_counter() - t_all
        for row in rows:
            if row["part"] not in ("power", "d"):
                flag_row(row, alphas[0], high, low)
        files = write_calibration_reports(rows, alphas, info, c, out)
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
    text = {"part", "regime", "metric", "test", "m", "n", "flag", "model", "pool", "kind"}
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

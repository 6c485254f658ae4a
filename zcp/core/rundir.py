"""The run directories the jobs hand to one another: their file names (once), the finished-detection rule, and
`ContaminationRun`, the one reader of a contamination run directory.

A contamination run dir (written by zcp.simulate: train/run_contaminate.py, train/run_demo.py) holds
``run_config.json`` (the config it was made with), ``manifest.json`` (the C/U split), ``benchmark_items.jsonl``,
``exposure.json`` (every knob, the base model), ``model/`` (the fine-tuned weights), ``detect/`` (the ZCP
detections ``detect/FT__<key>/`` and ``detect/simulation_summary.json``) and ``baselines/``. The baselines, the
ablations, the study and exposure reports and scripts/sham_fpr.py read it through `ContaminationRun`; the writers
name its files by the constants below, so reader and writer cannot drift apart.

Why core: nothing here needs more than paths and JSON (`zcp.core.io`). The benchmark-level parsing (the
manifest into `zcp.benchmarks.split.Manifest`, the items through `zcp.benchmarks.loaders`) stays with the
callers, which live in higher layers; the detection run's format (its files and unit key) is here because
both its writer (zcp.probe.detect) and its readers (zcp.validate) need it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zcp.core.io import read_json, stable_hash, write_json
from zcp.core.records import RecordStore
from zcp.errors import ConfigError, DataError, RunDirError

# ------------------------------------------------------------------------------------------ any job's run dir
RUN_FINGERPRINT = "run_fingerprint.json"  # what a run directory was made from: {"schema", "job", "fingerprint", "made_of"}
# The run-directory schema: how `made_of` and the fingerprint are formed. A stamp of another schema (or of none: a
# directory made before the schema was versioned) is refused in one line; nothing is translated from an older one.
RUN_DIR_SCHEMA = 1


def check_run_dir_usable(path: str | os.PathLike[str], key: str = "output_dir") -> None:
    """RunDirError (one line) unless a job can use `path` as its run directory, checked before any model loads:
    not a file, not (in) a symlink loop, and not held by a running job (its `RunLock`: the holder is named).

    A job then takes the lock itself (`claimed_run_dir`, before it loads a model); this first look is the one of a
    job that cannot hold it that early."""
    import errno

    from zcp.core.io import RunLock

    d = Path(path)
    try:
        os.stat(d)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunDirError(f"{key}={d}: a symlink loop (the path's links point at one another); use another "
                              f"{key}") from None
        if e.errno == errno.ENOTDIR:
            raise RunDirError(f"{key}={d}: a part of the path is a file, not a directory; use another {key}"
                              ) from None
        return  # not there yet: the job makes it
    if not d.is_dir():
        raise RunDirError(f"{key}={d} is a file, not a directory; use another {key}")
    if (d / ".lock").exists():
        with RunLock(d):  # refuses at once, naming the holder, when another run holds the directory
            pass


def fingerprint_of(made_of: dict[str, Any]) -> str:
    """The fingerprint of what a run is made from (16 hex digits of the canonical JSON of `made_of`)."""
    return stable_hash(json.dumps(made_of, sort_keys=True, default=str), 16)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differing_keys(old: dict[str, Any], new: dict[str, Any], limit: int = 6) -> list[str]:
    """The dotted keys whose values differ between two nested mappings (at most `limit`, then "..."), sorted."""
    a, b = _flat(old), _flat(new)
    keys = sorted(k for k in set(a) | set(b) if a.get(k, ...) != b.get(k, ...))
    return keys[:limit] + (["..."] if len(keys) > limit else [])


def claim_run_dir(path: str | os.PathLike[str], job: str, made_of: dict[str, Any], *,
                  products: tuple[str, ...] = (), key: str = "output_dir") -> bool:
    """Make sure the run directory `path` is this run's before anything is written there; True when it already
    holds this configuration's run (resume, or a no-op when finished), False when it was new.

    The one rule for a job's directory: RUN_FINGERPRINT records the run-dir schema (`RUN_DIR_SCHEMA`), the job and
    the fingerprint of what the run is made from (`made_of`: the validated config without where it is written and
    what is logged, the content fingerprints of its weights and inputs, ...). The same schema, job and fingerprint:
    resume. Anything else is refused in one line naming both fingerprints (and the keys that differ, or the schema
    the directory was made under): a resume would mix two runs, a rebuild would replace the other run's products. A
    directory without the file but holding one of `products` (the job's files) is a run of unknown origin (made
    before run directories were stamped), refused the same way. Call it holding the directory's `RunLock`, so that
    two runs cannot both find it new.
    """
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise RunDirError(f"{key}={d} is a file, not a directory; use another {key}")
    fp = fingerprint_of(made_of)
    stamp = d / RUN_FINGERPRINT
    fix = f"use another {key}, or delete {d} to rebuild it"
    if stamp.exists():
        old = read_json(stamp) or {}
        if old.get("schema") != RUN_DIR_SCHEMA:
            raise RunDirError(f"{key}={d} holds a {old.get('job')} run (fingerprint {old.get('fingerprint')}) of "
                              f"run-dir schema {old.get('schema')}, not {RUN_DIR_SCHEMA} (this {job} run: {fp}): made by "
                              f"another version of zcp; {fix}")
        if (old.get("job"), old.get("fingerprint")) == (job, fp):
            return True
        differ = differing_keys(old.get("made_of") or {}, made_of) if old.get("job") == job else ["job"]
        raise RunDirError(f"{key}={d} holds a {old.get('job')} run of another configuration (fingerprint "
                          f"{old.get('fingerprint')}; this {job} run: {fp}; differing: {', '.join(differ)}); {fix}")
    found = [p for p in products if (d / p).exists()]
    if found:
        raise RunDirError(f"{key}={d} holds {found[0]} but no {RUN_FINGERPRINT} (a run of unknown configuration; "
                          f"this {job} run: fingerprint {fp}); {fix}")
    write_json(stamp, {"schema": RUN_DIR_SCHEMA, "job": job, "fingerprint": fp, "made_of": made_of})
    return False


@contextlib.contextmanager
def claimed_run_dir(path: str | os.PathLike[str], job: str, made_of: dict[str, Any] | None, *,
                    products: tuple[str, ...] = (), key: str = "output_dir") -> Iterator[bool]:
    """Hold the run directory `path` for a job from before its model loads to its end, claimed for this run.

    Takes the directory's job lock (`RunLock(job=True)`: a second run on it is refused at once, naming the holder,
    and the library functions the job calls lock it again through this one), then, unless `made_of` is None (a lock
    alone), applies `claim_run_dir` (`products`, `key` as there); yields what that returns (True: it
    already holds this configuration's run). Why before the model loads: a refused run must not cost a model load,
    and a second run must not slip in while the first loads. A directory this made (it was not there) that the run
    leaves on an error before writing anything but the lock and the fingerprint is removed again, so a refusal
    after the model loaded (e.g. no prompt fits its context) still leaves nothing behind.
    """
    from zcp.core.io import RunLock

    d = Path(path)
    made = [p for p in (d, *d.parents) if not p.exists()]  # what taking the lock creates, deepest first
    with RunLock(d, job=True):
        try:
            yield claim_run_dir(d, job, made_of, products=products, key=key) if made_of is not None else False
        except BaseException:
            with contextlib.suppress(OSError):
                if made and {p.name for p in d.iterdir()} <= {".lock", RUN_FINGERPRINT}:
                    for name in (RUN_FINGERPRINT, ".lock"):
                        (d / name).unlink(missing_ok=True)
                    for p in made:
                        p.rmdir()  # stops (OSError) at the first that holds something else
            raise


# ------------------------------------------------------------------------------------------ a detection run dir
DETECTION_RECORDS = "records.jsonl"
DETECTION_META = "run_meta.json"
DETECTION_SUMMARY = "summary.json"
DETECTION_UNIT = ("split", "variant", "original_id", "draw")  # what locates a detection record


def detection_unit(rec: dict[str, Any]) -> tuple[str, str, str, int]:
    """The unit a detection record is of: (split, variant, original_id, draw)."""
    return (rec["split"], rec["variant"], rec["original_id"], int(rec["draw"]))


def detection_meta(det_dir: str | os.PathLike[str], fingerprint: str, what: str = "") -> dict[str, Any] | None:
    """The run_meta.json of the detection records in `det_dir` when they are of the plan `fingerprint` (the records'
    fingerprint: units, model, probe), None when there are none yet; RunDirError (one line) when they are of another
    plan, or records.jsonl is there without run_meta.json. The one check that records are this run's, for a run
    directory and a shard's alike (`what` names the caller in the message, e.g. "shard 1/2")."""
    d = Path(det_dir)
    meta_path = d / DETECTION_META
    if meta_path.exists():
        meta = read_json(meta_path) or {}
        if meta.get("fingerprint") != fingerprint:
            raise RunDirError(f"{d} holds records of another run (model, probe settings or items differ"
                              f"{f' from this {what}' if what else ''}); use a new output_dir")
        return meta
    if (d / DETECTION_RECORDS).exists():
        raise RunDirError(f"{d} holds {DETECTION_RECORDS} without {DETECTION_META}: its run is unknown; use a new "
                          "output_dir")
    return None


def detection_unfinished(det_dir: str | os.PathLike[str]) -> str | None:
    """Why `det_dir` is not a finished detection run (one line naming the dir and what is missing), or None.

    Finished: records.jsonl, run_meta.json and summary.json are there and the records hold every unit
    run_meta.json announces (`n_units`, distinct units). Why: the records of a killed run (cut midway, no
    summary) look like a smaller benchmark; whoever reads them (the zcp_* baselines, the ablations, the
    study report) must not mistake them for a finished detection.
    """
    d = Path(det_dir)
    if not d.is_dir():
        return f"detection run {d}: no such directory"
    names = (DETECTION_RECORDS, DETECTION_META, DETECTION_SUMMARY)
    missing = [name for name in names if not (d / name).exists()]
    if DETECTION_RECORDS in missing or DETECTION_META in missing:
        return f"detection run {d} is not finished: no {' and no '.join(missing)}"
    try:
        n_units = read_json(d / DETECTION_META).get("n_units")
        keys = {detection_unit(r) for r in RecordStore(d / DETECTION_RECORDS).read()}
    except (RunDirError, DataError, KeyError, TypeError, ValueError, AttributeError) as e:
        return f"detection run {d} is not finished: {' '.join(str(e).split())}"
    if not isinstance(n_units, int):
        missing.append(f"{DETECTION_META} announces no n_units")
    elif len(keys) < n_units:
        missing.append(f"{DETECTION_RECORDS} holds {len(keys)} of the {n_units} units {DETECTION_META} announces")
    if missing:
        return f"detection run {d} is not finished: " + ", ".join(
            f"no {m}" if m == DETECTION_SUMMARY else m for m in missing)
    return None


# ------------------------------------------------------------------------------------------ a contamination run dir
RUN_CONFIG = "run_config.json"
MANIFEST = "manifest.json"
BENCHMARK_ITEMS = "benchmark_items.jsonl"
EXPOSURE = "exposure.json"
MODEL = "model"
DETECT = "detect"  # the detection stage's dir: detect/FT__<key>/ and the files below
SIMULATION_SUMMARY = "simulation_summary.json"  # in detect/
BASELINES = "baselines"  # the baselines stage's dir
BASELINES_SUMMARY = "summary.json"  # in baselines/ (zcp.validate.baselines writes it)
FINE_TUNED_DETECTIONS = "FT*"  # detect/FT__<key>/: the detections of the fine-tuned model


class ContaminationRun:
    """A contamination run directory, read: its files' paths, its JSON records and its newest finished detection.

    Nothing is read on construction. `require(*names)` checks files are there (one-line ConfigError naming the
    dir and the first missing one); the JSON properties (`config`, `exposure`, `simulation_summary`) require
    their file and read it once (a cut file: RunDirError naming it). `key` is the config key messages name
    for the directory (run_dir for the jobs).
    """

    def __init__(self, path: str | os.PathLike[str], key: str = "run_dir") -> None:
        self.path = Path(path)
        self.key = key
        self._json: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"ContaminationRun({str(self.path)!r})"

    @property
    def name(self) -> str:
        """The run's name (its directory's)."""
        return self.path.name

    # ------------------------------------------------------------------------------ paths
    @property
    def config_path(self) -> Path:
        return self.path / RUN_CONFIG

    @property
    def manifest_path(self) -> Path:
        """manifest.json: the C/U split (`zcp.benchmarks.split.Manifest.load` parses it)."""
        return self.path / MANIFEST

    @property
    def items_path(self) -> Path:
        """benchmark_items.jsonl: the benchmark's items, format "items" (`zcp.benchmarks.loaders.load_items`)."""
        return self.path / BENCHMARK_ITEMS

    @property
    def exposure_path(self) -> Path:
        return self.path / EXPOSURE

    @property
    def model_path(self) -> Path:
        """model/: the fine-tuned (contaminated, or for a sham run merely fine-tuned) model."""
        return self.path / MODEL

    @property
    def detect_dir(self) -> Path:
        return self.path / DETECT

    @property
    def simulation_summary_path(self) -> Path:
        return self.path / DETECT / SIMULATION_SUMMARY

    @property
    def baselines_summary_path(self) -> Path:
        """baselines/summary.json: the simulation's baselines stage's summary."""
        return self.path / BASELINES / BASELINES_SUMMARY

    # ------------------------------------------------------------------------------ checks
    def missing(self, *names: str) -> list[str]:
        """Those of `names` (paths relative to the run dir, e.g. MODEL or "detect/simulation_summary.json")
        that are not there."""
        return [n for n in names if not (self.path / n).exists()]

    def has(self, *names: str) -> bool:
        """Whether every one of `names` is there."""
        return not self.missing(*names)

    def require(self, *names: str) -> ContaminationRun:
        """ConfigError (one line naming the dir and the first missing file) unless every one of `names` is
        there; returns the run, for chaining."""
        gone = self.missing(*names)
        if gone:
            raise ConfigError(f"{self.key}={self.path}: no {gone[0]} there (not a finished contamination run "
                              "directory)")
        return self

    # ------------------------------------------------------------------------------ records
    def _read(self, rel: str) -> Any:
        if rel not in self._json:
            self.require(rel)
            self._json[rel] = read_json(self.path / rel)
        return self._json[rel]

    @property
    def config(self) -> dict[str, Any]:
        """The plain config the run was made with (run_config.json's ``config``; {} when it holds none)."""
        return dict((self._read(RUN_CONFIG) or {}).get("config") or {})

    @property
    def exposure(self) -> dict[str, Any]:
        """exposure.json as written (every knob, the seeds, the ids by role, ``base_model``); the strict check
        of its schema is `zcp.simulate.contaminate.load_exposure`."""
        return self._read(EXPOSURE) or {}

    @property
    def simulation_summary(self) -> dict[str, Any]:
        """detect/simulation_summary.json: the detection stage's results per model (FT, base), DiD, Table 6."""
        return self._read(f"{DETECT}/{SIMULATION_SUMMARY}") or {}

    def newest_detection(self) -> tuple[Path | None, list[str]]:
        """The newest finished detect/FT*/ of the run, and why each newer one was passed over.

        The one lookup of "the run's detection" (run_baselines' zcp_* detectors, the ablations, the study
        report). Newest = latest modification of its records.jsonl or summary.json; finished =
        `detection_unfinished` says nothing. Returns (None, reasons) when no detection there is finished
        (reasons empty: there is none at all).
        """
        dirs = [p for p in self.detect_dir.glob(FINE_TUNED_DETECTIONS)
                if p.is_dir() and (p / DETECTION_RECORDS).exists()]

        def mtime(p: Path) -> float:
            return max((p / n).stat().st_mtime for n in (DETECTION_RECORDS, DETECTION_SUMMARY) if (p / n).exists())

        passed: list[str] = []
        for d in sorted(dirs, key=mtime, reverse=True):
            reason = detection_unfinished(d)
            if reason is None:
                return d, passed
            passed.append(reason)
        return None, passed


# ------------------------------------------------------------------------------------------ a sweep of contamination runs
STAGE_PRODUCTS = {"contaminate": EXPOSURE, "detect": f"{DETECT}/{SIMULATION_SUMMARY}",
                  "baselines": f"{BASELINES}/{BASELINES_SUMMARY}"}  # what each simulation stage writes last


def run_unfinished(path: str | os.PathLike[str]) -> str | None:
    """Why the contamination run dir `path` is not a finished run of a sweep (what is missing, e.g. "no
    exposure.json (its contaminate stage has not finished)"), or None: the one "finished" rule of every sweep
    collector (`sweep_runs`).

    Finished: run_config.json is there, the contamination and its detection have written their products
    (`STAGE_PRODUCTS`: exposure.json, detect/simulation_summary.json) and, when the run's config lists the
    baselines stage, so has that stage (baselines/summary.json). Each is written when its stage ends, so a killed
    or still running simulation is never read as a finished one."""
    run = ContaminationRun(path)
    if not run.path.is_dir():
        return "no such directory"
    if not run.has(RUN_CONFIG):
        return f"no {RUN_CONFIG} (not a contamination run)"
    try:
        stages = run.config.get("stages")
    except RunDirError as e:
        return " ".join(str(e).split())
    needed = ["contaminate", "detect"] + (["baselines"] if isinstance(stages, list) and "baselines" in stages else [])
    for stage in needed:
        if not run.has(STAGE_PRODUCTS[stage]):
            return f"no {STAGE_PRODUCTS[stage]} (its {stage} stage has not finished)"
    return None


def sweep_runs(root: str | os.PathLike[str] | None, pattern: str = "*__*",
               runs: tuple[str | os.PathLike[str], ...] | list[Any] = ()
               ) -> tuple[list[ContaminationRun], list[tuple[Path, str]]]:
    """The one collector of a sweep's contamination runs: `runs`, then every directory under `root` whose name
    matches `pattern` (sorted; none when `root` is None), each once. Returns the finished ones (`run_unfinished`)
    as `ContaminationRun`s, and every other one with why it was left out."""
    dirs = [Path(r) for r in runs]
    if root is not None:
        dirs += sorted(p for p in Path(root).glob(pattern) if p.is_dir())
    finished, left_out = [], []
    for d in dict.fromkeys(dirs):
        why = run_unfinished(d)
        if why is None:
            finished.append(ContaminationRun(d))
        else:
            left_out.append((d, why))
    return finished, left_out

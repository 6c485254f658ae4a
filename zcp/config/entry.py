"""Hydra's own errors at an entry point as the project's one line (exit 2), and a `-m` sweep validated at every
point before its first job starts.

Why here: `one_line_errors` wraps an entry's `main`, which Hydra calls only once the config is composed; a
misspelt key without `+` (`probe.zero_cot_prefx=x`), an option of a config group that does not exist
(`model=nosuch`) or an override Hydra cannot parse fail before, inside Hydra, which prints five lines and exits
1. And a multirun runs its points one after the other (the basic launcher) or as cluster jobs (submitit): a bad
value at the last point would be met only when that point's job starts, hours into a training sweep.
`guard_hydra_entry` (called by `one_line_errors` for an entry point's main) wraps Hydra's two calls that see
these: `run_and_report` (compose errors into one line) and `_run_hydra` (with `-m`, every point of the sweep
composed and validated against the job's schema first, the first bad point refused naming its overrides).

What only a job can find (a data file missing at one point) ends that job with its own one line; under the
submitit launchers the sweep process then gets submitit's UncompletedJobError, a traceback around the job's log.
`sweep_job_line` turns it into the job's line, naming the sweep point and the job's log (`run_and_report`).
"""

from __future__ import annotations

import inspect
import os
import pickle
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_GUARDED = False


def hydra_error_line(e: BaseException) -> str | None:
    """One line for a Hydra composition error a user made (an unknown key, a missing config group option, an
    override that does not parse), or None for anything else."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    from zcp.config.checks import unknown_key_message

    if isinstance(e, MissingConfigException):
        missing = str(e.missing_cfg_file or "")
        group, _, name = missing.rpartition("/")
        if group and e.options is not None:
            options = [o for o in e.options if o != "schema"]  # the typed defaults, no choice of their own
            return f"{group.replace('/', '.')}={name}: no such option of the config group {group}; choose from {options}"
        return " ".join(str(e).split("\n\n")[0].split())
    if isinstance(e, OverrideParseException):
        return f"an override Hydra cannot parse: {' '.join(str(e).splitlines()[0].split())}"
    if isinstance(e, ConfigCompositionException):
        cause = e.__cause__
        full_key = getattr(cause, "full_key", None)
        parent = getattr(cause, "parent_node", None)
        if full_key and parent is not None and "not in" in str(cause):
            where, _, key = str(full_key).rpartition(".")
            try:
                known = [k for k in parent if not (not where and k == "hydra")]
            except Exception:  # a node without keys: no did-you-mean
                known = []
            return unknown_key_message(where, key, known)
        head = " ".join(str(e).split())
        why = " ".join(str(cause).splitlines()[0].split()) if cause is not None and str(cause).strip() else ""
        return f"{head}: {why}" if why and why not in head else head
    return None


def sweep_job_line(e: BaseException) -> str | None:
    """One line for a sweep job that a submitit launcher (submitit_local, slurm) ran and that ended on the project's
    one-line error: `sweep point <n> (<the overrides the sweep varies>) failed: <the job's line> (log: <file>)`.
    None for anything else (a job that crashed keeps submitit's report, with the job's traceback).

    submitit's UncompletedJobError holds the job's result path and the tail of its log; the point is read from the
    job's submission (`<job>_submitted.pkl` beside it: the launcher's call with the point's overrides and number)."""
    if type(e).__name__ != "UncompletedJobError":
        return None
    text = str(e)
    lines = [line.strip()[len("error: "):] for line in text.splitlines() if line.strip().startswith("error: ")]
    if not lines:
        return None
    where = "a sweep job"
    log = re.search(r"Look at std(?:out|err): (\S+)", text)
    found = re.search(r"with path (\S+?)_\d+_result\.pkl", text)
    if found:
        job = Path(found.group(1))  # <submitit folder>/<job id>/<job id>
        points = {}
        for sub in sorted(job.parent.parent.glob("*/*_submitted.pkl")):
            try:
                with open(sub, "rb") as f:
                    args = pickle.load(f).args  # (overrides, job_dir_key, job_num, ...): the sweep's own file
                points[sub.parent.name] = (list(args[0]), int(args[2]))
            except Exception:  # an unreadable submission: the point stays unnamed
                continue
        if job.parent.name in points:
            overrides, num = points[job.parent.name]
            others = [o for o, _ in points.values()]
            swept = [o for o in overrides if any(o not in other for other in others)] or overrides
            where = f"sweep point {num + 1} of {len(points)} ({' '.join(swept)})"
    return f"{where} failed: {lines[-1]}" + (f" (log: {log.group(1)})" if log else "")


def _one_line_exit(line: str) -> None:
    print(f"error: {line}", file=sys.stderr)
    sys.exit(2)


def _sweep_points(overrides: list[str]) -> list[list[str]]:
    """Every point of a sweep (the basic sweeper's cartesian expansion, in its order)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [point for batch in BasicSweeper.split_arguments(parsed, None) for point in batch]


def validate_sweep(conf_dir: str | os.PathLike[str], config_name: str, overrides: list[str],
                   multirun: bool = True) -> None:
    """Compose every point of a multirun and validate it against the job's schema (`zcp.config.validate`, the job
    named as its config); the first bad point exits 2 with one line naming it. Runs before any job starts.

    The sweep is the command line's sweep overrides (`seed=0,1`) after the config's own `hydra.sweeper.params`
    (an experiment file's sweep, e.g. experiment=exposure_sweep), as the basic sweeper expands them; a config
    that sets `hydra.mode: MULTIRUN` is a multirun without `-m`. Any launcher: nothing is launched before."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from zcp.config import user_errors
    from zcp.config.jobs import JOBS
    from zcp.config.schemas import validate

    if GlobalHydra.instance().is_initialized():  # never the case at an entry point before Hydra runs
        return
    conf = str(Path(conf_dir).resolve())
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        fixed = [o.input_line for o in parsed if not o.is_sweep_override() and o.input_line]
        with initialize_config_dir(config_dir=conf, version_base=None):
            base = compose(config_name=config_name, overrides=fixed, return_hydra_config=True)
        mode = str(OmegaConf.select(base, "hydra.mode", default="") or "")
        node = OmegaConf.select(base, "hydra.sweeper.params", default=None)
        params = OmegaConf.to_container(node) if node is not None else {}
        if not (multirun or mode.endswith("MULTIRUN")):
            return
        points = _sweep_points([f"{k}={v}" for k, v in dict(params).items()] + overrides)
    except user_errors():
        return  # a value the job's own validation names, as a plain run would
    except Exception as e:  # Hydra's errors in one line; anything else left to Hydra itself
        line = hydra_error_line(e)
        if line is None:
            return
        _one_line_exit(line)
    if len(points) <= 1:
        return
    swept = [j for j in range(len(points[0])) if len({p[j] for p in points if len(p) > j}) > 1]
    for k, point in enumerate(points, 1):  # named by the overrides the sweep varies
        shown = [point[j] for j in swept if j < len(point)] or point
        where = f"sweep point {k} of {len(points)} ({' '.join(shown)})"
        try:
            with initialize_config_dir(config_dir=conf, version_base=None):
                cfg = compose(config_name=config_name, overrides=point)
            if config_name in JOBS:
                validate(cfg, job=config_name)
        except user_errors() as e:
            _one_line_exit(f"{where}: {' '.join(str(e).split())}")
        except Exception as e:  # Hydra's compose errors in one line; any other left to the job itself
            line = hydra_error_line(e)
            if line is not None:
                _one_line_exit(f"{where}: {line}")


def guard_hydra_entry() -> None:
    """Wrap Hydra's `run_and_report` (its compose errors, and a submitit sweep job's own one-line error, as one
    line, exit 2) and `_run_hydra` (a `-m` sweep validated at every point first) for this process: called by
    `one_line_errors` on an entry point's main.
    `HYDRA_FULL_ERROR=1` keeps Hydra's own report."""
    global _GUARDED
    if _GUARDED or os.environ.get("HYDRA_FULL_ERROR") == "1":
        return
    import hydra._internal.utils as hydra_utils

    main_module = sys.modules.get("hydra.main")
    original_report: Callable[[Any], Any] = hydra_utils.run_and_report
    original_run: Callable[..., Any] = hydra_utils._run_hydra

    def run_and_report(func: Any) -> Any:
        def guarded() -> Any:
            try:
                return func()
            except Exception as e:
                line = hydra_error_line(e) or sweep_job_line(e)
                if line is None:
                    raise
                _one_line_exit(line)

        return original_report(guarded)

    def run_hydra(*, args: Any, args_parser: Any, task_function: Any, config_path: str | None,
                  config_name: str | None) -> None:
        if config_path and config_name:  # a multirun (-m, or hydra.mode: MULTIRUN in the config): every point first
            source = Path(inspect.getfile(inspect.unwrap(task_function))).parent
            validate_sweep(source / config_path, config_name, list(args.overrides or []),
                           multirun=bool(getattr(args, "multirun", False)))
        return original_run(args=args, args_parser=args_parser, task_function=task_function,
                            config_path=config_path, config_name=config_name)

    hydra_utils.run_and_report = run_and_report
    if main_module is not None and getattr(main_module, "_run_hydra", None) is original_run:
        main_module._run_hydra = run_hydra  # hydra.main calls it by the name it imported
    _GUARDED = True

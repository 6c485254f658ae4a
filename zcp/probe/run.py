"""The detect job (evaluate/run_detect.py): data and model from the validated config, ZCP, reports, W&B.

Above zcp.probe.detect (the probe and its statistics on loaded datasets) and zcp.probe.did (the base model's
second verdict): this module wires them to a config and a run dir, so neither of them imports the other's job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcp.probe.conventions import is_single_default
from zcp.probe.datasets import load_datasets
from zcp.probe.detect import (
    META,
    RECORDS,
    SUMMARY,
    TABLE,
    DetectDataset,
    DetectSettings,
    check_backend_metrics,
    probe_config,
)
from zcp.probe.multiconv import (
    CONV_PREFIX,
    convention_probe,
    detect_prefill,
    did_conventions,
    is_multi,
    listed_conventions,
    without_default_prefill,
)
from zcp.probe.prompts import ProbeConfig
from zcp.probe.shard import merge_shards, probe_shard, shard_dir, source_made_of, without_shard

# a detection run's results in its directory: one of them there (or a multi-convention run's conv-<name>/) without a
# run_fingerprint.json is a run of unknown configuration, refused (zcp.core.rundir.claim_run_dir). Not config.yaml
# alone, nor shards/: the shards of one run write them unlocked, each checked by its shard.json (zcp.probe.shard)
PRODUCTS = (RECORDS, SUMMARY, TABLE, META)


SHARE_LOCK = ".share.lock"  # the queue lock of a detection directory several jobs share (`DetectionRun.queue`)


@dataclass
class DetectionRun:
    """One detection run, resolved: what the detect job (`run_detect`) and the simulation's detection stage
    (zcp.simulate.pipeline) each build from their validated config and hand to `run_detection`.

    `model`: the audited model's engine config (a `model` node or a `zcp.config.model.ModelConfig`, as
    `zcp.backends.registry.build_backend` takes it). `out`: the run directory, or a function of the loaded backend
    that names it (the simulation keys its runs by the weights' fingerprint the backend reads). `prefill`, `auto`,
    `primary`: `probe.prefill` and its settings (zcp.probe.multiconv.detect_prefill); `conventions`: resolved
    conventions that replace what `prefill` names (the simulation's base model gets the fine-tuned model's). `base`:
    the base model's engine config for the difference-in-differences in `<out>/base/` (zcp.probe.did; None: no DiD).
    `queue`: for a directory several jobs share, how long to wait for another job's queue lock (`SHARE_LOCK`)
    before detect's own lock; None: no queue (a second job on the directory is refused). `extra`, `title`,
    `on_ready`: as zcp.probe.detect.detect takes them.
    """

    model: Any
    datasets: Sequence[DetectDataset]
    probe: ProbeConfig
    settings: DetectSettings
    out: Path | Callable[[Any], Path]
    title: str
    prefill: Any = "probe"
    auto: Any = None
    primary: str | None = None
    conventions: Sequence[Any] | None = None
    base: Any = None
    queue: float | None = None
    extra: dict[str, Any] | None = None
    on_ready: Callable[[], Any] | None = None


def prefill_probe(probe: ProbeConfig, prefill: Any) -> tuple[ProbeConfig, dict[str, Any]]:
    """The probe one run reads its answers with, and what its summary says of it: for one convention other than
    the probe's line, that convention's probe and {prefill, convention}; else `probe` itself and nothing (the default,
    and several conventions, each probed in its own directory)."""
    if is_single_default(prefill) or is_multi(prefill):
        return probe, {}
    (conv,) = listed_conventions(prefill, probe) or ()
    return convention_probe(probe, conv), {"prefill": prefill, "convention": conv.to_dict()}


def run_detection(run: DetectionRun, tracker: Any = None) -> tuple[dict[str, Any], Path]:
    """The one detection job: load the model, probe every unit (resumable), test, report; then, with `run.base`,
    the base model on the same units and the difference-in-differences. Returns the summary and the run directory.

    Both detection entries call it: evaluate/run_detect.py (`run_detect`, which claims the directory first) and the
    simulation's detection stage (once per model). The pre-fills follow `probe.prefill`
    (zcp.probe.multiconv.detect_prefill: the default run, one other convention, or a run per convention with one
    verdict over them)."""
    from zcp.backends.registry import build_backend
    from zcp.core.io import RunLock
    from zcp.probe.did import detect_did, free_memory

    backend = build_backend(run.model)
    used, _ = prefill_probe(run.probe, run.prefill)
    check_backend_metrics(backend, used)
    out = Path(run.out(backend) if callable(run.out) else run.out)
    queue = RunLock(out, wait=run.queue, name=SHARE_LOCK) if run.queue is not None else contextlib.nullcontext()
    with queue:
        summary = detect_prefill(backend, run.datasets, run.probe, out, run.settings, run.prefill, run.auto,
                                 conventions=run.conventions, primary=run.primary, tracker=tracker, extra=run.extra,
                                 title=run.title, on_ready=run.on_ready)
    if run.base is not None:  # the base model on the same units, into <out>/base/, then <out>/did.md
        del backend  # the audited model leaves memory before the base model loads
        free_memory()
        summary = (did_conventions(run.base, run.datasets, run.probe, out, run.settings, summary, tracker)
                   if is_multi(run.prefill) else
                   detect_did(run.base, run.datasets, used, out, run.settings, summary, tracker))
    return summary, out


def run_detect(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_detect.py: data + model from config, detection, reports, W&B.

    With `base_model.path` the base model is probed on the same units into `<out>/base/` and the
    difference-in-differences is written to `<out>/did.md` and summary.json's `did` block (zcp.probe.did).
    With `run.shard=i/n` only shard i's units are probed, into `<out>/shards/<i>-of-<n>/`, and nothing is tested;
    `run.shard=merge` (no model loaded) gathers the n finished shards into the outputs above (zcp.probe.shard).
    `probe.prefill`: the answer conventions pre-filled (zcp.probe.multiconv): the default `probe` is the run above;
    one other convention is the same run with its pre-fill; several (or `auto`) a run per convention in
    `<out>/conv-<name>/` and the one verdict over all of them in `<out>/` (with `base_model.path`, a DiD per
    convention and one verdict over them); not sharded.
    """
    from zcp.backends.registry import build_backend
    from zcp.config import run_dir, save_config, to_dict, validate
    from zcp.config.model import check_model_files
    from zcp.core.io import model_fingerprint, seed_everything
    from zcp.core.rundir import check_run_dir_usable, claimed_run_dir, fingerprint_of
    from zcp.core.tracking import Tracker
    from zcp.errors import ConfigError

    # every key typed and in range before anything is read or loaded; the job reads the checked DetectJob, whose
    # dataclasses hold the defaults (the raw cfg only names and hashes the run dir, and is saved as config.yaml)
    job = validate(cfg, job="detect")["__job__"]
    seeds = [job.seed] if job.seeds is None else list(job.seeds)  # DetectJob.seeds: null = [seed]
    seed_everything(job.seed)
    from zcp.backends.registry import check_paths
    from zcp.probe.did import DID_MD, base_model_config, base_weights

    mc = job.model
    check_paths(mc)  # before anything is read or loaded
    if mc.backend != "openai":  # the folders' files too (config.json, weights, tokenizer): one line, not a traceback
        check_model_files(mc.path, "model.path")
        if mc.adapter:
            check_model_files(mc.adapter, "model.adapter")
    base_mc = base_model_config(job.base_model, mc)  # base_model.path: checked here too; None: no DiD
    local = mc.backend != "openai"  # a served model has no local weights to fingerprint
    weights = {"model": model_fingerprint(mc.path) if local else None,
               "adapter": model_fingerprint(mc.adapter) if local else None, **base_weights(base_mc)}
    # run.shard is no part of the run: every shard, the merge and one process of the command share one directory;
    # nor are probe.prefill / probe.auto where they change no record (a default run keeps its directory)
    plain = run_dir_config(cfg)
    out = run_dir(plain, "detect", job.data.name, mc.display_name(), extra=weights)
    check_run_dir_usable(out)  # a file, a symlink loop or a directory another run holds: refused before any load
    settings = DetectSettings(seeds=seeds, bootstrap_samples=job.stats.bootstrap_samples, alpha=job.stats.alpha,
                              test=job.stats.test, reference_draws=job.stats.reference_draws,
                              void_malformed=job.stats.void_malformed, chunk_size=job.run.chunk_size,
                              progress=job.run.progress,
                              chunk_seconds=job.run.chunk_seconds, chunk_first=job.run.chunk_first,
                              on_overflow=job.data.on_overflow)
    probe = probe_config(cfg.probe, cfg.model)
    datasets, skipped = load_datasets(job.data)
    extra = {"skipped_rows": [x for x in skipped if "warning" not in x],
             "data_warnings": [x for x in skipped if "warning" in x], "output_dir": str(out)}
    title = f"ZCP on {job.data.name} — {mc.display_name()}"
    sharded = job.run.shard is not None
    prefill, multi = job.probe.prefill, is_multi(job.probe.prefill)  # the answer conventions (zcp.probe.multiconv)
    if multi and sharded:
        raise ConfigError(f"run.shard={job.run.shard} with probe.prefill={prefill!r}: a multi-convention run is not "
                          "sharded; shard one convention's run at a time (probe.prefill=<name>)")
    used, chosen = prefill_probe(probe, prefill)  # one other pre-fill: the plain run, with that convention's probe
    made_of = source_made_of(plain, weights)  # what the records are made from: the directory's fingerprint
    source = fingerprint_of(made_of) if sharded else ""
    saved = without_shard(cfg, keep_null=True)  # a shard's and the merge's config.yaml: the one-process one

    def claimed() -> Any:  # the run dir, locked and claimed for this configuration (zcp.core.rundir: the one rule)
        convs = tuple(p.name for p in out.glob(f"{CONV_PREFIX}*")) if out.is_dir() else ()
        return claimed_run_dir(out, "detect", made_of, products=PRODUCTS + convs)

    if sharded and job.run.shard_spec is None:  # run.shard=merge: the statistics and reports, once
        with claimed(), Tracker(job.logger, run_config=to_dict(saved), run_dir=str(out), job_type="detect") as tracker:
            summary = merge_shards(datasets, used, out, settings, source=source, tracker=tracker,
                                   extra={**extra, **chosen}, title=title, on_ready=lambda: save_config(saved, out))
            files = [str(out / SUMMARY), str(out / TABLE), str(out / "config.yaml")]
            tracker.artifact("detect-results", "zcp-detect", files + ([str(out / RECORDS)] if job.logger.log_records
                                                                       else []))
        print((out / TABLE).read_text())
        print(f"wrote {out}")
        return summary
    if sharded:  # run.shard=i/n: this shard's units only, no test, no tracker run (the merge makes the one run)
        # held from before the model loads: its own shard's dir (the n shards of one run share `out`)
        with claimed_run_dir(shard_dir(out, *job.run.shard_spec), "detect", None):
            backend = build_backend(cfg.model)
            check_backend_metrics(backend, used)
            meta = probe_shard(backend, datasets, used, out, settings, job.run.shard_spec, source=source,
                               on_ready=lambda: save_config(saved, out))
        print(f"wrote shard {job.run.shard} of {out}: {meta['n_units']} of {meta['n_units_total']} units; once "
              "every shard has finished, run the same command with run.shard=merge")
        return meta
    run = DetectionRun(model=cfg.model, datasets=datasets, probe=probe, settings=settings, out=out, title=title,
                       prefill=prefill, auto=job.probe.auto, primary=job.probe.primary, base=base_mc, extra=extra,
                       on_ready=lambda: save_config(cfg, out))
    # the directory is held and claimed from before the model loads: a second run on it is refused without loading one
    with claimed(), Tracker(job.logger, run_config=to_dict(cfg), run_dir=str(out), job_type="detect") as tracker:
        summary, _ = run_detection(run, tracker)
        files = [str(out / SUMMARY), str(out / TABLE), str(out / "config.yaml")]
        if base_mc is not None:
            files += [str(out / DID_MD)] + ([] if multi else [str(out / "base" / SUMMARY), str(out / "base" / TABLE)])
        if job.logger.log_records:
            files.append(str(out / RECORDS))
        tracker.artifact("detect-results", "zcp-detect", files)
    print((out / TABLE).read_text())
    if base_mc is not None:
        print((out / DID_MD).read_text())
    print(f"wrote {out}")
    return summary


def run_dir_config(cfg: Any) -> Any:
    """`cfg` as it names and claims the run directory: without `run.shard`, and without the keys at defaults that
    change no record (`without_default_prefill`, `without_null_base`)."""
    from zcp.probe.did import without_null_base

    return without_default_prefill(without_shard(without_null_base(cfg)))

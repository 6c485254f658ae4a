"""The detect job (evaluate/run_detect.py): data and model from the validated config, ZCP, reports, W&B.

Above zcp.probe.detect (the probe and its statistics on loaded datasets) and zcp.probe.did (the base model's
second verdict): this module wires them to a config and a run dir, so neither of them imports the other's job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zcp.probe.conventions import is_single_default
from zcp.probe.datasets import load_datasets
from zcp.probe.detect import (
    META,
    RECORDS,
    SUMMARY,
    TABLE,
    DetectSettings,
    check_backend_metrics,
    detect,
    probe_config,
)
from zcp.probe.multiconv import (
    CONV_PREFIX,
    convention_probe,
    detect_conventions,
    did_conventions,
    is_multi,
    listed_conventions,
    without_default_prefill,
)
from zcp.probe.shard import merge_shards, probe_shard, shard_dir, source_made_of, without_shard

# a detection run's results in its directory: one of them there (or a multi-convention run's conv-<name>/) without a
# run_fingerprint.json is a run of unknown configuration (zcp.core.rundir.claim_run_dir), resumed only when its
# config.yaml is this run's. Not config.yaml alone, nor shards/: the shards of one run write them unlocked, each
# checked by its own rule (zcp.probe.shard: shard.json's source)
PRODUCTS = (RECORDS, SUMMARY, TABLE, META)


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
    from zcp.probe.did import (
        DID_MD,
        base_model_config,
        base_weights,
        detect_did,
        free_memory,
    )

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
    if not is_single_default(prefill) and not multi:  # one other pre-fill: the plain run, with that convention's probe
        (conv,) = listed_conventions(prefill, probe) or ()
        probe = convention_probe(probe, conv)
        extra.update(prefill=prefill, convention=conv.to_dict())
    made_of = source_made_of(plain, weights)  # what the records are made from: the directory's fingerprint
    source = fingerprint_of(made_of) if sharded else ""
    saved = without_shard(cfg, keep_null=True)  # a shard's and the merge's config.yaml: the one-process one

    def claimed() -> Any:  # the run dir, locked and claimed for this configuration (zcp.core.rundir: the one rule)
        convs = tuple(p.name for p in out.glob(f"{CONV_PREFIX}*")) if out.is_dir() else ()
        return claimed_run_dir(out, "detect", made_of, products=PRODUCTS + convs,
                               adopt=lambda d: _config_file_made_of(d, weights) == made_of)

    if sharded and job.run.shard_spec is None:  # run.shard=merge: the statistics and reports, once
        with claimed(), Tracker(job.logger, run_config=to_dict(saved), run_dir=str(out), job_type="detect") as tracker:
            summary = merge_shards(datasets, probe, out, settings, source=source, tracker=tracker, extra=extra,
                                   title=title, on_ready=lambda: save_config(saved, out))
            files = [str(out / SUMMARY), str(out / TABLE), str(out / "config.yaml")]
            tracker.artifact("detect-results", "zcp-detect", files + ([str(out / RECORDS)] if job.logger.log_records
                                                                       else []))
        print((out / TABLE).read_text())
        print(f"wrote {out}")
        return summary
    # the directory is held from before the model loads (a second run on it is refused without loading one): a shard
    # its own shard's (the n shards of one run share `out`), any other run `out`, claimed for this configuration
    with claimed_run_dir(shard_dir(out, *job.run.shard_spec), "detect", None) if sharded else claimed():
        backend = build_backend(cfg.model)
        check_backend_metrics(backend, probe)
        if sharded:  # run.shard=i/n: this shard's units only, no test, no tracker run (the merge makes the one run)
            meta = probe_shard(backend, datasets, probe, out, settings, job.run.shard_spec, source=source,
                               on_ready=lambda: save_config(saved, out))
            print(f"wrote shard {job.run.shard} of {out}: {meta['n_units']} of {meta['n_units_total']} units; once "
                  "every shard has finished, run the same command with run.shard=merge")
            return meta
        with Tracker(job.logger, run_config=to_dict(cfg), run_dir=str(out), job_type="detect") as tracker:
            if multi:  # each convention in <out>/conv-<name>/, the combined verdict in <out>/
                summary = detect_conventions(backend, datasets, probe, out, settings,
                                             listed_conventions(prefill, probe), job.probe.auto, prefill=prefill,
                                             tracker=tracker, extra=extra, title=title,
                                             on_ready=lambda: save_config(cfg, out), primary=job.probe.primary)
            else:
                summary = detect(backend, datasets, probe, out, settings, tracker=tracker, extra=extra, title=title,
                                 on_ready=lambda: save_config(cfg, out))
            if base_mc is not None:  # the base model on the same units, into <out>/base/, then <out>/did.md
                del backend  # the audited model leaves memory before the base model loads
                free_memory()
                summary = (did_conventions(base_mc, datasets, probe, out, settings, summary, tracker) if multi else
                           detect_did(base_mc, datasets, probe, out, settings, summary, tracker))
            files = [str(out / SUMMARY), str(out / TABLE), str(out / "config.yaml")]
            if base_mc is not None:
                files += [str(out / DID_MD)] + ([] if multi else [str(out / "base" / SUMMARY),
                                                                   str(out / "base" / TABLE)])
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


def _config_file_made_of(out: Path, weights: dict[str, Any]) -> dict[str, Any] | None:
    """What the run whose config.yaml is in `out` is made from (`source_made_of`, with this run's `weights`: the file
    does not hold them), or None without a readable config.yaml: how a directory made before run directories had a
    fingerprint is recognised as this configuration's."""
    from omegaconf import OmegaConf

    path = out / "config.yaml"
    try:
        return source_made_of(run_dir_config(OmegaConf.load(path)), weights) if path.is_file() else None
    except Exception:
        return None

"""ZCP detection run: probe every item (original, reference, paraphrased variants), resumably, then
test, calibrate, combine, and write records.jsonl, summary.json, table.md, a plot and W&B logs.

Item pairing: a variant row and a reference row belong to the original item they name; per original
item the scores of its rows are averaged (m reference draws, k paraphrases), and the test compares
the per-item averages. Records are appended chunk by chunk, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zcp.backends.base import Backend
from zcp.benchmarks.data_config import DataConfig
from zcp.config.groups import RunConfig
from zcp.core.io import RunLock, stable_hash, write_json
from zcp.core.items import Item
from zcp.core.records import RecordStore
from zcp.core.rundir import DETECTION_META, DETECTION_RECORDS, DETECTION_SUMMARY, detection_meta
from zcp.core.rundir import detection_unit as _key
from zcp.errors import DataError, RunDirError
from zcp.probe import normalised  # noqa: F401 - registers p_first_norm / p_all_norm before configs are validated
from zcp.probe.control import CONTROL, compare_with_control, control_markdown
from zcp.probe.cost import PassTimer, format_seconds, measured, plan_cost
from zcp.probe.metrics import get_metric, metric_names, metric_value, needing
from zcp.probe.planned import planned_fields, unit_mismatch
from zcp.probe.probe_config import StatsConfig
from zcp.probe.prompts import ProbeConfig, position_parts, probe_items, prompt_rendering
from zcp.probe.stats import TestResult, c_cont, paired_test, pooled_mc_pvalue
from zcp.probe.void import combine_valid, mark_void

log = logging.getLogger(__name__)

REFERENCE = "reference"
ORIGINAL = "original"
RECORDS, SUMMARY, META = DETECTION_RECORDS, DETECTION_SUMMARY, DETECTION_META  # its files, named in zcp.core.rundir
TABLE = "table.md"
PLOT = "c_cont.png"
UNIT_FIELDS = ("id", "split", "variant", "original_id", "draw")  # what locates a record; the rest is its probe result
# Above this zero-CoT (or, for con, full-CoT) malformed rate of a split's rows, the metrics reading that answer
# (acc/con: `ProbeMetric.needs_generation` / `needs_full_cot`) are flagged as void:
# a malformed answer scores as wrong on every version of an item, so once most answers are malformed most
# (original, reference) pairs are (0, 0) by construction, the test has almost no power, and "no evidence"
# describes the answer format, not the model's exposure. Half is where that becomes the majority.
MALFORMED_WARN_RATE = 0.5


@dataclass
class DetectDataset:
    """One benchmark (or one split of it, e.g. C or U) with its reference set and optional variants."""

    split: str
    originals: list[Item]
    reference: dict[str, list[Item]]
    variants: dict[str, dict[str, list[Item]]] = field(default_factory=dict)
    # ids of items selected from the data but left out for lack of a reference row (data.missing_reference=skip)
    without_reference: list[str] = field(default_factory=list)

    @property
    def n_selected(self) -> int:
        """Items selected from the data (data.limit / data.sample) before any was left out."""
        return len(self.originals) + len(self.without_reference)

    def work(self) -> list[tuple[tuple[str, str, str, int], Item]]:
        """All (key, item) units to probe; key = (split, variant, original_id, draw)."""
        units = [((self.split, ORIGINAL, it.id, 0), it) for it in self.originals]
        groups = {REFERENCE: self.reference, **self.variants}
        for variant, by_orig in groups.items():
            for it in self.originals:
                for j, row in enumerate(by_orig.get(it.id, [])):
                    units.append(((self.split, variant, it.id, j), row))
        return units


@dataclass
class DetectSettings:
    """Statistics and run-time settings of a detection run.

    The verdict is one test per (dataset, variant, metric) over ALL reference draws. `seeds` only vary
    the Monte Carlo stream (continuous metrics; their streams are pooled into one p) and, with
    `reference_draws="per_seed"`, which share of the draws the per-seed stability display uses; seeds are
    never separate tests of which any one may fire.
    """

    # the defaults are the config groups' (stats, run, data.on_overflow): defined once, in the schemas
    seeds: Sequence[int] = (0,)
    bootstrap_samples: int = StatsConfig.bootstrap_samples  # B: Monte Carlo relabellings or bootstrap samples, per seed
    alpha: float = StatsConfig.alpha
    test: str = StatsConfig.test  # permutation | bootstrap (the paper's paired bootstrap, for fidelity)
    reference_draws: str = StatsConfig.reference_draws  # stability display per seed: all | per_seed (j mod n_seeds = k)
    chunk_size: int = RunConfig.chunk_size
    progress: bool = RunConfig.progress
    chunk_seconds: float = RunConfig.chunk_seconds  # default chunking: seconds of work per chunk (zcp.probe.cost)
    chunk_first: int = RunConfig.chunk_first  # default chunking: units of the first, timed chunk
    on_overflow: str = DataConfig.on_overflow  # a prompt longer than the model's context: error | skip | truncate
    overflow_key: str = "data.on_overflow"  # the config key messages name for on_overflow (the caller's own)
    void_malformed: float = StatsConfig.void_malformed  # a malformed rate above it voids a metric (zcp.probe.void)

    def __post_init__(self) -> None:
        # the same checks as the typed config groups (zcp.config.schemas), for callers that build settings directly
        from zcp.benchmarks.data_config import OVERFLOW_POLICIES
        from zcp.config.schemas import RunConfig, check_seeds, check_value
        from zcp.probe.probe_config import StatsConfig

        self.seeds = tuple(int(s) for s in self.seeds)
        check_seeds(self.seeds, "seeds")
        StatsConfig(test=self.test, bootstrap_samples=int(self.bootstrap_samples), alpha=float(self.alpha),
                    reference_draws=self.reference_draws, void_malformed=float(self.void_malformed))
        RunConfig(chunk_size=int(self.chunk_size), progress=bool(self.progress), chunk_seconds=self.chunk_seconds,
                  chunk_first=int(self.chunk_first))
        check_value(self.on_overflow in OVERFLOW_POLICIES, "data.on_overflow", self.on_overflow,
               f"one of {list(OVERFLOW_POLICIES)}")


def _fingerprint(units: list[tuple[tuple, Item]], backend: Backend, probe: ProbeConfig) -> str:
    # probe.answer_space at its default (exact) is left out: runs from before the key keep their fingerprint
    fields = {k: v for k, v in probe.__dict__.items() if not (k == "answer_space" and v == "exact")}
    h = [backend.name, backend.fingerprint, repr(fields)]
    h += [f"{k}|{it.question}|{it.answer}" for k, it in units]
    return stable_hash("\n".join(map(str, h)), 32)


def _spent(part: dict[str, Any]) -> str:
    """What one probe's positions are spent on, as a message says it (from `zcp.probe.prompts.position_parts`)."""
    if part["needed_by"] == "full-CoT":
        return (f"{part['full_cot_prompt']} full-CoT prompt tokens + probe.full_cot_max_tokens="
                f"{part['full_cot_budget']} (the full-CoT generation con compares against)")
    tail = part["zero_cot_tail_key"] or "nothing"
    tail = f"{part['zero_cot_tail']} {tail} tokens" if tail == "the scored answer" else tail
    return f"{part['zero_cot_prompt']} zero-CoT prompt tokens + {tail}"


def _overflow_advice(parts: list[dict[str, Any]], over: list[int], limit: int, key: str | None) -> str:
    """The keys that lower what the overflowing probes need, with the values that would fit every prompt;
    with `key` (the overflow policy's config key) also its skip and truncate values."""
    advice = []
    if any(parts[k]["needed_by"] == "full-CoT" for k in over):
        room = limit - max(p["full_cot_prompt"] for p in parts)
        advice.append(f"probe.full_cot_max_tokens={room} or less" if room > 0 else
                      "a shorter full-CoT prompt (the longest alone fills the context)")
        advice.append("probe.metrics without con (no full-CoT generation)")
    zero_over = [k for k in over if parts[k]["zero_cot_prompt"] + parts[k]["zero_cot_tail"] > limit]
    if any(parts[k]["zero_cot_tail_key"].startswith("probe.zero_cot_max_tokens") for k in zero_over):
        room = limit - max(p["zero_cot_prompt"] for p in parts)
        if room > 0:
            advice.append(f"probe.zero_cot_max_tokens={room} or less")
    if key:
        advice.append(f"{key}=skip (leave them out) or {key}=truncate (cut the start of every version of an item's "
                      "question by the same number of characters)")
    return "set " + ", or ".join(advice)


def _cut(it: Item, chars: int) -> Item:
    """The item with the first `chars` characters of its question replaced by "…" (chars = 0: unchanged)."""
    if not chars:
        return it
    return Item(it.id, "…" + it.question[chars:], it.answer, it.solution, {**it.metadata, "truncated_chars": chars})


def _truncate_fairly(units: list[tuple[tuple[str, str, str, int], Item]], over: list[int], backend: Backend,
                     probe: ProbeConfig, limit: int, report: list[dict[str, Any]], key: str,
                     parts: list[dict[str, Any]]) -> list[tuple[tuple[str, str, str, int], Item]]:
    """Cut every version of an item that has an overflowing version by one common number of leading characters.

    Rule: all versions of one original item (the original, its reference rows, its variants) lose the same
    number c of leading characters of their question ("…" marks the cut), c being the smallest that makes
    every one of them fit: the largest of the cuts the versions need on their own, raised until all fit.
    Versions that fitted uncut are cut too. Cutting each version only as much as it needs would remove more
    context from the longer versions than from the shorter (on GSM8K up to 361 characters between an
    original and its references at 128 positions): a difference between the versions that the test would
    read as a difference in the model's knowledge. An item is refused (DataError) when c would remove the
    whole question of one of its versions, or when a version needs more positions than the model has even
    with its whole question cut (the budgets alone fill the context); `parts` (`position_parts` of the
    units) give the message's advice.
    """
    def need(it: Item) -> dict[str, Any]:
        (part,) = position_parts(backend, [it], probe) or [{"needed": 0, "needed_by": "zero-CoT"}]
        return part

    def fits(it: Item, chars: int) -> bool:
        return need(_cut(it, chars))["needed"] <= limit

    def min_cut(it: Item, lo: int) -> int:
        """The smallest cut above `lo` that fits (binary search; the fit is checked again by the caller)."""
        hi = len(it.question)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if fits(it, mid):
                hi = mid
            else:
                lo = mid
        return hi

    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for k, (unit_key, _) in enumerate(units):
        groups[(unit_key[0], unit_key[2])].append(k)
    over_set = set(over)
    for k in over:  # the budgets alone may fill the context: no cut of the question can help
        unit_key, it = units[k]
        bare = need(_cut(it, len(it.question)))
        if bare["needed"] > limit:
            raise DataError(f"{key}=truncate cannot fit item {unit_key[2]} ({unit_key[1]}): even with its whole "
                            f"question cut the probe needs {bare['needed']} positions of the model's {limit} "
                            f"({_spent(bare)}); {_overflow_advice(parts, over, limit, None)}")
    out = list(units)
    extra: list[dict[str, Any]] = []
    by_unit = {k: r for k, r in zip(over, report, strict=True)}
    for (split, oid), members in groups.items():
        if not over_set.intersection(members):
            continue
        chars = 0
        while True:
            bad = [k for k in members if not fits(units[k][1], chars)]
            if not bad:
                break
            chars = max(min_cut(units[k][1], chars) for k in bad)
            short = [k for k in members if chars >= len(units[k][1].question)]
            if short:
                k = short[0]
                raise DataError(f"{key}=truncate cannot fit item {oid} fairly: its versions need their first {chars} "
                                f"characters cut, the whole question of its {units[k][0][1]} row "
                                f"{units[k][1].id!r}; lower probe.*_max_tokens or set {key}=skip")
        for k in members:
            unit_key, it = units[k]
            out[k] = (unit_key, _cut(it, chars))
            if k in by_unit:
                by_unit[k]["action"] = f"truncated {chars} characters"
            else:
                extra.append({"split": split, "variant": unit_key[1], "original_id": oid, "draw": unit_key[3],
                              "positions_needed": need(it)["needed"], "context_length": limit,
                              "action": f"truncated {chars} characters (as the other versions of its item)"})
    report.extend(extra)
    return out


def fit_context(units: list[tuple[tuple[str, str, str, int], Item]], backend: Backend, probe: ProbeConfig,
                policy: str, key: str = "data.on_overflow"
                ) -> tuple[list[tuple[tuple[str, str, str, int], Item]], list[dict[str, Any]]]:
    """Apply the context-overflow policy to the units; returns the units to probe and what was done.

    A unit overflows when its probe needs more positions than the model has (`probe.position_parts`: the
    prompt's tokens plus the zero-CoT budget or scored answer, and with con the full-CoT prompt plus
    probe.full_cot_max_tokens). error: refuse before anything is probed, saying what the positions are
    spent on and which keys lower it (`key` is the caller's name for the policy); skip: leave out the
    overflowing rows, and the whole item when its original overflows; truncate: cut the start of the
    question of every version of the item by the same number of characters (`_truncate_fairly`), recorded
    per unit.
    """
    limit = backend.context_length
    parts = position_parts(backend, [it for _, it in units], probe) if limit else None
    if not parts:
        return units, []
    over = [k for k, p in enumerate(parts) if p["needed"] > limit]
    if not over:
        return units, []
    report = [{"split": units[k][0][0], "variant": units[k][0][1], "original_id": units[k][0][2],
               "draw": units[k][0][3], "positions_needed": parts[k]["needed"], "context_length": limit} for k in over]
    if policy == "error":
        first = over[0]
        raise DataError(f"{len(over)} of {len(units)} probe prompts need more positions than the model's {limit} "
                        f"(e.g. item {units[first][0][2]} ({units[first][0][1]}) needs {parts[first]['needed']}: "
                        f"{_spent(parts[first])}); {_overflow_advice(parts, over, limit, key)}")
    if policy == "skip":
        dropped_items = {(units[k][0][0], units[k][0][2]) for k in over if units[k][0][1] == ORIGINAL}
        bad = set(over)
        kept = [u for k, u in enumerate(units) if k not in bad and (u[0][0], u[0][2]) not in dropped_items]
        for r in report:
            r["action"] = "skipped item" if (r["split"], r["original_id"]) in dropped_items else "skipped row"
        return kept, report
    return _truncate_fairly(units, over, backend, probe, limit, report, key, parts), report


def plan_units(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, settings: DetectSettings
               ) -> tuple[list[tuple[tuple[str, str, str, int], Item]], list[dict[str, Any]]]:
    """Every unit the datasets ask for, fitted to the model's context (`fit_context`); writes nothing."""
    units = [u for ds in datasets for u in ds.work()]
    keys = [k for k, _ in units]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate (split, variant, original_id, draw) units: split names must be unique")
    return fit_context(units, backend, probe, settings.on_overflow, settings.overflow_key)


def coverage(datasets: Sequence[DetectDataset], units: Sequence[tuple[tuple[str, str, str, int], Item]]
             ) -> list[dict[str, Any]]:
    """Per dataset: items selected, items left out and why, and `n_tested` (the items the test compares).

    An item is tested when its original and at least one reference row are probed; it is left out when
    the data has no reference row for it (data.missing_reference=skip), when its original is too long for
    the model's context (on_overflow=skip), or when every one of its reference rows is.
    """
    probed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (split, variant, oid, _), _ in units:
        probed[(split, oid)].add(variant)
    out = []
    for ds in datasets:
        too_long = sum(ORIGINAL not in probed[(ds.split, it.id)] for it in ds.originals)
        refs_too_long = sum(ORIGINAL in probed[(ds.split, it.id)] and REFERENCE not in probed[(ds.split, it.id)]
                            for it in ds.originals)
        n_tested = len(ds.originals) - too_long - refs_too_long
        left = {"without a reference row": len(ds.without_reference),
                "too long for the model's context": too_long,
                "with every reference row too long for the model's context": refs_too_long}
        out.append({"split": ds.split, "n_selected": ds.n_selected, "n_tested": n_tested,
                    "left_out": {k: v for k, v in left.items() if v}})
    return out


def check_testable(cover: Sequence[dict[str, Any]], settings: DetectSettings) -> None:
    """Refuse (one line) a run that would leave a dataset with no item to test: an empty report is no result."""
    for c in cover:
        if c["n_tested"] == 0:
            why = ", ".join(f"{n} {reason}" for reason, n in c["left_out"].items()) or "none selected"
            fix = (f"lower the probe's budgets (probe.full_cot_max_tokens, probe.zero_cot_max_tokens) or set "
                   f"{settings.overflow_key}=truncate" if any("too long" in r for r in c["left_out"])
                   else "give a reference set that covers the items")
            raise DataError(f"nothing left to test in {c['split']}: of {c['n_selected']} item(s) selected, {why}, "
                            f"all left out; {fix}")


def collect_records(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, out_dir: str | Path,
                    settings: DetectSettings, on_ready: Callable[[], Any] | None = None,
                    overflow: list[dict[str, Any]] | None = None,
                    planned: tuple[list[tuple[tuple[str, str, str, int], Item]], list[dict[str, Any]]] | None = None,
                    rendering: dict[str, Any] | None = None, cost: dict[str, Any] | None = None,
                    warnings: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Probe every unit not yet in out_dir/records.jsonl (resume), appending chunk by chunk.

    Before probing, the cost plan (`zcp.probe.cost`: units, distinct prompts, score requests, zero-CoT and full-CoT
    generations with their token budgets) is logged; the first chunk is timed per pass and the plan, with an ETA
    extrapolated from it, is logged again in one line and, when `cost` is given, put into it (detect writes it to
    summary.json as `cost_plan`; not into run_meta.json, which must not depend on timings: a sharded run's merge
    writes it byte-identical to one process's). At the default `run.chunk_size` the first chunk holds
    `settings.chunk_first` units (at least the backend's generation batch when the metrics generate:
    `generation_floor`) and the later ones about `settings.chunk_seconds` of work each (at least the first chunk's
    size, at most `probe_block` units); any other chunk_size is the units of every chunk. The progress bar advances per chunk.

    `on_ready` runs once the directory is known to hold this run (or nothing yet), before any probing:
    run_detect writes config.yaml there, so a refused run never overwrites another run's config.
    `planned` is `plan_units`' result when the caller planned before writing anything (detect does);
    `rendering` (`zcp.probe.prompts.prompt_rendering`) is stored in run_meta.json, and a directory whose records
    were rendered otherwise (e.g. model.chat changed under the same output_dir) is refused. `warnings`, when given,
    receives a {file, units, warning} entry when the records on disk held a unit twice with different content
    (`RecordStore.conflicts`: the first copy is kept); detect writes them to summary.json as `record_warnings`.
    """
    out = Path(out_dir)
    units, report = planned if planned is not None else plan_units(backend, datasets, probe, settings)
    out.mkdir(parents=True, exist_ok=True)
    keys = [k for k, _ in units]
    if overflow is not None:
        overflow.extend(report)
    if report:
        log.warning("%d probe prompts exceed the model's context: %s (listed in summary.json)", len(report),
                    settings.on_overflow)
    fp = _fingerprint(units, backend, probe)
    meta_path = out / META
    meta = detection_meta(out, fp)  # the records there are this plan's, or none yet (zcp.core.rundir)
    if meta is not None:
        how = {k: v for k, v in (rendering or {}).items() if k != "example_zero_cot"}
        if meta.get("rendering") and how and meta["rendering"] != how:
            raise RunDirError(f"{out} holds records of prompts rendered otherwise ({meta['rendering']}; this run: "
                              f"{how}); use a new output_dir")
    else:
        # the backend's fingerprint (weights' content, rendering options) tells a later reader (the zcp_*
        # baselines) which model these records are of
        write_json(meta_path, {"fingerprint": fp, "n_units": len(units),
                               "backend_fingerprint": str(backend.fingerprint or ""),
                               **({"rendering": {k: v for k, v in rendering.items() if k != "example_zero_cot"}}
                                  if rendering else {})})
    if on_ready is not None:
        on_ready()
    # the records already on disk, repaired (`RecordStore.load`): a torn last line (killed writer) is dropped, a
    # last line without its newline gets one, duplicated units (two writers before the run lock existed) are
    # kept once. Each chunk's fsync runs while the next chunk is probed (`sync_behind`): a killed run still loses
    # at most the chunk in flight
    store = RecordStore(out / RECORDS, key=_key, sync_behind=True)
    existing = store.load(expect=unit_mismatch(planned_fields(units, backend, probe)))  # foreign rows: re-probed
    if store.conflicts and warnings is not None:  # a unit held twice with different content: which copy was kept
        warnings.append({"file": str(store.path), "units": len(store.conflicts), "warning": store.conflict_warning()})
    done = set(store.keys())
    todo = [(k, it) for k, it in units if k not in done]
    if existing:
        log.info("resuming: %d of %d units already probed", len(done), len(units))
    # Units with the same question and gold answer get the same prompt and so the same record: they are
    # probed once and share it exactly (a reference row identical to its original gives exactly no gap,
    # whatever batch each would have been scored in), which also saves the work.
    unit_item = dict(units)
    known: dict[tuple[str, str], dict[str, Any]] = {}
    for r in existing:
        it = unit_item.get(_key(r))
        if it is not None:
            known.setdefault((it.question, it.answer), r)
    fresh_total = len({(it.question, it.answer) for _, it in todo} - set(known))
    plan = plan_cost(len(units), len(todo), fresh_total, probe)
    if todo:
        log.info("%s; timing the first chunk for an ETA", plan.line())
    cap = probe_block(backend, settings.chunk_size)
    adaptive = settings.chunk_size == RunConfig.chunk_size
    size = min(max(settings.chunk_first, generation_floor(backend, probe)), cap) if adaptive else cap
    bar = None
    if settings.progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="probe", unit="item")
    pos = 0
    while pos < len(todo):
        chunk = todo[pos : pos + size]
        pos += len(chunk)
        fresh: dict[tuple[str, str], Item] = {}
        for _, it in chunk:
            if (it.question, it.answer) not in known:
                fresh.setdefault((it.question, it.answer), it)
        timer = PassTimer(probe) if plan.warmup is None and fresh else None
        t0 = time.perf_counter()
        if timer is not None:
            with timer.timing(backend):
                new = probe_items(backend, list(fresh.values()), probe)
        else:
            new = probe_items(backend, list(fresh.values()), probe) if fresh else []
        for qa, rec in zip(fresh, new, strict=True):
            known[qa] = rec
        recs = []
        for (split, variant, oid, draw), it in chunk:
            rec = {k: v for k, v in known[(it.question, it.answer)].items() if k not in UNIT_FIELDS}
            rec.update(id=it.id, split=split, variant=variant, original_id=oid, draw=draw)
            recs.append(rec)
        store.append(recs)
        if timer is not None:  # the first chunk that probed anything: the ETA, and the size of the chunks to come
            measured(plan, len(chunk), len(fresh), time.perf_counter() - t0, timer.seconds,
                     settings.chunk_seconds if adaptive else None, cap)
            if not adaptive:
                plan.chunk_units, plan.chunk_rule = size, "run.chunk_size"
            size = plan.chunk_units or size
            log.info("%s", plan.line())
            if bar is not None:
                bar.set_postfix_str(f"ETA {format_seconds(plan.eta_seconds or 0.0)} (estimate)", refresh=False)
        if bar is not None:
            bar.update(len(chunk))
    store.wait()
    if bar is not None:
        bar.close()
    if cost is not None:
        cost.update(plan.to_dict())
    wanted = set(keys)
    return [r for r in store.records if _key(r) in wanted]


def generation_floor(backend: Backend, probe: ProbeConfig) -> int:
    """The fewest units a default chunk holds when `probe.metrics` generate: the backend's generation batch
    (`generate_block`, e.g. HFBackend's gen_batch_size), else 1. A chunk is one `generate` call; with fewer prompts
    than a batch holds, every decoding step runs a part-empty batch (on a CPU a batch of 8 rows costs nearly what
    one of 16 costs per step, and a batch lasts as long as its longest output), so a run of small chunks spends
    up to twice the time of the same prompts in full batches. Records do not depend on it (batch invariance)."""
    if not (needing(probe.metrics, "generation") or needing(probe.metrics, "full_cot")):
        return 1
    return max(1, int(getattr(backend, "generate_block", 0) or 0))


def probe_block(backend: Backend, chunk_size: int) -> int:
    """The largest chunk (units probed per backend call and appended together, the unit of resume): `chunk_size`,
    except that at the default (RunConfig.chunk_size) a backend whose batches hold more rows (`score_block`, e.g.
    HFBackend: 4 x its rows per batch) gets that many; `collect_records` sizes default chunks by measured work
    (`zcp.probe.cost.chunk_units`) up to this. 64 units spread over a few length buckets make forward passes of ~20 rows, each
    paying the per-pass cost (on CPU the threads' synchronisation at every op) that a full batch shares 256 ways;
    records do not depend on it (batch invariance), a killed run loses at most the block in flight."""
    if chunk_size != RunConfig.chunk_size:
        return chunk_size
    return max(chunk_size, int(getattr(backend, "score_block", 0) or 0))


def item_draws(records: list[dict[str, Any]], metric: str, pick: tuple[int, int] | None = None
               ) -> dict[str, list[float]]:
    """Scores per original item, in draw order (m reference draws, k paraphrases, or the one original).

    With pick = (k, n_seeds) only the draws j with j mod n_seeds == k are kept (seed k's own disjoint
    share, for the stability display; an item with fewer draws than seeds keeps draw k mod m).
    """
    by: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in records:
        by[r["original_id"]].append((int(r["draw"]), metric_value(r, metric)))
    out = {}
    for oid, vals in by.items():
        scores = [v for _, v in sorted(vals)]
        out[oid] = seed_share(scores, pick) if pick is not None else scores
    return out


def seed_share(seq: Sequence[Any], pick: tuple[int, int]) -> list[Any]:
    """Seed k's own disjoint share of an item's draws, pick = (k, n_seeds): the j-th with j mod n_seeds == k, or
    (fewer draws than seeds) draw k mod m."""
    k, n_seeds = pick
    return [x for j, x in enumerate(seq) if j % n_seeds == k] or [seq[k % len(seq)]]


def distinct_draws(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reference records with repeated draws of an item removed (same prompt and gold answer: one version).

    A copy of a perturbation is not a further version of the item; counted twice it would make the
    within-item permutation test anti-conservative. Records without a prompt hash are kept as they are.
    """
    seen: set[tuple] = set()
    out = []
    for r in sorted(records, key=lambda r: (r["original_id"], int(r["draw"]))):
        key = (r["original_id"], r.get("prompt_hash"), r.get("gold"))
        if r.get("prompt_hash") is not None and key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out


def _std(xs: Sequence[float]) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


def analyse(records: list[dict[str, Any]], metrics: Sequence[str], settings: DetectSettings) -> dict[str, Any]:
    """Per (split, variant, metric): one within-item test over all reference draws; verdicts; malformed rates.

    p_value is the test's p (Monte Carlo streams of all seeds pooled) and c_cont = C(p_value). `per_seed`
    holds the stability display: per seed, the test on that seed's stream (and, with
    reference_draws=per_seed, on its share of the draws); the ± std columns come from it.
    With a control set (split `control`, zcp.probe.control) the result also holds `control`: every other split's
    per-item gaps against the control's, per metric (`compare_with_control`).
    """
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    gaps: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(dict)  # per-item gaps, for the control
    for r in records:
        groups[(r["split"], r["variant"])].append(r)
    splits = sorted({s for s, _ in groups})
    results, verdicts, malformed = [], [], []
    tested: dict[tuple[str, str], tuple[dict[str, float], dict[int, dict[str, float]]]] = {}
    n_seeds = len(settings.seeds)
    for split in splits:
        ref = distinct_draws(groups.get((split, REFERENCE), []))
        variants = [v for (s, v) in groups if s == split and v != REFERENCE]
        variants.sort(key=lambda v: (v != ORIGINAL, v))
        for variant in variants:
            recs = groups[(split, variant)]
            pooled_p: dict[str, float] = {}
            seed_p: dict[int, dict[str, float]] = defaultdict(dict)
            for metric in metrics:
                s_map = item_draws(recs, metric)
                r_all = item_draws(ref, metric)
                ids = sorted(set(s_map) & set(r_all))
                gaps[(split, variant)][metric] = {i: float(np.mean(s_map[i]) - np.mean(r_all[i])) for i in ids}

                def run(r_map: dict[str, list[float]], seed: int, ids: list[str] = ids, metric: str = metric,
                        s_map: dict[str, list[float]] = s_map, split: str = split, variant: str = variant) -> TestResult:
                    return paired_test(metric, [s_map[i] for i in ids], [r_map[i] for i in ids],
                                       B=settings.bootstrap_samples, test=settings.test, ids=ids,
                                       seed=int(stable_hash(f"{seed}|{split}|{variant}|{metric}", 8), 16))

                streams = [run(r_all, seed) for seed in settings.seeds]
                p = pooled_mc_pvalue(streams)
                main = streams[0]
                per_seed = []
                for k, seed in enumerate(settings.seeds):
                    res = streams[k] if settings.reference_draws == "all" else \
                        run(item_draws(ref, metric, (k, n_seeds)), seed)
                    per_seed.append({"seed": seed, **res.to_dict()})
                    seed_p[seed][metric] = res.p_value
                floor = (1.0 / (settings.bootstrap_samples * n_seeds + 1)) if not main.exact else main.p_floor
                pooled_p[metric] = p
                results.append({
                    "split": split, "variant": variant, "metric": metric, "n": main.n, "m": main.m, "k": main.k,
                    "s": main.s, "s_std": 0.0, "s_ref": main.s_ref,
                    "s_ref_std": _std([q["s_ref"] for q in per_seed]) if settings.reference_draws == "per_seed" else 0.0,
                    "diff": main.diff, "p_value": p, "c_cont": c_cont(p),
                    "c_cont_std": _std([q["c_cont"] for q in per_seed]),
                    "p_floor": floor, "at_floor": p <= floor * (1 + 1e-9), "test": main.test,
                    "n_relabellings": sum(int(q["n_relabellings"] or 0) for q in per_seed) if not main.exact else main.n_relabellings,
                    "discordant": main.to_dict()["discordant"], "per_seed": per_seed,
                })
            tested[(split, variant)] = (pooled_p, seed_p)
        for variant in sorted({v for (s, v) in groups if s == split}):
            recs = groups[(split, variant)]
            row = {"split": split, "variant": variant, "n_rows": len(recs)}
            if any("malformed" in r for r in recs):
                row["zero_cot_malformed"] = int(sum(bool(r.get("malformed")) for r in recs))
                row["zero_cot_malformed_rate"] = row["zero_cot_malformed"] / len(recs)
            if any("cot_malformed" in r for r in recs):
                row["full_cot_malformed"] = int(sum(bool(r.get("cot_malformed")) for r in recs))
                row["full_cot_malformed_rate"] = row["full_cot_malformed"] / len(recs)
                row["full_cot_acc"] = float(np.mean([bool(r.get("cot_correct")) for r in recs]))
            malformed.append(row)
    void = mark_void(results, malformed, settings.void_malformed)  # left out of the verdict (zcp.probe.void)
    for (split, variant), (pooled_p, seed_p) in tested.items():
        off = void.get((split, variant), {})
        stability = [combine_valid(seed_p[seed], off, settings.alpha) for seed in settings.seeds]
        verdicts.append({
            "split": split, "variant": variant, **combine_valid(pooled_p, off, settings.alpha),
            "stability_contaminated_seeds": sum(c["contaminated"] for c in stability),
            "per_seed": stability,
        })
    out: dict[str, Any] = {"results": results, "verdicts": verdicts, "malformed": malformed}
    control = gaps.pop((CONTROL, ORIGINAL), None)
    if control is not None and any(s != CONTROL for s, _ in gaps):
        out["control"] = compare_with_control({k: v for k, v in gaps.items() if k[0] != CONTROL}, control, metrics,
                                              seeds=settings.seeds, B=settings.bootstrap_samples, alpha=settings.alpha,
                                              void=void, control_void=void.get((CONTROL, ORIGINAL)))
    return out


def detect(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, out_dir: str | Path,
           settings: DetectSettings | None = None, *, tracker: Any = None, extra: dict[str, Any] | None = None,
           title: str | None = None, on_ready: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Probe, test and report; writes records.jsonl, summary.json, table.md and c_cont.png to out_dir.

    Before anything is written (the directory included) the units are fitted to the model's context
    (`plan_units`) and a dataset left with no item to test is refused (`check_testable`): an empty report
    is no result. The run directory is then locked for the duration (a second run on it refuses at once).
    summary.json and table.md say how the prompts were rendered (`rendering`), which items were left out and
    why (`datasets[].left_out`, the "n = 26 of 40 items" line), and flag acc/con as void where most answers
    are malformed (`malformed_warnings`, above MALFORMED_WARN_RATE); a unit the records held twice with different
    content is in `record_warnings` (and a table.md warning line, as the data warnings `extra` brings are).
    """

    settings = settings or DetectSettings()
    out = Path(out_dir)
    planned = plan_units(backend, datasets, probe, settings)
    cover = coverage(datasets, planned[0])
    check_testable(cover, settings)
    example = next((ds.originals[0] for ds in datasets if ds.originals), None)
    rendering = prompt_rendering(backend, probe, example)
    _log_plan(cover, planned[1], rendering, settings)
    with RunLock(out):
        return _detect_locked(backend, datasets, probe, out, settings, tracker, extra, title, on_ready,
                              planned, cover, rendering)


def _log_plan(cover: Sequence[dict[str, Any]], overflow: Sequence[dict[str, Any]], rendering: dict[str, Any],
              settings: DetectSettings) -> None:
    """WARNING lines for what a run leaves out or changes, and how its prompts are rendered."""
    from zcp.probe.prompts import describe_rendering
    from zcp.probe.report import coverage_text, overflow_text

    (log.warning if rendering.get("kind") == "plain_template" else log.info)("prompts: %s",
                                                                            describe_rendering(rendering))
    for c in cover:  # items without a reference row were announced by load_datasets already
        if set(c["left_out"]) - {"without a reference row"}:
            log.warning("%s (listed in summary.json)", coverage_text(c))
    if overflow:
        log.warning("%s (listed in summary.json)", overflow_text(overflow, settings.on_overflow, settings.overflow_key))


def malformed_warnings(malformed: Sequence[dict[str, Any]], metrics: Sequence[str],
                       threshold: float = MALFORMED_WARN_RATE) -> list[dict[str, Any]]:
    """Rows of `analyse`'s malformed table whose malformed rate voids a metric, with the metrics it voids.

    A zero-CoT malformed rate above `threshold` voids the metrics that read the zero-CoT answer (metric table:
    `needs_generation`; acc and con score a malformed zero-CoT answer as wrong / inconsistent on every
    version); a full-CoT malformed rate above it voids those reading the full-CoT answer (`needs_full_cot`:
    con). p_first/p_all score the gold answer's tokens and are unaffected. The rows are also marked (`voids`).
    """
    out = []
    for row in malformed:
        voids: list[str] = []
        if row.get("zero_cot_malformed_rate", 0.0) > threshold:
            voids += needing(metrics, "generation")
        if row.get("full_cot_malformed_rate", 0.0) > threshold:
            voids += [m for m in needing(metrics, "full_cot") if m not in voids]
        if not voids:
            continue
        row["voids"] = voids
        rates = [f"{row[k]:.0%} of {what} answers" for k, what in (("zero_cot_malformed_rate", "zero-CoT"),
                                                                      ("full_cot_malformed_rate", "full-CoT"))
                 if row.get(k, 0.0) > threshold]
        out.append({"split": row["split"], "variant": row["variant"], "voids": voids, "threshold": threshold,
                    "warning": f"{row['split']}/{row['variant']}: {' and '.join(rates)} are malformed (more than "
                               f"{threshold:.0%}): {' and '.join(voids)} mean nothing here (a malformed answer "
                               "scores as wrong on every version of an item); check probe.zero_cot_prefix and "
                               "the prompt rendering"})
    return out


def _detect_locked(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, out: Path,
                   settings: DetectSettings, tracker: Any, extra: dict[str, Any] | None, title: str | None,
                   on_ready: Callable[[], Any] | None,
                   planned: tuple[list[tuple[tuple[str, str, str, int], Item]], list[dict[str, Any]]],
                   cover: list[dict[str, Any]], rendering: dict[str, Any]) -> dict[str, Any]:
    overflow: list[dict[str, Any]] = []
    cost: dict[str, Any] = {}
    notes: list[dict[str, Any]] = []
    records = collect_records(backend, datasets, probe, out, settings, on_ready, overflow, planned, rendering, cost,
                              notes)
    extra = {**(extra or {}), **({"record_warnings": notes} if notes else {}), "cost_plan": cost}
    return write_results(records, backend.name, datasets, probe, out, settings, tracker=tracker, extra=extra,
                         title=title, overflow=overflow, cover=cover, rendering=rendering)


def write_results(records: list[dict[str, Any]], model: str, datasets: Sequence[DetectDataset], probe: ProbeConfig,
                  out: Path, settings: DetectSettings, *, tracker: Any, extra: dict[str, Any] | None,
                  title: str | None, overflow: list[dict[str, Any]], cover: list[dict[str, Any]],
                  rendering: dict[str, Any]) -> dict[str, Any]:
    """A detection run's statistics and reports from its records (in plan order): summary.json, table.md, the
    plot and the tracker's tables. Called once per run: by one process after probing, or by the merge of a
    sharded run (zcp.probe.shard) on the shards' records, so both write the same summary. `model` is the
    backend's name."""
    from zcp.probe.report import results_rows, write_reports

    analysed = analyse(records, probe.metrics, settings)
    flags = malformed_warnings(analysed["malformed"], probe.metrics, settings.void_malformed)
    for f in flags:
        log.warning("%s", f["warning"])
    summary: dict[str, Any] = {
        "model": model,
        "metrics": list(probe.metrics),
        "seeds": list(settings.seeds),
        "bootstrap_samples": settings.bootstrap_samples,
        "test": settings.test,
        "alpha": settings.alpha,
        "reference_draws": settings.reference_draws,
        "on_overflow": settings.on_overflow,
        "overflow_key": settings.overflow_key,
        "overflow": overflow,
        "rendering": rendering,
        "datasets": [{"split": ds.split, "n_items": len(ds.originals),
                      "n_reference_rows": sum(len(v) for v in ds.reference.values()),
                      "variants": {k: sum(len(x) for x in v.values()) for k, v in ds.variants.items()},
                      **{k: c[k] for k in ("n_selected", "n_tested", "left_out")}}
                     for ds, c in zip(datasets, cover, strict=True)],
        **analysed,
        "malformed_warnings": flags,
        **(extra or {}),
    }
    write_json(out / SUMMARY, summary)
    paths = write_reports(summary, out, title)
    if summary.get("control"):  # the audited sets against the control set (zcp.probe.control)
        with open(paths["table"], "a", encoding="utf-8") as f:
            f.write(control_markdown(summary["control"]))
    if tracker is not None:
        if summary.get("control"):
            tracker.table("control", summary["control"]["results"])
        tracker.table("results", results_rows(summary))
        tracker.table("verdicts", [{k: v[k] for k in ("split", "variant", "p_value", "c_cont", "contaminated")}
                                   for v in summary["verdicts"]])
        tracker.summary({f"{r['split']}/{r['variant']}/{r['metric']}/c_cont": r["c_cont"] for r in summary["results"]})
        tracker.image("c_cont", str(paths["plot"]))
    return summary


def probe_config(probe_cfg: Any, model_cfg: Any = None) -> ProbeConfig:
    """ProbeConfig from the `probe` config group, with the model's own settings (`model.probe.*`) over it.

    Models differ in what the probe needs (a long reasoner's full-CoT token budget, a model card's CoT
    instruction); conf/model/*.yaml set those under `probe:` and null keeps the probe group's value.
    """
    from zcp.config import to_dict

    p = to_dict(probe_cfg)
    if model_cfg is not None and (model_cfg.get("probe") if hasattr(model_cfg, "get") else None):
        from zcp.config.model import ModelProbeSettings, _build

        p.update(_build(ModelProbeSettings, to_dict(model_cfg.get("probe")), "model.probe").overrides())
    known = set(ProbeConfig.__dataclass_fields__)
    return ProbeConfig(**{k: v for k, v in p.items() if k in known})


def check_backend_metrics(backend: Backend, probe: ProbeConfig) -> None:
    """Refuse, before anything is probed, metrics the backend cannot give (ConfigError, one line).

    Metrics needing log-probs (metric table: p_first/p_all) need the answer's token log-probabilities after a
    pre-filled assistant turn; a chat API (no pre-fill) or a server that returns no prompt log-probs gives only
    the others (acc/con).
    """
    from zcp.errors import ConfigError

    wanted = needing(probe.metrics, "logprobs")
    if not wanted:
        return
    if probe.mode == "api" or not backend.supports_prefill or not backend.supports_logprobs:
        why = backend.logprobs_unavailable or (
            "probe.mode=api asks for the instruction variant (no pre-fill)" if probe.mode == "api" else
            f"backend {backend.name} cannot pre-fill the answer and return its token log-probs")
        others = [m for m in metric_names() if not get_metric(m).needs_logprobs]
        raise ConfigError(f"probe.metrics={list(probe.metrics)}: {wanted} unavailable: {why}; only {'/'.join(others)} "
                          f"are available here: set probe.metrics=[{','.join(others)}]")

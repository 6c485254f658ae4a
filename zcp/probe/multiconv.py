"""Multi-convention probing (`probe.prefill`): one detection per answer convention, one verdict over all of them.

A model whose leaked completions ended on `#### N` answers at once after `#### ` and not after the probe's
`The final answer is: \\[ \\boxed{` (C_cont 0.500 under the probe's line for such a leak on the shipped model), so
`probe.prefill` names the conventions (zcp.probe.conventions) to pre-fill. How it runs:

- **One convention** (the default `probe`, or any single one): zcp.probe.detect.detect on the run dir itself, as
  ever; `probe` alone is today's run exactly (same records, summary and run_meta.json). Another single convention
  is the probe with `zero_cot_prefix` / `answer_suffix` set from the table, its records carrying `convention`.
- **Several, or `auto`**: each convention is a detection run of its own in `<out>/conv-<name>/` (records.jsonl,
  summary.json, table.md, run_meta.json; resumable and locked like any run), every record carrying `convention`;
  then in `<out>/`: summary.json and table.md combining them, c_cont.png, and records.jsonl holding every
  convention's records (with run_meta.json announcing the units, so whoever looks for "the run's records" finds
  a finished run whose records say their convention; zcp_* baselines read them per convention).
- **The full-CoT generation is generated once.** Its prompt has no pre-fill, so it is the same request under every
  convention: a `MemoBackend` (zcp.backends.memo) keyed by the frozen GenerationRequest serves `con`'s full-CoT
  outputs to every convention and the reading of `auto` from one generation per distinct prompt.
- **`auto`** (`read_conventions`): the model's greedy full-CoT outputs on the benchmark's originals (each dataset of
  the run) and on a neutral set (`probe.auto.neutral_n` generated word problems of the fixed seed
  `probe.auto.neutral_seed`, none of the reserved benchmark pool's, or `probe.auto.neutral_path`); each output is
  ended by the convention whose last answer statement ends last (`ending_convention`); a convention is probed
  when it ends at least `probe.auto.min_share` of one set's outputs, and `probe` always is. The counts per set
  are in summary.json (`auto`) and table.md; every output's reading in `conventions_read.jsonl`. A set with fewer
  than `probe.auto.min_read` outputs read (the others too long for the context), or fewer ending on any
  convention, is a warning (the reading's `warnings`, the log and table.md).
- **The verdict**: one test over every (convention, metric) p-value: Bonferroni on the smallest
  (`zcp.probe.stats.combine_conventions`), valid under any dependence between conventions (they share items, the
  full-CoT outputs, the model). A max-statistic under the joint within-item relabelling would be less
  conservative, but each convention's test runs on its own records with its own Monte Carlo stream (and the
  binary metrics' exact tests have no joint law here), so its exactness would have to be rebuilt across runs;
  Bonferroni costs at most the factor K and is exact in its guarantee. summary.json's `results` hold, per
  (split, variant, metric), that metric combined over the conventions (Bonferroni over the conventions, the
  driving convention's S and S_ref); `convention_results` every (convention, metric) row; `verdicts` the one
  combined verdict per (split, variant). Combining the per-metric rows over the metrics gives the same p as the
  verdict (Bonferroni over all K pairs either way) unless a (convention, metric) is VOID (zcp.probe.void): a void
  pair is left out of its metric's row and of the verdict, so the metrics' K differ.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zcp.backends.base import Backend, GenerationRequest
from zcp.backends.memo import MemoBackend, full_cot_only
from zcp.core.io import RunLock, read_json, read_jsonl, stable_hash, write_json, write_jsonl
from zcp.core.items import Item
from zcp.errors import ConfigError
from zcp.probe.conventions import (
    AUTO,
    PROBE,
    Resolved,
    convention_names,
    ending_convention,
    get_convention,
    is_single_default,
    parse_prefill,
    resolve_entries,
)
from zcp.probe.detect import (
    META,
    PLOT,
    RECORDS,
    SUMMARY,
    TABLE,
    DetectDataset,
    DetectSettings,
    check_testable,
    coverage,
    detect,
    plan_units,
)
from zcp.probe.prompts import ProbeConfig, full_cot_prompt, full_cot_request, prompt_rendering
from zcp.probe.stats import c_cont, combine_conventions
from zcp.probe.void import VOID_MALFORMED, void_map

log = logging.getLogger(__name__)

CONV_PREFIX = "conv-"  # <out>/conv-<name>/: one convention's detection run
READ_RECORDS = "conventions_read.jsonl"  # auto: each full-CoT output read, and the convention ending it
NEUTRAL = "neutral"  # the name of auto's neutral set in its counts


def conv_dir(out: str | Path, name: str) -> Path:
    """The run dir of convention `name` inside a multi-convention run dir."""
    return Path(out) / f"{CONV_PREFIX}{name}"


def convention_probe(probe: ProbeConfig, conv: Resolved) -> ProbeConfig:
    """`probe` pre-filling `conv`: its text as `zero_cot_prefix`, its end as `answer_suffix`, and its name in
    `extra["convention"]` (what the records carry)."""
    return dataclasses.replace(probe, zero_cot_prefix=conv.prefill, answer_suffix=conv.end,
                               extra={**probe.extra, "convention": conv.name})


def listed_conventions(prefill: Any, probe: ProbeConfig) -> list[Resolved] | None:
    """The conventions `probe.prefill` lists, resolved for this probe; None for `auto` (read from the model)."""
    entries = parse_prefill(prefill)
    if entries == AUTO:
        return None
    return resolve_entries(entries, probe.zero_cot_prefix, probe.answer_suffix)


def candidate_conventions(probe: ProbeConfig) -> list[Resolved]:
    """Every registered convention resolved for this probe (what `auto` chooses among), `probe` first; one that
    pre-fills the same text as an earlier one is left out (e.g. `hash` under probe.zero_cot_prefix="#### ")."""
    out: list[Resolved] = []
    for name in convention_names():
        r = get_convention(name).resolve(probe.zero_cot_prefix, probe.answer_suffix)
        if all(o.prefill != r.prefill for o in out):
            out.append(r)
    return out


def always_conventions(probe: ProbeConfig, auto: Any) -> list[Resolved]:
    """`probe.auto.always` resolved for this probe (names or literals): probed under auto whatever the reading."""
    always = list(getattr(auto, "always", None) or [])
    return resolve_entries(always, probe.zero_cot_prefix, probe.answer_suffix) if always else []


def neutral_items(auto: Any, exclude_questions: Collection[str] = ()) -> list[Item]:
    """auto's neutral set: the first `auto.neutral_n` rows of `auto.neutral_path` (items format), or as many word
    problems generated with `auto.neutral_seed` (none of the reserved benchmark pool: no simulation benchmark
    holds them); questions of the audited benchmark are left out either way."""
    n = int(auto.neutral_n)
    if n == 0:
        return []
    if auto.neutral_path:
        from zcp.benchmarks.loaders import load_items

        items = load_items(auto.neutral_path, "items")
    else:
        from zcp.benchmarks.reserved import RESERVED_BENCHMARK_ITEMS, benchmark_pool
        from zcp.benchmarks.wordproblems import generate_word_problems, signatures

        items = generate_word_problems(n + len(exclude_questions), seed=int(auto.neutral_seed), id_prefix=NEUTRAL,
                                       exclude=signatures(benchmark_pool(RESERVED_BENCHMARK_ITEMS)))
    return [it for it in items if it.question not in exclude_questions][:n]


def _fits(backend: Backend, prompts: list[Any], budget: int) -> tuple[list[bool], int | None]:
    """Whether each full-CoT prompt plus its budget fits the model's context (all, when that is unknown), and the
    largest full-CoT budget with which every prompt would fit (None when unknown)."""
    if not prompts or not backend.counts_tokens or not backend.context_length:
        return [True] * len(prompts), None
    counts = backend.count_tokens(prompts)[0]
    return [c + budget <= backend.context_length for c in counts], backend.context_length - max(counts)


def primary_convention(per_set: Mapping[str, Mapping[str, Any]], candidates: Sequence[str]) -> tuple[str, str]:
    """auto's primary convention and why: the one ending most of the NEUTRAL set's outputs (ties: table order,
    `probe` first), never read from the audited benchmark, whose outputs a contaminated model may end otherwise;
    `probe` when no neutral output states an answer in any convention (or there is no neutral set)."""
    neutral = [s for s in per_set.values() if s["kind"] == "neutral" and s["read"]]
    if not neutral:
        return PROBE, "no neutral output read: the probe's line"
    ends = neutral[0]["ends"]
    best = max(candidates, key=lambda c: (ends.get(c, 0), -candidates.index(c)))
    if not ends.get(best, 0):
        return PROBE, "no neutral output states an answer: the probe's line"
    return best, f"ends {ends[best]} of {neutral[0]['read']} neutral outputs (the most)"


def read_conventions(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, auto: Any,
                     settings: DetectSettings | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`auto`: the conventions the model ends its own full-CoT outputs with, on each dataset's originals and on the
    neutral set (`neutral_items`); returns (the reading, one row per output read).

    The reading: per set its outputs read, those too long for the model's context (left out), the count of outputs
    each convention ends (`none`: no convention states an answer) and the shares; `chosen`: `probe`, then every
    other convention that ends at least `auto.min_share` of one set's outputs, in table order, with `why`.
    """
    settings = settings or DetectSettings()
    candidates = candidate_conventions(probe)
    sets: dict[str, tuple[str, list[Item]]] = {ds.split: ("benchmark", list(ds.originals)) for ds in datasets}
    questions = {it.question for ds in datasets for it in ds.originals}
    neutral = neutral_items(auto, questions)
    if neutral:
        sets[NEUTRAL if NEUTRAL not in sets else f"{NEUTRAL}_set"] = ("neutral", neutral)
    budget = probe.full_cot_max_tokens
    plan: list[tuple[str, Item, GenerationRequest]] = []
    too_long: dict[str, int] = defaultdict(int)
    fitting: dict[str, int | None] = {}
    for name, (_, items) in sets.items():
        prompts = [full_cot_prompt(it.question, probe) for it in items]
        fits, fitting[name] = _fits(backend, prompts, budget)
        for it, ok in zip(items, fits, strict=True):
            if ok:
                plan.append((name, it, full_cot_request(it.question, probe)))
            else:
                too_long[name] += 1
    unique = list(dict.fromkeys(r for _, _, r in plan))
    texts: dict[GenerationRequest, str] = {}
    step = max(1, settings.chunk_size)
    bar = None
    if settings.progress and unique:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(unique), desc="auto: full-CoT", unit="item")
    for i in range(0, len(unique), step):
        chunk = unique[i : i + step]
        texts.update(zip(chunk, backend.generate(chunk), strict=True))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    rows = []
    counts: dict[str, dict[str, int]] = {name: dict.fromkeys([*(c.name for c in candidates), "none"], 0) for name in sets}
    for name, it, req in plan:
        text = texts[req]
        conv = ending_convention(text, candidates) or "none"
        counts[name][conv] += 1
        rows.append({"set": name, "id": it.id, "convention": conv, "tail": text[-160:]})
    share = float(auto.min_share)
    per_set: dict[str, Any] = {}
    for name, (kind, items) in sets.items():
        n_read = sum(counts[name].values())
        per_set[name] = {"kind": kind, "n": len(items), "read": n_read, "too_long": too_long.get(name, 0),
                         "ends": counts[name],
                         "shares": {c: (k / n_read if n_read else 0.0) for c, k in counts[name].items()}}
    primary, primary_why = primary_convention(per_set, [c.name for c in candidates])
    chosen, why = [PROBE], {PROBE: "always (the probe's own line)"}
    for c in candidates:
        if c.name == PROBE:
            continue
        over = [(name, s["shares"][c.name]) for name, s in per_set.items() if s["read"] and s["shares"][c.name] >= share]
        if over:
            chosen.append(c.name)
            why[c.name] = "; ".join(f"{name}: {v:.2f} of outputs" for name, v in over) + f" (>= {share})"
    for c in always_conventions(probe, auto):  # probe.auto.always: whatever the reading found
        if c.name not in chosen and all(c.prefill != o.prefill for o in candidates if o.name in chosen):
            chosen.append(c.name)
            why[c.name] = "probe.auto.always"
    if primary not in chosen:
        chosen.append(primary)
        why[primary] = "primary: " + primary_why
    order = [c.name for c in candidates]  # table order (literals of probe.auto.always last): one run key per set
    chosen.sort(key=lambda n: order.index(n) if n in order else len(order))
    least = int(auto.min_read)  # probe.auto.min_read: fewer outputs read, or fewer stating an answer, are warned about
    warnings = []
    for name, s in per_set.items():
        stated = s["read"] - s["ends"]["none"]
        if s["read"] < min(least, s["n"]):
            warnings.append(f"auto read {s['read']} of {s['n']} full-CoT outputs on {name} ({s['too_long']} too long "
                            f"for the model's context at probe.full_cot_max_tokens={budget}"
                            + (f"; every prompt fits at probe.full_cot_max_tokens={fitting[name]}"
                               if fitting.get(name) else "") + "): its reading rests on few outputs")
        elif stated < min(least, s["read"]):
            warnings.append(f"auto: only {stated} of the {s['read']} full-CoT outputs read on {name} end on an "
                            f"answer convention ({s['ends']['none']} state no answer; probe.auto.min_read={least}): "
                            "its reading rests on few outputs")
    neutral_source = (f"{auto.neutral_path} (first {auto.neutral_n})" if auto.neutral_path else
                      f"zcp.benchmarks.wordproblems, seed {auto.neutral_seed}, {len(neutral)} items")
    reading = {"min_share": share, "always": list(getattr(auto, "always", []) or []),
               "candidates": [c.name for c in candidates], "sets": per_set, "chosen": chosen,
               "why": why, "neutral": neutral_source if neutral else None, "full_cot_max_tokens": budget,
               "primary": primary, "primary_why": primary_why, "warnings": warnings}
    return reading, rows


def _p_table(rows: Mapping[str, Sequence[Mapping[str, Any]]], key: tuple[str, str]) -> dict[str, dict[str, float]]:
    """{convention: {metric: p}} of one (split, variant) from each convention's results."""
    return {c: {r["metric"]: float(r["p_value"]) for r in rs if (r["split"], r["variant"]) == key and not r.get("void")}
            for c, rs in rows.items()}


def _std(xs: Sequence[float]) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


def _per_metric(by_conv: Mapping[str, Sequence[Mapping[str, Any]]]
                ) -> tuple[list[dict[str, Any]], list[dict[str, dict[str, Any]]]]:
    """Every convention's result rows with their `convention`, and per (split, variant, metric) {convention: row}."""
    conv_results = [{"convention": c, **r} for c, rs in by_conv.items() for r in rs]
    grouped: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in conv_results:
        grouped[(r["split"], r["variant"], r["metric"])][r["convention"]] = r
    return conv_results, list(grouped.values())


def _smallest_over_conventions(every: Mapping[str, dict[str, Any]]
                               ) -> tuple[dict[str, dict[str, Any]], str, dict[str, Any], float]:
    """One metric over the conventions: the rows tested (a convention where the metric is VOID, zcp.probe.void, is
    left out; void under all, it stays void), the convention with the smallest p, its row, and Bonferroni's p."""
    rows = {c: r for c, r in every.items() if not r.get("void")} or dict(every)
    conv, row = min(rows.items(), key=lambda kv: kv[1]["p_value"])
    return rows, conv, row, min(1.0, len(rows) * float(row["p_value"]))


def combine_summaries(summaries: Mapping[str, dict[str, Any]], conventions: Sequence[Resolved],
                      settings: DetectSettings, primary: str | None = None) -> dict[str, Any]:
    """The combined statistics of a multi-convention run from each convention's summary.json.

    `convention_results`: every row, with its `convention`; `results`: per (split, variant, metric) the metric
    over the conventions (Bonferroni: K_conv x the smallest p; S, S_ref, n, ... of the convention with that p,
    named `convention`; `conventions`: every convention's p); `verdicts`: per (split, variant) the one test over
    every (convention, metric) p (`combine_conventions`), with the per-seed stability display computed the same
    way from each row's per-seed p-values; `malformed`, `malformed_warnings` and `record_warnings` (when any) per
    convention.
    """
    names = [c.name for c in conventions]
    by_conv = {c: summaries[c]["results"] for c in names}
    conv_results, grouped = _per_metric(by_conv)
    results = []
    for every in grouped:
        rows, conv, row, p = _smallest_over_conventions(every)
        k = len(rows)
        seeds = []
        for j, seed in enumerate(settings.seeds):
            ps = [float(r["per_seed"][j]["p_value"]) for r in rows.values() if len(r.get("per_seed", [])) > j]
            pj = min(1.0, k * min(ps)) if ps else 1.0
            seeds.append({"seed": seed, "p_value": pj, "c_cont": c_cont(pj)})
        results.append({**{key: v for key, v in row.items() if key not in ("per_seed",)},
                        "convention": conv, "conventions": {c: float(r["p_value"]) for c, r in rows.items()},
                        **({"void_in": {c: r["void"] for c, r in every.items() if r.get("void")}}
                           if len(rows) < len(every) else {}),
                        "rule": "bonferroni_over_conventions", "p_value": p, "c_cont": c_cont(p),
                        "c_cont_std": _std([q["c_cont"] for q in seeds]), "p_floor": min(1.0, k * float(row["p_floor"])),
                        "per_seed": seeds})
    verdicts = []
    first = summaries[names[0]]
    for v in first["verdicts"]:
        key = (v["split"], v["variant"])
        verdict = combine_conventions(_p_table(by_conv, key), settings.alpha)
        stability = []
        for j, _seed in enumerate(settings.seeds):
            table = {c: {r["metric"]: float(r["per_seed"][j]["p_value"]) for r in by_conv[c]
                         if (r["split"], r["variant"]) == key and len(r.get("per_seed", [])) > j
                         and not r.get("void")} for c in names}
            stability.append(combine_conventions(table, settings.alpha))
        if primary in by_conv:  # auto's primary convention's own verdict (its metrics; reported beside the one)
            verdict["primary"] = {"convention": primary,
                                  **combine_conventions({primary: _p_table(by_conv, key)[primary]}, settings.alpha)}
        verdicts.append({"split": key[0], "variant": key[1], **verdict,
                         "stability_contaminated_seeds": sum(s["contaminated"] for s in stability),
                         "per_seed": stability})
    malformed = [{"convention": c, **m} for c in names for m in summaries[c].get("malformed", [])]
    warnings = [{"convention": c, **w, "warning": f"[{c}] {w['warning']}"} for c in names
                for w in summaries[c].get("malformed_warnings", [])]
    records = [{"convention": c, **w} for c in names for w in summaries[c].get("record_warnings", [])]
    control = combine_control({c: summaries[c]["control"] for c in names if summaries[c].get("control")},
                              settings.alpha, primary)
    return {"results": results, "convention_results": conv_results, "verdicts": verdicts, "malformed": malformed,
            "malformed_warnings": warnings, **({"record_warnings": records} if records else {}),
            **({"control": control} if control else {})}


def combine_control(blocks: Mapping[str, Mapping[str, Any]], alpha: float, primary: str | None = None
                    ) -> dict[str, Any] | None:
    """The control comparison of a multi-convention run from each convention's control block
    (`zcp.probe.control.compare_with_control`), combined as the within-item verdict is: `convention_results` every
    row with its convention; `results` per (split, variant, metric) the row of the convention with the smallest p,
    Bonferroni over the conventions where the metric is not VOID; `verdicts` per (split, variant) Bonferroni over
    every non-VOID (convention, metric) (`combine_conventions`), with the primary convention's own verdict beside
    it. None when no convention has a control block."""
    if not blocks:
        return None
    names = list(blocks)
    first = blocks[names[0]]
    conv_results, grouped = _per_metric({c: blocks[c]["results"] for c in names})
    results = []
    for every in grouped:
        rows, conv, row, p = _smallest_over_conventions(every)
        results.append({**row, "convention": conv, "conventions": {c: float(r["p_value"]) for c, r in rows.items()},
                        "rule": "bonferroni_over_conventions", "p_value": p, "c_cont": c_cont(p),
                        "p_floor": min(1.0, len(rows) * float(row["p_floor"]))})
    verdicts = []
    for key in dict.fromkeys((v["split"], v["variant"]) for c in names for v in blocks[c]["verdicts"]):
        table = {c: {r["metric"]: float(r["p_value"]) for r in blocks[c]["results"]
                     if (r["split"], r["variant"]) == key and not r.get("void")} for c in names}
        verdict = combine_conventions(table, alpha)
        voided = {f"{c}/{r['metric']}": r["void"] for c in names for r in blocks[c]["results"]
                  if (r["split"], r["variant"]) == key and r.get("void")}
        if voided:
            verdict.update(void=voided, void_all=not any(table.values()))
        if primary in table:
            verdict["primary"] = {"convention": primary, **combine_conventions({primary: table[primary]}, alpha)}
        verdicts.append({"split": key[0], "variant": key[1], **verdict})
    return {**{k: first[k] for k in ("split", "test", "alternative")}, "results": results,
            "convention_results": conv_results, "verdicts": verdicts}


def _write_union(out: Path, names: Sequence[str]) -> None:
    """`<out>/records.jsonl`: every convention's records (each says its convention), and `<out>/run_meta.json`
    announcing the distinct units they cover, so the run reads as a finished detection run."""
    rows, keys, metas = [], set(), []
    for c in names:
        d = conv_dir(out, c)
        metas.append(read_json(d / META))
        for r in read_jsonl(d / RECORDS):
            rows.append(r)
            keys.add((r["split"], r["variant"], r["original_id"], int(r["draw"])))
    write_jsonl(out / RECORDS, rows)
    meta = {"fingerprint": stable_hash("|".join(str(m.get("fingerprint")) for m in metas), 32),
            "n_units": len(keys), "conventions": list(names),
            "backend_fingerprint": metas[0].get("backend_fingerprint", ""),
            **({"rendering": metas[0]["rendering"]} if metas[0].get("rendering") else {})}
    write_json(out / META, meta)


def detect_conventions(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, out: str | Path,
                       settings: DetectSettings, conventions: Sequence[Resolved] | None, auto: Any = None, *,
                       prefill: Any = AUTO, tracker: Any = None, extra: dict[str, Any] | None = None,
                       title: str | None = None, on_ready: Callable[[], Any] | None = None,
                       reading: dict[str, Any] | None = None, primary: str | None = None) -> dict[str, Any]:
    """Several conventions (or `auto`, `conventions=None`: read first with `read_conventions`): each probed into
    `<out>/conv-<name>/` (zcp.probe.detect.detect), then the combined summary.json, table.md, c_cont.png and the
    records of all of them in `<out>/` (see the module's docstring). Every convention's prompts are fitted to the
    model's context before anything is written. Returns the combined summary."""
    from zcp.probe.report import results_rows

    out = Path(out)
    memo = backend if isinstance(backend, MemoBackend) else MemoBackend(backend, full_cot_only)
    read_rows: list[dict[str, Any]] = []
    if conventions is None:
        if auto is None:
            raise ValueError("probe.prefill=auto needs the probe.auto settings")
        if not memo.supports_prefill:
            raise ConfigError(f"probe.prefill=auto: backend {memo.name} cannot pre-fill the assistant turn, and every "
                              "convention is a pre-fill; use probe.prefill=probe (the API instruction)")
        reading, read_rows = read_conventions(memo, datasets, probe, auto, settings)
        candidates = {c.name: c for c in [*candidate_conventions(probe), *always_conventions(probe, auto)]}
        conventions = [candidates[n] for n in reading["chosen"]]
        log.info("auto: probing %s (%s)", ", ".join(c.name for c in conventions),
                 "; ".join(f"{k}: {v}" for k, v in reading["why"].items()))
        for w in reading["warnings"]:
            log.warning("%s", w)
    if primary is not None:  # probe.primary, declared by hand: a listed entry (name or literal), or added under auto
        (declared,) = resolve_entries([primary], probe.zero_cot_prefix, probe.answer_suffix)
        if all(c.prefill != declared.prefill for c in conventions):
            if reading is None:
                raise ConfigError(f"probe.primary={primary!r} is not among the conventions probed "
                                  f"({', '.join(c.name for c in conventions)})")
            conventions = [*conventions, declared]
        primary = next(c.name for c in conventions if c.prefill == declared.prefill)
        if reading is not None:
            reading = {**reading, "primary": primary, "primary_why": "probe.primary (declared by hand)"}
    elif reading is not None:
        primary = reading.get("primary")
    probes = {c.name: convention_probe(probe, c) for c in conventions}
    for c in conventions:  # every convention's units fit, and leave something to test, before anything is written
        units, _ = plan_units(memo, datasets, probes[c.name], settings)
        check_testable(coverage(datasets, units), settings)
    with RunLock(out):
        if on_ready is not None:
            on_ready()
        if read_rows:
            write_jsonl(out / READ_RECORDS, read_rows)
        summaries = {}
        for c in conventions:
            summaries[c.name] = detect(memo, datasets, probes[c.name], conv_dir(out, c.name), settings,
                                       extra={"convention": c.to_dict(), "output_dir": str(conv_dir(out, c.name))},
                                       title=f"{title or 'ZCP'} — pre-fill {c.label}")
        names = [c.name for c in conventions]
        first = summaries[names[0]]
        combined = combine_summaries(summaries, conventions, settings, primary)
        example = next((ds.originals[0] for ds in datasets if ds.originals), None)
        conv_info = []
        for c in conventions:
            info = {**c.to_dict(), "dir": conv_dir(out, c.name).name,
                    "source": "auto" if reading is not None else "probe.prefill"}
            ex = prompt_rendering(memo, probes[c.name], example).get("example_zero_cot")
            if ex is not None:
                info["example_zero_cot"] = ex
            conv_info.append(info)
        summary: dict[str, Any] = {
            **{k: first[k] for k in ("model", "metrics", "seeds", "bootstrap_samples", "test", "alpha",
                                     "reference_draws", "on_overflow", "overflow_key", "rendering", "datasets")
               if k in first},
            "overflow": [{"convention": c, **o} for c in names for o in summaries[c].get("overflow", [])],
            "prefill": prefill, "conventions": conv_info, "auto": reading,
            **combined,
            "full_cot_generation": {"generated": memo.generated, "reused": memo.reused,
                                    "rule": "one generation per distinct full-CoT request (zcp.backends.memo), "
                                            "for auto's reading and every convention's con"},
            **(extra or {}),
        }
        _write_union(out, names)
        write_json(out / SUMMARY, summary)
        (out / TABLE).write_text(format_conventions_table(summary, title))
        plot = plot_conventions(summary, out / PLOT, title or "Contamination Confidence")
    if tracker is not None:
        tracker.table("results", results_rows(summary))
        tracker.table("convention_results", results_rows({"results": summary["convention_results"]},
                                                         ("convention", "split", "variant", "metric", "n", "s",
                                                          "s_ref", "p_value", "c_cont")))
        tracker.table("verdicts", [{k: v[k] for k in ("split", "variant", "p_value", "c_cont", "contaminated")}
                                   for v in summary["verdicts"]])
        tracker.summary({f"{r['split']}/{r['variant']}/{r['convention']}/{r['metric']}/c_cont": r["c_cont"]
                         for r in summary["convention_results"]})
        tracker.image("c_cont", str(plot))
    return summary


def detect_prefill(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, out: str | Path,
                   settings: DetectSettings, prefill: Any = PROBE, auto: Any = None, *,
                   conventions: Sequence[Resolved] | None = None, primary: str | None = None,
                   **kwargs: Any) -> dict[str, Any]:
    """The detection `probe.prefill` asks for: `probe` alone is zcp.probe.detect.detect exactly (the default run);
    one other convention is `detect` with that convention's probe (`convention_probe`; summary.json says which);
    several, or `auto`, are `detect_conventions`. `conventions` (resolved) overrides what `prefill` names (the
    simulation probes the base model with the conventions read from the fine-tuned one). `primary`
    (`probe.primary`) names the primary convention of a run of several; one convention is its own primary."""
    if conventions is None and is_single_default(prefill):
        return detect(backend, datasets, probe, out, settings, **kwargs)
    if conventions is None:
        conventions = listed_conventions(prefill, probe)  # None for auto
    if not is_multi(prefill):  # one convention other than the probe's line: a plain run with its pre-fill
        (conv,) = conventions or ()
        kw = {**kwargs, "extra": {**(kwargs.get("extra") or {}), "prefill": prefill, "convention": conv.to_dict()}}
        return detect(backend, datasets, convention_probe(probe, conv), out, settings, **kw)
    return detect_conventions(backend, datasets, probe, out, settings, conventions, auto, prefill=prefill,
                              primary=primary, **kwargs)


def is_multi(prefill: Any) -> bool:
    """True when `probe.prefill` asks for several conventions (a list of two or more, or `auto`)."""
    entries = parse_prefill(prefill)
    return entries == AUTO or len(entries) > 1


# ---------------------------------------------------------------------------------------------- reports


def format_conventions_table(summary: dict[str, Any], title: str | None = None) -> str:
    """table.md of a multi-convention run: a row per (split, variant, convention) with S_ref, S and C_cont per
    metric, then per (split, variant) the row over all conventions (each metric Bonferroni over the conventions;
    the combined C_cont and verdict over every (convention, metric)); then auto's reading and the notes, with the
    warnings (`zcp.probe.report.warning_lines`)."""
    from zcp.probe.metrics import metric_label
    from zcp.probe.report import c_cont_text, void_lines, warning_lines

    multi = len(summary.get("seeds", [0])) > 1

    def pm(m: float, s: float) -> str:
        return f"{m:.3f} ± {s:.3f}" if multi else f"{m:.3f}"

    def cc(r: dict[str, Any]) -> str:
        if r.get("void"):
            return "VOID"
        return f">{r['c_cont']:.3f}" if r.get("at_floor") else c_cont_text(r["c_cont"], r.get("c_cont_std", 0.0), multi)

    metrics = list(dict.fromkeys(r["metric"] for r in summary["results"]))
    conv_rows: dict[tuple[str, str, str], dict[str, dict]] = {}
    for r in summary["convention_results"]:
        conv_rows.setdefault((r["split"], r["variant"], r["convention"]), {})[r["metric"]] = r
    combined = {(r["split"], r["variant"], r["metric"]): r for r in summary["results"]}
    verdicts = {(v["split"], v["variant"]): v for v in summary["verdicts"]}
    labels = {c["name"]: c["label"] for c in summary.get("conventions", [])}
    head = ["Dataset", "Variant", "Pre-fill", "n"]
    for m in metrics:
        lab = metric_label(m)
        head += [f"{lab} S_ref", f"{lab} S", f"{lab} C_cont"]
    head += ["Combined C_cont", "Verdict"]
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for split, variant in verdicts:
        for (s, v, conv), by_m in conv_rows.items():
            if (s, v) != (split, variant):
                continue
            first = next(iter(by_m.values()))
            cells = [split, variant, f"`{labels.get(conv, conv)}`", str(first["n"])]
            for m in metrics:
                r = by_m.get(m)
                cells += ["–", "–", "–"] if r is None else [pm(r["s_ref"], r["s_ref_std"]), pm(r["s"], r["s_std"]), cc(r)]
            lines.append("| " + " | ".join([*cells, "", ""]) + " |")
        v = verdicts[(split, variant)]
        cells = [split, variant, "**all**", ""]
        for m in metrics:
            r = combined.get((split, variant, m))
            cells += ["", "", "–" if r is None else f"{cc(r)} ({labels.get(r['convention'], r['convention'])})"]
        stab = f" (stability: {v['stability_contaminated_seeds']}/{len(v['per_seed'])} seeds)" if multi else ""
        cells += [c_cont_text(v["c_cont"], 0.0, False), ("contaminated" if v["contaminated"] else "no evidence") + stab]
        lines.append("| " + " | ".join(cells) + " |")
        pv = v.get("primary")
        if pv:
            cells = [split, variant, f"primary `{labels.get(pv['convention'], pv['convention'])}`", ""]
            cells += ["", "", ""] * len(metrics)
            cells += [c_cont_text(pv["c_cont"], 0.0, False), "contaminated" if pv["contaminated"] else "no evidence"]
            lines.append("| " + " | ".join(cells) + " |")
    k = max((v.get("n_tests", 0) for v in summary["verdicts"]), default=0)
    void = " not VOID" if any(r.get("void") for r in summary["convention_results"]) else ""
    lines += ["", f"Combined: Bonferroni over every (pre-fill, metric) test{void} (K = {k}), alpha = {summary['alpha']}; "
              "the **all** row's per-metric C_cont is that metric's Bonferroni over the pre-fills (in brackets the "
              "pre-fill with the smallest p). Each pre-fill's own run: its `conv-<name>/` directory. "
              "`>x`: Monte Carlo p at its floor."]
    lines += void_lines(summary["convention_results"], by="convention")
    if summary.get("conventions"):
        lines += ["", "Pre-fills: " + "; ".join(f"`{c['name']}` = {json.dumps(c['prefill'])} (scored end "
                                                 f"{json.dumps(c['end'])})" for c in summary["conventions"]) + "."]
    reading = summary.get("auto")
    if reading:
        cand = reading["candidates"]
        always = ", ".join(f"`{a}`" for a in reading.get("always") or []) or "none"
        lines += ["", f"**auto**: the conventions ending the model's own full-CoT outputs (a convention is probed "
                  f"when it ends at least {reading['min_share']} of one set's outputs; neutral set: "
                  f"{reading.get('neutral') or 'none'}; probed whatever the reading, probe.auto.always: {always}):", "",
                  "| Set | outputs | " + " | ".join(f"`{labels.get(c, c)}`" for c in cand) + " | none |",
                  "|" + "---|" * (len(cand) + 3)]
        for name, s in reading["sets"].items():
            lines.append(f"| {name} | {s['read']} | " + " | ".join(str(s["ends"].get(c, 0)) for c in cand)
                         + f" | {s['ends'].get('none', 0)} |")
        lines += ["", "Chosen: " + ", ".join(f"`{c}` ({reading['why'][c]})" for c in reading["chosen"]) + "."]
        if reading.get("primary"):
            lines += ["", f"Primary (read from the neutral set only): `{reading['primary']}`, {reading['primary_why']}."]
        for w in reading.get("warnings") or []:
            lines += ["", f"**Warning**: {w}."]
    gen = summary.get("full_cot_generation") or {}
    if gen.get("reused"):
        lines += ["", f"Full-CoT outputs: {gen['generated']} generated, {gen['reused']} requests served again "
                  "(one generation per distinct prompt for every pre-fill)."]
    for w in summary.get("malformed_warnings") or []:
        lines += ["", f"**Warning**: {w['warning']}."]
    lines += warning_lines(summary)
    if summary.get("control"):
        from zcp.probe.control import control_markdown

        lines += [control_markdown(summary["control"]).rstrip("\n"), "",
                  "Control: each row is the metric's pre-fill with the smallest p (Bonferroni over the pre-fills); "
                  "the verdict is Bonferroni over every (pre-fill, metric) not VOID"
                  + "".join(f"; {v['split']}/{v['variant']} primary `{v['primary']['convention']}`: p = "
                            f"{v['primary']['p_value']:.3g}" for v in summary["control"]["verdicts"] if v.get("primary"))
                  + ". Each pre-fill's own comparison: its `conv-<name>/table.md`."]
    if summary.get("rendering"):
        from zcp.probe.prompts import describe_rendering

        lines += ["", f"Prompts: {describe_rendering(summary['rendering'])}."]
    return "\n".join(lines) + "\n"


def plot_conventions(summary: dict[str, Any], path: str | Path, title: str) -> Path:
    """c_cont.png of a multi-convention run: the bars of zcp.probe.report.plot_c_cont, one group per
    (split, variant, pre-fill)."""
    from zcp.probe.report import plot_c_cont

    rows = [{**r, "variant": f"{r['variant']} · {r['convention']}"} for r in summary["convention_results"]]
    return plot_c_cont({"results": rows}, path, title)


# ---------------------------------------------------------------------------------------------- the simulation's stage


def prefill_key(prefill: Any, auto: Any, conventions: Sequence[Resolved] | None) -> dict[str, Any]:
    """What `probe.prefill` adds to a detection run's key (a run dir per choice of conventions; not added for the
    default, so its key is today's): the value, auto's settings, and the conventions given (the base model's)."""
    settings = _without_default_min_read(dataclasses.asdict(auto)) if parse_prefill(prefill) == AUTO and auto else None
    return {"prefill": prefill, "auto": settings,
            "conventions": [c.to_dict() for c in conventions] if conventions else None}


def _without_default_min_read(auto: dict[str, Any]) -> dict[str, Any]:
    """probe.auto's settings without `min_read` at its default: it changes no record (only a warning), so a run keeps
    the key (or directory) it had before the setting existed."""
    from zcp.probe.probe_config import AutoPrefillConfig

    return {k: v for k, v in auto.items() if not (k == "min_read" and v == AutoPrefillConfig.min_read)}


def summary_conventions(summary: Mapping[str, Any]) -> list[Resolved] | None:
    """The conventions a multi-convention run's summary.json probed (None for a single-convention run)."""
    entries = summary.get("conventions")
    if not isinstance(entries, list):
        return None
    return [Resolved(e["name"], e["prefill"], e["end"], e["pattern"], e["label"]) for e in entries]


def stage_probes(prefill: Any, probe: ProbeConfig, auto: Any = None) -> list[ProbeConfig]:
    """The probe of every convention `probe.prefill` may pre-fill (for `auto`, every registered one): what a check
    of the prompts against the model's context must cover before a simulation trains. The default: `[probe]`."""
    if is_single_default(prefill):
        return [probe]
    convs = listed_conventions(prefill, probe)
    if convs is None:  # auto: whatever the reading may choose (every registered convention), and probe.auto.always
        convs = candidate_conventions(probe)
        convs += [c for c in always_conventions(probe, auto) if all(c.prefill != o.prefill for o in convs)]
    return [convention_probe(probe, c) for c in convs]


def did_conventions(base_mc: Any, datasets: Sequence[DetectDataset], probe: ProbeConfig, out: str | Path,
                    settings: DetectSettings, summary: dict[str, Any], tracker: Any = None) -> dict[str, Any]:
    """run_detect's DiD (`base_model.path`) for a multi-convention run: zcp.probe.did.detect_did in each convention's
    `conv-<name>/` (its `base/` run, `did.md` and `did` block; the base model is loaded once per convention), then in
    `<out>/`: `did.md` with every convention's table and the DiD verdict over every (convention, metric) per
    (split, variant) (`combine_conventions`), and summary.json's `did` block (`per_convention`, `verdicts`)."""
    from zcp.probe.did import DID_MD, detect_did

    out = Path(out)
    blocks, parts = {}, []
    for c in summary_conventions(summary) or []:
        sub = conv_dir(out, c.name)
        block = detect_did(base_mc, datasets, convention_probe(probe, c), sub, settings, read_json(sub / SUMMARY))["did"]
        blocks[c.name] = block
        parts.append(f"#### Pre-fill {c.label}\n\n" + (sub / DID_MD).read_text())
    keys = dict.fromkeys((r["split"], r["variant"]) for b in blocks.values() for r in b["rows"])
    void = {c: void_map([r for r in summary.get("convention_results", []) if r.get("convention") == c])
            for c in blocks}  # VOID pairs of the audited run are left out of the DiD verdict too (zcp.probe.void)
    verdicts = [{"split": k[0], "variant": k[1], **combine_conventions(
        {c: {r["metric"]: float(r["p_value"]) for r in b["rows"] if (r["split"], r["variant"]) == k
             and r["metric"] not in void[c].get(k, {})} for c, b in blocks.items()}, settings.alpha)} for k in keys]
    first = next(iter(blocks.values()), {})
    summary = {**summary, "did": {"base_model": first.get("base_model"), "test": first.get("test"),
                                  "alpha": settings.alpha, "per_convention": blocks, "verdicts": verdicts}}
    lines = ["| Dataset | Variant | DiD combined p | C_cont | verdict | driving pre-fill / metric |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {v['split']} | {v['variant']} | {v['p_value']:.3g} | {v['c_cont']:.3f} | "
              f"{'contaminated' if v['contaminated'] else 'no evidence'} | {v.get('driving_convention')} / "
              f"{v.get('driving_metric')} |" for v in verdicts]
    with RunLock(out):
        (out / DID_MD).write_text("### Difference-in-differences per pre-fill, and the verdict over all of them\n\n"
                                  + "\n".join(lines) + "\n\n" + "\n".join(parts))
        write_json(out / SUMMARY, summary)
    if tracker is not None:
        tracker.table("did_verdicts", [{k: v[k] for k in ("split", "variant", "p_value", "c_cont", "contaminated")}
                                       for v in verdicts])
    return summary


def without_default_prefill(cfg: Any) -> Any:
    """`cfg` without `probe.prefill` when it is the default (`probe`) and without `probe.auto` unless it is `auto`
    (and `probe.auto.min_read` at its default even then), and without `probe.primary` when null, `probe.answer_space` when `exact` and `stats.void_malformed` at its
    default: the keys that change no record then, left out of what names the run directory (zcp.config.run_dir
    hashes it), so a default run keeps the directory it had before the keys existed and resumes there."""
    probe = cfg.get("probe") if cfg is not None else None
    if probe is None or not any(k in probe for k in ("prefill", "auto", "primary", "answer_space")):
        return cfg
    from omegaconf import OmegaConf

    from zcp.config import to_dict

    d = to_dict(cfg)
    sub = d["probe"]
    prefill = sub.get("prefill")  # None in a config from before the key existed: the default run
    if prefill is None or is_single_default(prefill):
        sub.pop("prefill", None)
    if prefill is None or parse_prefill(prefill) != AUTO:
        sub.pop("auto", None)
    elif isinstance(sub.get("auto"), dict):
        sub["auto"] = _without_default_min_read(sub["auto"])
    if sub.get("primary") is None:
        sub.pop("primary", None)
    if sub.get("answer_space") in (None, ProbeConfig.answer_space):
        sub.pop("answer_space", None)
    stats = d.get("stats")
    if isinstance(stats, dict) and stats.get("void_malformed") in (None, VOID_MALFORMED):
        stats.pop("void_malformed", None)
    return OmegaConf.create(d)

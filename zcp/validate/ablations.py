"""The paper's ablations of the Zero-CoT Probe: the truncation curve (Figure 2), the full-CoT test
(Table 17) and the sample-size study (Table 18 / Figure 4).

Truncation curve. For every probed unit (C and U originals and their reference draws) the model's own
greedy full-CoT output is generated once (`probe.full_cot_prompt`, `probe.full_cot_max_tokens`); its
stated final answer (the line with the last `\\boxed{`) is removed (`probe.strip_final_answer`), so r = 1
is the whole reasoning without the answer. The reasoning is cut to its first round(r x n) units (tokens
of the backend's tokenizer, else whitespace words) and pre-filled before the zero-CoT final-answer prefix;
acc (greedy, stops at the box's close), p_first and p_all (the gold answer scored after that prefix) are
measured. r = 0 is the zero-CoT probe itself (same prompts). Per r the records are tested exactly as a
detection run is (`zcp.probe.detect.analyse`: one within-item permutation test over all reference draws).

Full-CoT (Table 17). acc = the greedy full-CoT answer equals the gold answer; p_first/p_all after the
full reasoning (r = 1). The same test gives C_cont per metric on C and on U: does the gap survive when
the model may reason?

Detection records (the sample-size study's input, and the optional r = 0 check of the truncation curve) are
used only when they are of a finished detection run (`zcp.core.rundir.detection_unfinished`); a run dir's are those
of its newest finished detect/FT*/ (`zcp.core.rundir.ContaminationRun.newest_detection`). The sample-size study refuses
others (one line naming the dir and what is missing); the r = 0 check is then skipped with that reason in
summary.json, and it runs only after the ablation's own results are written.

Sample size (Table 18). From a detection run's records: R seeded random item subsets of size N per split
(originals with all their reference draws), one verdict per subset with the run's test (B reduced for
speed, stated in the output): detection rate (share of subsets flagged at alpha, per metric and for the
Bonferroni-combined verdict) and C_cont mean ± std.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zcp.backends.base import Backend
from zcp.core.io import RunLock, read_json, stable_hash, write_json, write_jsonl
from zcp.core.items import Item
from zcp.core.records import RecordStore
from zcp.core.rundir import (
    BENCHMARK_ITEMS,
    DETECTION_RECORDS,
    DETECTION_SUMMARY,
    MANIFEST,
    MODEL,
    RUN_CONFIG,
    ContaminationRun,
    detection_unfinished,
)
from zcp.errors import DataError
from zcp.probe.detect import ORIGINAL, REFERENCE, DetectDataset, DetectSettings, analyse
from zcp.probe.metrics import BUILTIN_METRICS, get_metric, metric_label, metric_names
from zcp.probe.prompts import (
    ProbeConfig,
    cut_points,
    generate_cots,
    probe_truncated,
    strip_final_answer,
    truncate_reasoning,
    truncation_unit,
)
from zcp.probe.report import c_cont_text
from zcp.validate.study_config import AblationsJob  # noqa: F401  (registers the ablations job and its groups)

log = logging.getLogger(__name__)

COTS = "cots.jsonl"
TRUNC_RECORDS = "truncation_records.jsonl"
KEY_FIELDS = ("split", "variant", "original_id", "draw")


# ----------------------------------------------------------------------------------------- units and CoTs

def units_of(datasets: Sequence[DetectDataset], max_draws: int | None = None) -> list[tuple[tuple, Item]]:
    """(key, item) per original and reference draw (key = split, variant, original_id, draw); with
    `max_draws` only the first draws of each item."""
    out = []
    for ds in datasets:
        for key, it in ds.work():
            if key[1] not in (ORIGINAL, REFERENCE):
                continue  # paraphrased variants are not part of these ablations
            if key[1] == REFERENCE and max_draws is not None and key[3] >= max_draws:
                continue
            out.append((key, it))
    return out


def _rec_key(r: dict[str, Any]) -> tuple:
    return (r["split"], r["variant"], r["original_id"], int(r["draw"]))


def full_cots(backend: Backend, units: list[tuple[tuple, Item]], probe: ProbeConfig, path: Path) -> dict[str, dict]:
    """Greedy full-CoT output per distinct question (one generate call for all), cached in `path`.

    Returns {question: {cot, reasoning, cot_prediction, cot_correct, cot_malformed}}; the answer fields are
    per question and gold answer, as the probe's `cot_correct` is.
    """
    from zcp.core.answers import extract_boxed, is_parsable

    store = RecordStore(path, key=lambda r: r["question"])  # resumable: a torn last line is dropped, not kept
    have = {r["question"]: r for r in store.load()}
    todo: dict[str, Item] = {}
    for _, it in units:
        if it.question not in have:
            todo.setdefault(it.question, it)
    if todo:
        items = list(todo.values())
        t0 = time.time()
        outs = generate_cots(backend, items, probe)
        log.info("full-CoT generation: %d questions in %.1f s", len(items), time.time() - t0)
        rows = [{"question": it.question, "cot": out, "reasoning": strip_final_answer(out)}
                for it, out in zip(items, outs, strict=True)]
        store.append(rows)
        have.update({r["question"]: r for r in rows})
    out: dict[str, dict] = {}
    for _, it in units:
        row = dict(have[it.question])
        pred = extract_boxed(row["cot"])
        row["cot_prediction"] = pred
        row["cot_malformed"] = not is_parsable(pred)
        out[it.question] = row
    return out


def _fit(backend: Backend, prompts_len: list[int], answer_len: list[int], probe: ProbeConfig) -> list[int]:
    limit = backend.context_length
    if not limit:
        return [0] * len(prompts_len)
    tail = [max(a, probe.zero_cot_max_tokens) for a in answer_len]
    return [max(0, p + t - limit) for p, t in zip(prompts_len, tail, strict=True)]


def truncation_records(backend: Backend, units: list[tuple[tuple, Item]], cots: dict[str, dict], ratios: Sequence[float],
                       probe: ProbeConfig, path: Path, unit: str = "auto") -> list[dict[str, Any]]:
    """Probe records per ratio (resumable: a ratio whose records are all on disk is not probed again).

    A prompt that would not fit the model's context (reasoning + prefix + answer budget) has its kept
    reasoning shortened from the end until it fits; the units dropped are recorded (`overflow_trimmed`).
    """
    from zcp.core.answers import answers_equal

    unit = truncation_unit(backend, unit)
    store = RecordStore(path, key=lambda r: (float(r["ratio"]), *_rec_key(r)))  # torn last line dropped, repaired
    by_ratio: dict[float, dict[tuple, dict]] = defaultdict(dict)
    for r in store.load():
        by_ratio[float(r["ratio"])][_rec_key(r)] = r
    points = {q: cut_points(c["reasoning"], backend, unit) for q, c in cots.items()}
    out: list[dict[str, Any]] = []
    for ratio in ratios:
        ratio = float(ratio)
        done = by_ratio.get(ratio, {})
        todo = [(k, it) for k, it in units if k not in done]
        if todo:
            kept = []
            for _, it in todo:
                text, k, n = truncate_reasoning(cots[it.question]["reasoning"], ratio, points[it.question])
                kept.append([text, k, n, 0])
            count = backend.count_tokens
            if backend.counts_tokens and backend.context_length:
                from zcp.probe.prompts import scored_continuation, truncated_cot_prompt

                for _ in range(64):  # shorten the few prompts that overflow, a unit at a time in steps
                    plen, alen = count([truncated_cot_prompt(it.question, kp[0], probe) for (_, it), kp in
                                        zip(todo, kept, strict=True)],
                                       [scored_continuation(it.answer, probe) for _, it in todo])
                    excess = _fit(backend, plen, alen, probe)
                    if not any(ex and kp[1] for ex, kp in zip(excess, kept, strict=True)):
                        break  # all fit (or cannot shrink further: the zero-CoT probe itself overflows)
                    for (_, it), kp, ex in zip(todo, kept, excess, strict=True):
                        if ex and kp[1]:
                            pts = points[it.question]
                            k = max(0, kp[1] - (ex if unit == "tokens" else 1))
                            kp[3] += kp[1] - k
                            kp[1] = k
                            kp[0] = cots[it.question]["reasoning"][: pts[k - 1]] if k else ""
            t0 = time.time()
            recs = probe_truncated(backend, [it for _, it in todo], [kp[0] for kp in kept], probe)
            log.info("ratio %.2f: %d units probed in %.1f s", ratio, len(todo), time.time() - t0)
            rows = []
            for (key, it), kp, rec in zip(todo, kept, recs, strict=True):
                c = cots[it.question]
                rec.update(dict(zip(KEY_FIELDS, key, strict=True)), id=it.id, ratio=ratio, unit=unit,
                           units_kept=kp[1], units_total=kp[2], overflow_trimmed=kp[3],
                           cot_prediction=c["cot_prediction"], cot_malformed=c["cot_malformed"],
                           cot_correct=(not c["cot_malformed"]) and answers_equal(c["cot_prediction"], it.answer))
                rows.append(rec)
            store.append(rows)
            done = {**done, **{_rec_key(r): r for r in rows}}
        wanted = {k for k, _ in units}
        out += [r for k, r in done.items() if k in wanted]
    return out


# ----------------------------------------------------------------------------------------- analyses

def _results_by(summary: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["split"], r["metric"]): r for r in summary["results"] if r["variant"] == ORIGINAL}


def compare_with_detection(records: list[dict[str, Any]], detection: list[dict[str, Any]]) -> dict[str, Any]:
    """r = 0 against the detection run's records of the same units: the share with the same prompt (so the
    same reference items), the same greedy answer, and the largest difference of each scored field (the record
    fields of the metrics needing log-probs: p_first, p_all; batch numerics only). A check that the ablation
    probes what the detection stage probed."""
    det = {_rec_key(r): r for r in detection}
    pairs = [(r, det[_rec_key(r)]) for r in records if float(r["ratio"]) == 0.0 and _rec_key(r) in det]
    if not pairs:
        return {"units_compared": 0}
    out: dict[str, Any] = {"units_compared": len(pairs),
                           "same_prompt": float(np.mean([a["prompt_hash"] == b.get("prompt_hash") for a, b in pairs]))}
    if all("prediction" in b for _, b in pairs):
        out["same_prediction"] = float(np.mean([a.get("prediction") == b.get("prediction") for a, b in pairs]))
    scored = dict.fromkeys(get_metric(n).field for n in metric_names() if get_metric(n).needs_logprobs)
    for m in scored:
        if all(m in a and m in b for a, b in pairs):
            out[f"max_abs_diff_{m}"] = float(max(abs(a[m] - b[m]) for a, b in pairs))
    return out


def r0_check(records: list[dict[str, Any]], records_path: Path | None, problem: str | None) -> dict[str, Any]:
    """`compare_with_detection` against a finished detection's records; skipped (with the reason) otherwise, so
    this optional check never fails a run whose own results are done."""
    if problem:
        return {"units_compared": 0, "skipped": problem}
    try:
        detection = RecordStore(records_path).read()  # type: ignore[arg-type]
    except (DataError, OSError) as e:  # an optional check: a records file it cannot read is reported, not raised
        return {"units_compared": 0, "skipped": f"{records_path}: {' '.join(str(e).split())}"}
    return compare_with_detection(records, detection)


def truncation_curve(records: list[dict[str, Any]], metrics: Sequence[str], settings: DetectSettings
                     ) -> list[dict[str, Any]]:
    """Per ratio, split and metric: S (originals), S_ref (references), p and C_cont (detect's test)."""
    rows = []
    for ratio in sorted({float(r["ratio"]) for r in records}):
        recs = [r for r in records if float(r["ratio"]) == ratio]
        summ = analyse(recs, metrics, settings)
        verdicts = {v["split"]: v for v in summ["verdicts"] if v["variant"] == ORIGINAL}
        by = _results_by(summ)
        for split, metric in sorted(by, key=lambda sm: (sm[0], list(metrics).index(sm[1]))):
            res = by[(split, metric)]
            kept = [r["units_kept"] / r["units_total"] for r in recs if r["split"] == split and r["units_total"]]
            rows.append({"ratio": ratio, "split": split, "metric": metric, "n": res["n"], "s": res["s"],
                         "s_ref": res["s_ref"], "diff": res["diff"], "p_value": res["p_value"],
                         "c_cont": res["c_cont"], "at_floor": res["at_floor"],
                         "combined_contaminated": verdicts[split]["contaminated"],
                         "mean_share_kept": float(np.mean(kept)) if kept else 0.0,
                         "overflow_trimmed_rows": int(sum(1 for r in recs if r["split"] == split
                                                          and r.get("overflow_trimmed"))),
                         "malformed_rate": float(np.mean([bool(r.get("malformed")) for r in recs
                                                          if r["split"] == split]))})
    return rows


def full_cot_table(records: list[dict[str, Any]], metrics: Sequence[str], settings: DetectSettings
                   ) -> list[dict[str, Any]]:
    """Table 17: acc of the greedy full-CoT answer, p metrics after the full reasoning (r = 1), tested on
    originals vs references, next to the zero-CoT probe (r = 0) on the same units."""
    ratios = {float(r["ratio"]) for r in records}
    if not {0.0, 1.0} <= ratios:
        raise ValueError("the full-CoT table needs the truncation records at r = 0 and r = 1")
    full = []
    for r in records:
        if float(r["ratio"]) == 1.0:
            full.append({**r, "correct": bool(r["cot_correct"])})
    zero = [r for r in records if float(r["ratio"]) == 0.0]
    f_res, z_res = _results_by(analyse(full, metrics, settings)), _results_by(analyse(zero, metrics, settings))
    rows = []
    for split, metric in sorted(f_res, key=lambda sm: (sm[0], list(metrics).index(sm[1]))):
        res, z = f_res[(split, metric)], z_res[(split, metric)]
        rows.append({"split": split, "metric": metric, "n": res["n"], "full_s": res["s"], "full_s_ref": res["s_ref"],
                     "full_p_value": res["p_value"], "full_c_cont": res["c_cont"], "zero_s": z["s"],
                     "zero_s_ref": z["s_ref"], "zero_p_value": z["p_value"], "zero_c_cont": z["c_cont"]})
    return rows


def draw_subsets(ids: Sequence[str], n: int, r: int, seed: int) -> list[list[str]]:
    """Up to `r` distinct random subsets of `n` of `ids` (seeded; fewer when fewer exist, e.g. n = len(ids))."""
    ids = sorted(ids)
    if n > len(ids):
        raise ValueError(f"subset size {n} exceeds the {len(ids)} items")
    rng = np.random.default_rng([seed, n, len(ids)])
    seen: set[tuple[str, ...]] = set()
    out: list[list[str]] = []
    for _ in range(50 * r):
        if len(out) == r:
            break
        pick = tuple(sorted(rng.choice(len(ids), size=n, replace=False).tolist()))
        if pick in seen:
            continue
        seen.add(pick)
        out.append([ids[i] for i in pick])
    return out


def sample_size_study(records: list[dict[str, Any]], metrics: Sequence[str], settings: DetectSettings,
                      sizes: Sequence[int], subsets: int, seed: int = 0,
                      details: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per split, N (each size <= n, and n itself = all) and metric: detection rate over the subsets and
    C_cont mean ± std; metric "combined" is the Bonferroni verdict over `metrics`. With `details`, one row
    per subset (its item ids and p per metric) is appended to it."""
    rows = []
    for split in sorted({r["split"] for r in records}):
        recs = [r for r in records if r["split"] == split and r["variant"] in (ORIGINAL, REFERENCE)]
        ids = sorted({r["original_id"] for r in recs if r["variant"] == ORIGINAL}
                     & {r["original_id"] for r in recs if r["variant"] == REFERENCE})
        by_item: dict[str, list[dict]] = defaultdict(list)
        for r in recs:
            by_item[r["original_id"]].append(r)
        ns = sorted({int(n) for n in sizes if int(n) < len(ids)} | {len(ids)})
        for n in ns:
            subs = draw_subsets(ids, n, subsets, seed)
            per_metric: dict[str, list[tuple[float, bool]]] = defaultdict(list)
            for k, sub in enumerate(subs):
                summ = analyse([r for i in sub for r in by_item[i]], metrics, settings)
                for (_, metric), res in _results_by(summ).items():
                    per_metric[metric].append((res["c_cont"], res["p_value"] < settings.alpha))
                v = next(v for v in summ["verdicts"] if v["variant"] == ORIGINAL)
                per_metric["combined"].append((v["c_cont"], bool(v["contaminated"])))
                if details is not None:
                    details.append({"split": split, "n": n, "subset": k, "ids": sub, "combined_p": v["p_value"],
                                    "p_value": {m: r["p_value"] for (_, m), r in _results_by(summ).items()}})
            for metric in [*metrics, "combined"]:
                vals = per_metric[metric]
                cc = [c for c, _ in vals]
                rows.append({"split": split, "n": n, "all": n == len(ids), "subsets": len(subs), "metric": metric,
                             "detection_rate": float(np.mean([f for _, f in vals])),
                             "c_cont_mean": float(np.mean(cc)), "c_cont_std": float(np.std(cc, ddof=1)) if len(cc) > 1 else 0.0})
    return rows


# ----------------------------------------------------------------------------------------- reports

def _lab(metric: str) -> str:
    return "combined (Bonferroni)" if metric == "combined" else metric_label(metric)


def truncation_markdown(rows: list[dict[str, Any]]) -> str:
    """Figure 2 as a table: S and S_ref per ratio, split and metric, with C_cont."""
    lines = ["| r (share of CoT kept) | Dataset | Metric | S (original) | S_ref (reference) | S - S_ref | C_cont |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = f">{r['c_cont']:.3f}" if r["at_floor"] else c_cont_text(r["c_cont"], 0.0, False)
        lines.append(f"| {r['ratio']:.2f} | {r['split']} | {_lab(r['metric'])} | {r['s']:.3f} | {r['s_ref']:.3f} | "
                     f"{r['diff']:+.3f} | {c} |")
    return "\n".join(lines) + "\n"


def full_cot_markdown(rows: list[dict[str, Any]]) -> str:
    """Table 17 shape: full-CoT S_ref, S, C_cont next to the zero-CoT probe's."""
    lines = ["| Dataset | Metric | full-CoT S_ref | full-CoT S | full-CoT C_cont | zero-CoT S_ref | zero-CoT S | "
             "zero-CoT C_cont |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['split']} | {_lab(r['metric'])} | {r['full_s_ref']:.3f} | {r['full_s']:.3f} | "
                     f"{c_cont_text(r['full_c_cont'], 0.0, False)} | {r['zero_s_ref']:.3f} | {r['zero_s']:.3f} | "
                     f"{c_cont_text(r['zero_c_cont'], 0.0, False)} |")
    return "\n".join(lines) + "\n"


def sample_size_markdown(rows: list[dict[str, Any]], alpha: float) -> str:
    """Table 18 shape: per split and N, detection rate at alpha and C_cont mean ± std per metric."""
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    head = ["Dataset", "N", "subsets"] + [f"{_lab(m)} rate / C_cont" for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(r["split"], r["n"], r["metric"]): r for r in rows}
    for split, n in sorted({(r["split"], r["n"]) for r in rows}):
        first = by[(split, n, metrics[0])]
        cells = [split, f"{n} (all)" if first["all"] else str(n), str(first["subsets"])]
        for m in metrics:
            r = by[(split, n, m)]
            cells.append(f"{r['detection_rate']:.2f} / {c_cont_text(r['c_cont_mean'], r['c_cont_std'], True)}")
        lines.append("| " + " | ".join(cells) + " |")
    return f"Detection rate = share of subsets flagged at alpha = {alpha}.\n\n" + "\n".join(lines) + "\n"


def _metrics_and_split_styles(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """The metrics of `rows` in order of appearance, and a line style per split (C solid, U dashed, ...)."""
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    splits = sorted({r["split"] for r in rows})
    return metrics, dict(zip(splits, ["-", "--", ":", "-."] * len(splits), strict=False))


def plot_truncation(rows: list[dict[str, Any]], path: str | Path, title: str = "Truncation curve") -> Path:
    """Figure 2: S on originals and S_ref on references versus the share of the CoT kept, per metric,
    for C (solid) and U (dashed); a second row gives C_cont."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics, styles = _metrics_and_split_styles(rows)
    fig, axes = plt.subplots(2, len(metrics), figsize=(4.2 * len(metrics), 6.4), squeeze=False)
    for j, m in enumerate(metrics):
        for split, style in styles.items():
            rr = sorted((r for r in rows if r["metric"] == m and r["split"] == split), key=lambda r: r["ratio"])
            if not rr:
                continue
            x = [r["ratio"] for r in rr]
            axes[0][j].plot(x, [r["s"] for r in rr], style, marker="o", color="tab:red", label=f"{split} original")
            axes[0][j].plot(x, [r["s_ref"] for r in rr], style, marker="s", color="tab:blue", label=f"{split} reference")
            axes[1][j].plot(x, [r["c_cont"] for r in rr], style, marker="o", color="black", label=split)
        axes[0][j].set_title(_lab(m))
        axes[0][j].set_ylim(-0.02, 1.02)
        axes[1][j].set_ylim(0.45, 1.02)
        axes[1][j].axhline(0.5, color="grey", lw=0.5)
        axes[1][j].set_xlabel("share of the model's CoT kept (r)")
    axes[0][0].set_ylabel("score")
    axes[1][0].set_ylabel("C_cont")
    axes[0][0].legend(fontsize=7)
    axes[1][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_sample_size(rows: list[dict[str, Any]], path: str | Path, title: str = "C_cont versus N") -> Path:
    """Figure 4: C_cont mean ± std and detection rate versus N, per metric, for C and U."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics, styles = _metrics_and_split_styles(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for k, m in enumerate(metrics):
        for split, style in styles.items():
            rr = sorted((r for r in rows if r["metric"] == m and r["split"] == split), key=lambda r: r["n"])
            if not rr:
                continue
            x = [r["n"] for r in rr]
            color = f"C{k}"
            axes[0].errorbar(x, [r["c_cont_mean"] for r in rr], yerr=[r["c_cont_std"] for r in rr], fmt=style,
                             marker="o", color=color, capsize=2, label=f"{_lab(m)} {split}")
            axes[1].plot(x, [r["detection_rate"] for r in rr], style, marker="o", color=color, label=f"{_lab(m)} {split}")
    ns = sorted({r["n"] for r in rows})
    for ax, lab in ((axes[0], "C_cont (mean ± std over subsets)"), (axes[1], "detection rate")):
        ax.set_xscale("log")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
        ax.set_xlabel("N (items per subset)")
        ax.set_ylabel(lab)
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


# ----------------------------------------------------------------------------------------- the run

@dataclass
class AblationInputs:
    """What the ablations run on: datasets (C/U with references), the model's path, detection records."""

    datasets: list[DetectDataset]
    model_path: str | None
    records_path: Path | None
    settings: DetectSettings
    source: dict[str, Any]
    records_note: str | None = None  # why a run dir has no usable detection records (its detections unfinished)


def detection_records_problem(records_path: Path | None, note: str | None = None) -> str | None:
    """Why `records_path` cannot be used as a detection run's records (None: it can): no such file, or its
    detection run is not finished (`zcp.core.rundir.detection_unfinished`), or it holds the records of several answer
    conventions (a multi-convention run: each conv-<name>/records.jsonl holds one); `note` when there is no path at all."""
    if records_path is None:
        return note or "no detection records (set ablation.records or run the detection stage first)"
    if not records_path.is_file():
        return f"{records_path}: no such file"
    problem = detection_unfinished(records_path.parent)
    if problem is None:  # a multi-convention run's records (zcp.probe.multiconv): one convention's at a time
        from zcp.core.records import RecordStore

        convs = sorted({str(r.get("convention")) for r in RecordStore(records_path).read()})
        if len(convs) > 1:
            return (f"{records_path} holds the records of {len(convs)} answer conventions ({', '.join(convs)}); "
                    f"point ablation.records at one of them: {records_path.parent}/conv-<name>/records.jsonl")
    return problem


def inputs_from_run(run_dir: str | Path, stats: Any = None) -> AblationInputs:
    """C/U items (manifest.json + benchmark_items.jsonl) and references built as the detection stage
    builds them (`zcp.simulate.pipeline._references`, same draws count and seed), from a contamination run dir."""
    from zcp.benchmarks.loaders import load_items
    from zcp.benchmarks.split import Manifest
    from zcp.config.schemas import validate
    from zcp.simulate.simulation_config import SimulationJob
    from zcp.simulate.splits import simulation_splits

    run = ContaminationRun(run_dir).require(RUN_CONFIG, MANIFEST, BENCHMARK_ITEMS, MODEL)
    root = run.path
    cfg = run.config
    checked = validate({k: cfg[k] for k in ("detect", "stats") if k in cfg})
    det, st = checked["detect"], checked["stats"]
    items = load_items(str(run.items_path), format="items")
    manifest = Manifest.load(str(run.manifest_path))
    # detect.reference_seed null = the run's seed (a stored run config holds it; SimulationJob's default otherwise)
    ref_seed = det.reference_seed if det.reference_seed is not None else int(cfg.get("seed", SimulationJob.seed))
    groups, refs, _ = simulation_splits(cfg, items, manifest, run_dir=root)
    datasets = [DetectDataset(split, sub, {it.id: refs[it.id] for it in sub}) for split, sub in groups.items()]
    stats = stats or st
    settings = DetectSettings(seeds=det.seeds, bootstrap_samples=stats.bootstrap_samples, alpha=stats.alpha,
                              test=stats.test, reference_draws="per_seed")
    found, passed = run.newest_detection()
    if passed:
        log.warning("%s%s", "; ".join(passed), f"; using {found}" if found is not None else "")
    records = found / DETECTION_RECORDS if found is not None else None
    return AblationInputs(datasets, str(run.model_path), records, settings,
                          {"run_dir": str(root), "reference_seed": ref_seed, "m": det.m, "seeds": list(det.seeds)},
                          records_note=passed[0] if found is None and passed else None)


def _markdown_all(summary: dict[str, Any]) -> str:
    parts = [f"# ZCP ablations — {summary.get('model')}\n"]
    if "truncation" in summary:
        t = summary["truncation"]
        parts.append(f"## Truncation curve (paper Figure 2)\n\nUnit: {t['unit']}; the model's own greedy full-CoT with "
                     f"its final-answer line removed, cut to its first r share, then the zero-CoT prefix. r = 0 is the "
                     f"zero-CoT probe. {t['n_cots']} CoTs generated in {t['cot_seconds']:.0f} s; probing "
                     f"{t['probe_seconds']:.0f} s. r = 0 against the detection run's records: "
                     f"{json.dumps(t.get('r0_vs_detection', {}))}.\n\n" + truncation_markdown(t["rows"]))
    if "full_cot" in summary:
        parts.append("## Full-CoT ablation (paper Table 17)\n\nAcc: the greedy full-CoT answer; P metrics: after the "
                     "full reasoning (r = 1). Same test as detection.\n\n" + full_cot_markdown(summary["full_cot"]["rows"]))
    if "sample_size" in summary:
        s = summary["sample_size"]
        parts.append(f"## Sample size (paper Table 18 / Figure 4)\n\nRecords: `{s['records']}`; {s['subsets']} seeded "
                     f"random item subsets per N (seed {s['seed']}); test {s['test']} with B = {s['bootstrap_samples']} "
                     f"per seed x {len(s['seeds'])} seeds for the continuous metrics (exact for acc/con).\n\n"
                     + sample_size_markdown(s["rows"], s["alpha"]))
    return "\n".join(parts)


def run_ablations(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_ablations.py: inputs from a contamination run dir (or model + data),
    the chosen ablations, records, summary.json, ablations.md, PNG plots, config.yaml and W&B."""
    from zcp.backends.registry import build_backend
    from zcp.config import run_dir, save_config, to_dict, validate
    from zcp.core.io import model_fingerprint, seed_everything
    from zcp.core.tracking import Tracker
    from zcp.errors import ConfigError
    from zcp.probe.datasets import load_datasets
    from zcp.probe.detect import probe_config
    from zcp.validate.study_config import ABLATIONS

    job = validate(cfg, job="ablations")["__job__"]  # the checked AblationsJob: its dataclasses hold the defaults
    ab = job.ablation
    which = list(job.ablations)
    bad = sorted(set(which) - set(ABLATIONS))
    if bad or not which:
        raise ConfigError(f"ablations={which}: choose a non-empty subset of {list(ABLATIONS)}")
    seed_everything(job.seed)
    if job.run_dir:
        inputs = inputs_from_run(job.run_dir, job.stats)
        model_cfg = {**to_dict(cfg.model), "path": inputs.model_path}
    else:
        needs_model = bool({"truncation", "full_cot"} & set(which))
        if needs_model and not job.model.path:
            raise ConfigError("run_dir or model.path (with data.path and data.reference_path) is required")
        model_cfg = to_dict(cfg.model)
        st = job.stats
        datasets = load_datasets(job.data)[0] if needs_model else []
        seeds = [job.seed] if job.seeds is None else list(job.seeds)  # AblationsJob.seeds: null = [seed]
        inputs = AblationInputs(datasets, str(model_cfg.get("path")), None,
                                DetectSettings(seeds=seeds, bootstrap_samples=st.bootstrap_samples, alpha=st.alpha,
                                               test=st.test, reference_draws=st.reference_draws),
                                {"data": str(job.data.path)})
    records_path = Path(ab.records) if ab.records else inputs.records_path
    records_problem = detection_records_problem(records_path, None if ab.records else inputs.records_note)
    if "sample_size" in which and records_problem:
        raise ConfigError(f"ablation.records={records_path}: the sample-size study needs a finished detection "
                          f"run's records: {records_problem}")
    if "full_cot" in which and "truncation" not in which:
        which.append("truncation")  # the full-CoT table reads the truncation records at r = 0 and 1
    ratios = sorted({float(r) for r in ab.ratios} | ({0.0, 1.0} if "full_cot" in which else set()))
    probe = probe_config(cfg.probe, model_cfg)  # the model's own probe settings (model.probe.*) over the group
    weights = {"model": model_fingerprint(model_cfg["path"]) if "truncation" in which else None,
               "records": stable_hash(records_path.read_text(), 16) if "sample_size" in which else None}
    name = Path(str(job.run_dir)).name if job.run_dir else \
        Path(str(model_cfg["path"])).name if "truncation" in which else records_path.parent.name  # type: ignore[union-attr]
    out = run_dir(cfg, "ablations", name, extra=weights)
    summary: dict[str, Any] = {"model": model_cfg.get("path"), "ablations": which, "source": inputs.source,
                               "output_dir": str(out)}
    recs_trunc: list[dict[str, Any]] = []
    with RunLock(out), Tracker(job.logger, run_config=to_dict(cfg), run_dir=str(out), job_type="ablations") as tr:
        save_config(cfg, out)
        metrics = list(ab.metrics)
        if "truncation" in which:
            backend = build_backend(model_cfg)
            units = units_of(inputs.datasets, ab.max_draws)
            fp = stable_hash(json.dumps([backend.fingerprint, probe.__dict__, ab.unit,
                                         [(k, it.question, it.answer) for k, it in units]], default=str), 32)
            meta = out / "run_meta.json"
            if meta.exists() and read_json(meta).get("fingerprint") != fp:
                raise ConfigError(f"{out} holds ablation records of another model/probe/items; use a new output_dir")
            write_json(meta, {"fingerprint": fp, "n_units": len(units)})
            t0 = time.time()
            cots = full_cots(backend, units, probe, out / COTS)
            t1 = time.time()
            recs = recs_trunc = truncation_records(backend, units, cots, ratios, probe, out / TRUNC_RECORDS, ab.unit)
            t2 = time.time()
            rows = truncation_curve(recs, metrics, inputs.settings)
            summary["truncation"] = {"r0_vs_detection": {"units_compared": 0, "pending": True},
                                     "unit": truncation_unit(backend, ab.unit),
                                     "ratios": ratios, "n_units": len(units), "n_cots": len({it.question for _, it in units}), "cot_seconds": t1 - t0,
                                     "probe_seconds": t2 - t1, "max_draws": ab.max_draws, "rows": rows}
            plot_truncation(rows, out / "truncation.png", f"Truncation curve — {name}")
            tr.table("truncation", rows)
            tr.image("truncation", str(out / "truncation.png"))
            if "full_cot" in which:
                summary["full_cot"] = {"rows": full_cot_table(recs, metrics, inputs.settings)}
                tr.table("full_cot", summary["full_cot"]["rows"])
        if "sample_size" in which:
            recs = RecordStore(records_path).read()  # type: ignore[arg-type]
            det_summary = records_path.parent / DETECTION_SUMMARY
            det_metrics = read_json(det_summary)["metrics"] if det_summary.exists() else \
                [m for m in BUILTIN_METRICS if not get_metric(m).needs_full_cot]  # acc, p_first, p_all
            s = inputs.settings
            sub_settings = DetectSettings(seeds=s.seeds, bootstrap_samples=ab.subset_bootstrap_samples, alpha=s.alpha,
                                          test=s.test, reference_draws="all", progress=False)
            t0 = time.time()
            details: list[dict[str, Any]] = []
            rows = sample_size_study(recs, det_metrics, sub_settings, ab.sizes, ab.subsets, ab.subset_seed, details)
            write_jsonl(out / "sample_size_subsets.jsonl", details)
            summary["sample_size"] = {"records": str(records_path), "subsets": ab.subsets, "seed": ab.subset_seed,
                                      "test": s.test, "bootstrap_samples": ab.subset_bootstrap_samples,
                                      "seeds": list(s.seeds), "alpha": s.alpha, "seconds": time.time() - t0, "rows": rows}
            plot_sample_size(rows, out / "sample_size.png", f"C_cont versus N — {name}")
            tr.table("sample_size", rows)
            tr.image("sample_size", str(out / "sample_size.png"))
        # the ablation's own results are on disk before the optional r = 0 check runs
        write_json(out / "summary.json", summary)
        (out / "ablations.md").write_text(_markdown_all(summary))
        if "truncation" in summary:
            summary["truncation"]["r0_vs_detection"] = r0_check(recs_trunc, records_path, records_problem)
            write_json(out / "summary.json", summary)
            (out / "ablations.md").write_text(_markdown_all(summary))
        tr.artifact("ablations", "zcp-ablations", [str(out / "summary.json"), str(out / "ablations.md")])
    print((out / "ablations.md").read_text())
    print(f"wrote {out}")
    return summary

"""The contamination run's own measurement, the Table 6 analogue: full-CoT greedy accuracy before and after
fine-tuning on C (leaked, not leaked) and U, per model stage (base, after SFT, final), with per-item records
under ``<run>/eval/`` (`evaluate_stage`) and the table as JSON and markdown (`table6`, `table6_markdown`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zcp.core.io import append_jsonl, read_json, read_jsonl, write_json, write_jsonl
from zcp.core.items import Item
from zcp.simulate.rewards import score_completion
from zcp.simulate.simulation_config import EvalConfig

log = logging.getLogger(__name__)

STAGE_NAMES = {"base": "Before", "after_sft": "After SFT", "final": "After (final)"}


def full_cot_eval(model: Any, tokenizer: Any, items: Sequence[Item], *, max_new_tokens: int = 256,
                  batch_size: int = 64, chat: bool = True,
                  chat_template_kwargs: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Greedy full-CoT generation on each item's question; per-item pred / correct / malformed records.

    Rendered with the model config's `chat_template_kwargs` (Qwen3's enable_thinking=False), as training and
    detection render it. (The keyword defaults serve direct library calls; the run passes `eval.*`.)"""
    from zcp.backends import wrap_model
    from zcp.backends.base import GenerationRequest, Prompt

    backend = wrap_model(model, tokenizer, gen_batch_size=batch_size,
                         chat_template_kwargs=dict(chat_template_kwargs or {}))
    outs = backend.generate([GenerationRequest(Prompt(user=it.question, chat=chat), max_new_tokens=max_new_tokens)
                             for it in items])
    rows = []
    for it, text in zip(items, outs, strict=True):
        s = score_completion(text, it.answer)
        rows.append({"id": it.id, "gold": it.answer, "pred": s["pred"], "correct": bool(s["correct"]),
                     "malformed": bool(s["malformed"]), "formatted": bool(s["formatted"]), "output": text})
    return rows


def eval_subset(items: Sequence[Item], max_items: int | None) -> list[Item]:
    """The items of a split that are evaluated: sorted by id, the first `eval.max_items` (null: all)."""
    ordered = sorted(items, key=lambda it: it.id)
    return ordered if not max_items else ordered[: int(max_items)]


def cuda() -> bool:
    """Whether a CUDA device is available (training and evaluation run there when it is)."""
    import torch

    return torch.cuda.is_available()


def evaluate_stage(stage: str, model_fn: Callable[[], Any], tokenizer: Any, splits: dict[str, list[Item]],
                   run_dir: Path, ecfg: EvalConfig, chat: bool,
                   chat_template_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
    """Accuracy per split for one model (cached in eval/<stage>.json); returns (summary, was_run).

    Generation runs in chunks of `eval.batch_size` items; each chunk's rows are appended to
    eval/<stage>.partial.jsonl as it ends and one line says how far the stage is, with an ETA from the chunks so
    far (a real model's full-CoT generation takes minutes to hours on a CPU). A killed stage resumes from those rows:
    the items already generated are not generated again (greedy decoding: the same rows)."""
    out = run_dir / "eval" / f"{stage}.json"
    if out.exists():
        return read_json(out), False
    partial = run_dir / "eval" / f"{stage}.partial.jsonl"
    done: dict[tuple[str, str], dict[str, Any]] = {}
    if partial.exists():
        done = {(r["split"], r["id"]): r for r in read_jsonl(partial, tolerate_partial_last_line=True)}
    todo = [(split, it) for split, its in splits.items() for it in its if (split, it.id) not in done]
    total = sum(len(its) for its in splits.values())
    if todo:
        model = model_fn()
        dev = ecfg.device or ("cuda" if cuda() else "cpu")  # null: under accelerate, rank 0 evaluates on its GPU
        model.to(dev)
        if done:
            log.info("eval %s: resuming, %d of %d items already generated", stage, len(done), total)
        size, t0, n_new = max(1, int(ecfg.batch_size)), time.perf_counter(), 0
        for start in range(0, len(todo), size):
            chunk = todo[start:start + size]
            rows = full_cot_eval(model, tokenizer, [it for _, it in chunk], max_new_tokens=int(ecfg.max_new_tokens),
                                 batch_size=size, chat=chat, chat_template_kwargs=chat_template_kwargs)
            for (split, _), r in zip(chunk, rows, strict=True):
                r["split"] = split
                done[(split, r["id"])] = r
            append_jsonl(partial, rows)
            n_new += len(rows)
            el = time.perf_counter() - t0
            eta = el / n_new * (len(todo) - n_new)
            log.info("eval %s: %d/%d items, %.0f s, ETA %.0f s", stage, len(done), total, el, eta)
    summary: dict[str, Any] = {}
    records = []
    for split, its in splits.items():
        if not its:
            continue
        rows = [done[(split, it.id)] for it in its]
        records += rows
        summary[split] = {"n": len(rows), "acc": sum(r["correct"] for r in rows) / len(rows),
                          "malformed": sum(r["malformed"] for r in rows) / len(rows)}
    write_jsonl(run_dir / "eval" / f"{stage}.jsonl", records)
    write_json(out, summary)
    partial.unlink(missing_ok=True)
    return summary, True


def table6(evals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Table 6 analogue: rows = splits, columns = model stages (base, after SFT, final), accuracy and Δ."""
    stages = list(evals)
    splits = [s for s in ("C_leaked", "C_not_leaked", "C", "U") if any(s in evals[st] for st in stages)]
    rows = []
    for sp in splits:
        row: dict[str, Any] = {"split": sp, "n": next(evals[st][sp]["n"] for st in stages if sp in evals[st])}
        for st in stages:
            row[st] = evals[st].get(sp, {}).get("acc")
            row[f"{st}_malformed"] = evals[st].get(sp, {}).get("malformed")
        first, last = row.get(stages[0]), row.get(stages[-1])
        row["delta"] = None if first is None or last is None else last - first
        rows.append(row)
    return {"stages": stages, "rows": rows}


def table6_markdown(t: Mapping[str, Any]) -> str:
    """The Table 6 analogue as markdown (accuracy in %)."""
    st = t["stages"]
    head = "| Split | N | " + " | ".join(STAGE_NAMES.get(s, s) for s in st) + " | Δ |"
    lines = ["Full-CoT greedy accuracy (%) before and after contamination.", "", head,
             "|" + "---|" * (len(st) + 3)]
    pct = lambda v: "–" if v is None else f"{100 * v:.1f}"  # noqa: E731
    for r in t["rows"]:
        d = "–" if r["delta"] is None else f"{100 * r['delta']:+.1f}"
        lines.append(f"| {r['split']} | {r['n']} | " + " | ".join(pct(r[s]) for s in st) + f" | {d} |")
    return "\n".join(lines) + "\n"

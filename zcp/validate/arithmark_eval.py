"""ArithMark as a validation job: log-likelihood multiple-choice evaluation through a `Backend`, and its runner.

`evaluate_arithmark` scores each option of a `zcp.benchmarks.arithmark` record as the continuation of its prompt
(the spec's cloze form) and reports per-stage accuracy; `run_arithmark` is the Hydra job of
evaluate/run_arithmark.py (conf/arithmark.yaml): build or load the benchmark, write it, and with a model score
it, resumably. The generator, the record schema and the conversion to `Item`s stay in
`zcp.benchmarks.arithmark`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zcp.backends.base import Backend, Prompt, ScoreRequest
from zcp.benchmarks.arithmark import (
    CHANCE,
    N_OPTIONS,
    STAGES,
    arithmark_question,
    format_number,
    generate_arithmark,
    load_arithmark,
)

log = logging.getLogger(__name__)


def record_hash(record: Mapping[str, Any]) -> str:
    """Stable short hash of a record's content (ties predictions to the exact record they scored)."""
    from zcp.core.io import stable_hash

    return stable_hash(json.dumps(dict(record), sort_keys=True))


def score_arithmark(backend: Backend, records: Sequence[Mapping[str, Any]],
                    batch_size: int = 64) -> list[dict[str, Any]]:
    """Per-record predictions: the option with the highest mean token log-likelihood wins (ties: first)."""
    # The options are NOT listed in the prompt: the spec scores each option as the continuation of
    # "EXPR =" ("log-likelihood over ending tokens", the cloze form of lm-eval-harness). Listing A-D
    # would turn the natural continuation into a letter and let the model copy a listed number instead
    # of computing, so the numbers would no longer be comparable to the spec's table.
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    requests = [
        ScoreRequest(Prompt(user=arithmark_question(r), chat=False), " " + format_number(o))
        for r in records for o in r["options"]
    ]
    results = []
    for start in range(0, len(requests), batch_size):
        chunk = requests[start:start + batch_size]
        out = backend.score(chunk)
        if len(out) != len(chunk):
            raise RuntimeError(f"backend returned {len(out)} scores for {len(chunk)} requests")
        results.extend(out)
    rows = []
    for i, r in enumerate(records):
        scores = []
        for res in results[N_OPTIONS * i:N_OPTIONS * (i + 1)]:
            if res.n_tokens == 0:
                raise RuntimeError(f"backend scored an option of {r['id']} with no tokens")
            scores.append(sum(res.token_logprobs) / res.n_tokens)  # length-normalised
        pred = max(range(N_OPTIONS), key=lambda j: (scores[j], -j))
        rows.append({"id": r["id"], "record_hash": record_hash(r), "stage": int(r["stage"]),
                     "expression": r["expression"], "pred_index": pred,
                     "answer_index": int(r["answer_index"]), "correct": pred == int(r["answer_index"]),
                     "option_scores": scores})
    return rows


def summarize_arithmark(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-stage accuracy, their unweighted mean (the spec's Avg), n per stage and chance (0.25)."""
    per_stage: dict[int, list[bool]] = {}
    for row in rows:
        per_stage.setdefault(int(row["stage"]), []).append(bool(row["correct"]))
    accuracy = {s: sum(v) / len(v) for s, v in sorted(per_stage.items())}
    return {
        "per_stage": accuracy,
        "n_per_stage": {s: len(v) for s, v in sorted(per_stage.items())},
        "average": sum(accuracy.values()) / len(accuracy) if accuracy else float("nan"),
        "n": len(rows),
        "chance": CHANCE,
    }


def evaluate_arithmark(backend: Backend, records: Sequence[Mapping[str, Any]],
                       batch_size: int = 64) -> dict[str, Any]:
    """Log-likelihood multiple-choice evaluation: summary (see `summarize_arithmark`) plus per-item `items`."""
    rows = score_arithmark(backend, records, batch_size=batch_size)
    return {**summarize_arithmark(rows), "items": rows}


def format_arithmark_table(results: Mapping[str, Any], model_name: str) -> str:
    """Markdown table shaped like the spec's (Stage 1..5, Avg, in percent)."""
    acc = {int(k): v for k, v in results["per_stage"].items()}
    cells = [f"{100 * acc[s]:.2f}%" if s in acc else "–" for s in STAGES]
    header = "| Model | " + " | ".join(f"Stage {s}" for s in STAGES) + " | Avg |"
    sep = "|" + "---|" * (len(STAGES) + 2)
    return "\n".join([header, sep, f"| {model_name} | " + " | ".join(cells) + f" | {100 * results['average']:.2f}% |"])


# ---------------------------------------------------------------------------------------------- runner


def run_arithmark(cfg: Mapping[str, Any], backend: Backend | None = None) -> dict[str, Any]:
    """Hydra job: build (or load) ArithMark, write it, and evaluate a model if `model.path` (or `backend`) is set.

    Writes to `cfg.output_dir`: arithmark.jsonl; with a model also predictions.jsonl (appended as
    records finish, skipped on restart), summary.json and table.md. Returns the summary (or counts).
    """
    from omegaconf import OmegaConf
    from tqdm import tqdm

    from zcp.config.schemas import validate
    from zcp.core.io import seed_everything, sha256_file, write_jsonl
    from zcp.core.records import RecordStore
    from zcp.core.tracking import Tracker

    c = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)  # for W&B
    job = validate(c, job="arithmark")["__job__"]  # the checked ArithMarkJob: its dataclasses hold the defaults
    out = Path(str(job.output_dir))
    out.mkdir(parents=True, exist_ok=True)
    if job.data_path:
        records = load_arithmark(job.data_path)
    else:
        records = generate_arithmark(job.n_per_stage, job.seed, tuple(job.stages))
    data_file = out / "arithmark.jsonl"
    write_jsonl(data_file, records)
    summary: dict[str, Any] = {"n_records": len(records), "data_file": str(data_file),
                               "data_sha256": sha256_file(data_file), "seed": job.seed}
    model = job.model
    if backend is None and model.path:
        from zcp.backends.registry import build_backend  # lazy: torch/transformers only with a model

        seed_everything(job.seed)  # generation has its own seeded streams; this covers the model
        backend = build_backend(model)
    with Tracker(job.logger, run_config=c, run_dir=str(out), job_type="arithmark") as tracker:
        if backend is None:
            tracker.summary(summary)
            (out / "summary.json").write_text(json.dumps(summary, indent=2))
            return summary
        pred_file = out / "predictions.jsonl"
        hashes = {r["id"]: record_hash(r) for r in records}
        # resume (zcp.core.records.RecordStore: a torn last line is dropped): keep a finished row only if it was
        # scored on this very record (same id and content); stale rows are dropped from the file
        store = RecordStore(pred_file, key=lambda r: r["id"])
        done = {r["id"]: r for r in store.load(lambda rows: [r for r in rows
                                                             if hashes.get(r["id"]) == r.get("record_hash")])}
        todo = [r for r in records if r["id"] not in done]
        chunk = job.chunk_size  # >= 1 (ArithMarkJob)
        for start in tqdm(range(0, len(todo), chunk), desc="arithmark", unit="chunk"):
            rows = score_arithmark(backend, todo[start:start + chunk], batch_size=N_OPTIONS * chunk)
            store.append(rows)
            done.update((r["id"], r) for r in rows)
        result = summarize_arithmark([done[r["id"]] for r in records])
        name = model.name or (Path(str(model.path)).name if model.path else backend.name)
        table = format_arithmark_table(result, name)
        summary.update(result, model=name)
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        (out / "table.md").write_text(table + "\n")
        tracker.summary({f"acc/stage_{s}": a for s, a in result["per_stage"].items()} | {"acc/avg": result["average"]})
        tracker.table("arithmark/accuracy", [{"stage": s, "accuracy": a, "n": result["n_per_stage"][s]}
                                             for s, a in result["per_stage"].items()])
        log.info("ArithMark results\n%s", table)
        return summary

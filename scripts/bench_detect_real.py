"""A default detection run on a real model against a plain transformers loop over the same prompts.

    .venv/bin/python scripts/bench_detect_real.py --n 20 --json outputs/bench/detect_real_n20.json
    .venv/bin/python scripts/bench_detect_real.py --n 150 --model-config smollm2-135m \
        --model-path ~/.cache/zcp/models/smollm2-135m-instruct --json outputs/bench/detect_real_n150.json

One invocation, three steps:

1. the reference set: `evaluate/run_build_data.py data=gsm8k reference.m=3 data.limit=N` (subprocess, not timed;
   `--reference FILE` uses a built one instead);
2. `evaluate/run_detect.py model=<--model-config> data=gsm8k data.limit=N data.missing_reference=skip` with the
   default metrics (acc, con, p_first, p_all), timed as a whole subprocess (imports, model load, reading, probing,
   statistics, reports), and its cost plan read from summary.json (ETA against the measured probing);
3. the plain loop, in this process, over the distinct prompts run_detect probed (the same model config, the same
   prompts, rendered and tokenised before the clock starts): `model.generate` (greedy, the same max_new_tokens, the
   model config's gen_batch_size rows per batch in length order, left-padded, EOS as the model's generation config
   says, no stop strings) for the full-CoT and the zero-CoT prompts, and one forward pass per batch of
   `batch_size` rows for the score requests (prompt + gold answer and its end).

Printed and written to `--json`: both wall times, their ratio (target: run_detect within 1.5x of the plain loop),
the plain loop's parts, run_detect's fixed cost (start-up, model load, reading, statistics and reports: a rerun of
the same command, which resumes with every unit in records) and the ratio without it, and the machine's load. The plain loop does less than
run_detect (no stop strings, no answer parsing, no records or statistics) but also cannot stop a row at its answer:
with stop strings (`probe` answer conventions) run_detect can be faster than it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.5  # run_detect wall / plain loop wall


def _detect_overrides(args: argparse.Namespace, reference: Path, out: Path) -> list[str]:
    over = [f"model={args.model_config}", "data=gsm8k", f"data.limit={args.n}", f"data.reference_path={reference}",
            "data.missing_reference=skip", f"output_dir={out}", "logger.mode=disabled", "run.progress=false"]
    if args.model_path:
        over.append(f"model.path={args.model_path}")
    return over + list(args.detect_arg)


def _subprocess(cmd: list[str], fatal: bool = True) -> float | None:
    """Wall seconds of one subprocess run from the repository root; on failure its output is shown and the script
    stops (`fatal`) or None is returned."""
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    wall = time.perf_counter() - t0
    if res.returncode:
        msg = f"failed ({res.returncode}): {' '.join(cmd)}\n{(res.stdout + res.stderr)[-3000:]}"
        if fatal:
            sys.exit(msg)
        print(msg, file=sys.stderr)
        return None
    return wall


def build_reference(args: argparse.Namespace, work: Path) -> Path:
    """GSM8K's first N test items with m = 3 reference draws each (run_build_data), or --reference."""
    if args.reference:
        return Path(args.reference)
    out = work / "reference"
    if not (out / "reference.jsonl").exists():
        _subprocess([sys.executable, "evaluate/run_build_data.py", "data=gsm8k", "reference.m=3",
                     f"data.limit={args.n}", f"output_dir={out}", "logger.mode=disabled"])
    return out / "reference.jsonl"


def plain_loop(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """The plain transformers loop over run_detect's distinct prompts (see the module docstring); seconds per part."""
    import torch
    from hydra import compose, initialize_config_dir

    import zcp.config  # noqa: F401  (resolvers and typed groups)
    from zcp.backends.hf import from_config
    from zcp.config.schemas import validate
    from zcp.probe.datasets import load_datasets
    from zcp.probe.detect import probe_config
    from zcp.probe.prompts import answer_score_requests, full_cot_prompt, zero_cot_prompt

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name="detect", overrides=overrides)
    job = validate(cfg, job="detect")["__job__"]
    mc = job.model
    probe = probe_config(cfg.probe, cfg.model)
    datasets, _ = load_datasets(job.data)
    items = list({(it.question, it.answer): it for ds in datasets for _, it in ds.work()}.values())
    backend = from_config(mc)  # as run_detect builds it
    model = backend.model
    zero = backend.encode_prompts([zero_cot_prompt(it.question, probe) for it in items])
    full = backend.encode_prompts([full_cot_prompt(it.question, probe) for it in items])
    scored = [e.ids for e in backend.encode_for_scoring(
        answer_score_requests([zero_cot_prompt(it.question, probe) for it in items], [it.answer for it in items],
                              probe))]

    def generate(prompts: list[list[int]], max_new: int) -> float:
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        t0 = time.perf_counter()
        with torch.inference_mode():
            for k in range(0, len(order), mc.gen_batch_size):
                ids, mask = backend.collate([prompts[i] for i in order[k : k + mc.gen_batch_size]], left=True)
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                               temperature=None, top_p=None, top_k=None, pad_token_id=backend.pad_id)
        return time.perf_counter() - t0

    def forward(rows: list[list[int]]) -> float:
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        t0 = time.perf_counter()
        with torch.inference_mode():
            for k in range(0, len(order), mc.batch_size):
                ids, mask = backend.collate([rows[i] for i in order[k : k + mc.batch_size]])
                model(input_ids=ids, attention_mask=mask)
        return time.perf_counter() - t0

    parts = {"full_cot_s": generate(full, probe.full_cot_max_tokens),
             "zero_cot_s": generate(zero, probe.zero_cot_max_tokens),
             "score_s": forward(scored)}
    return {"prompts": len(items), "gen_batch_size": mc.gen_batch_size, "batch_size": mc.batch_size,
            "full_cot_max_tokens": probe.full_cot_max_tokens, "zero_cot_max_tokens": probe.zero_cot_max_tokens,
            **{k: round(v, 2) for k, v in parts.items()}, "total_s": round(sum(parts.values()), 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20, help="GSM8K test items (data.limit)")
    ap.add_argument("--model-config", default="smollm2-135m", help="conf/model/<name> (default smollm2-135m)")
    ap.add_argument("--model-path", default=None, help="model.path (default: the model config's)")
    ap.add_argument("--reference", default=None, help="a built reference.jsonl (default: built here, m = 3)")
    ap.add_argument("--work", default=None, help="folder for the reference and run_detect's run (default: temp)")
    ap.add_argument("--detect-arg", action="append", default=[], help="an extra run_detect override (repeatable)")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    from machine import git_commit, machine_state

    work = Path(args.work or tempfile.mkdtemp(prefix="bench_detect_real_"))
    work.mkdir(parents=True, exist_ok=True)
    reference = build_reference(args, work)
    out = work / f"detect_{time.strftime('%H%M%S')}"
    over = _detect_overrides(args, reference, out)
    before = machine_state()
    detect_s = _subprocess([sys.executable, "evaluate/run_detect.py", *over])
    assert detect_s is not None
    summary = json.loads((out / "summary.json").read_text())  # before the rerun rewrites it
    print(f"run_detect: {detect_s:.1f} s wall", flush=True)
    # resumes with nothing left to probe: the fixed cost (a checkout edited in between refuses it: None)
    startup_s = _subprocess([sys.executable, "evaluate/run_detect.py", *over], fatal=False)
    plain = plain_loop(args, over)
    after = machine_state()
    plan = summary.get("cost_plan", {})
    report = {
        "n_items": args.n, "model_config": args.model_config, "model_path": args.model_path,
        "units": plan.get("units"), "distinct_prompts": plan.get("probes"), "commit": git_commit(REPO),
        "run_detect_s": round(detect_s, 2), "run_detect_startup_s": None if startup_s is None else round(startup_s, 2),
        "plain_loop": plain, "ratio": round(detect_s / plain["total_s"], 3),
        "ratio_without_startup": None if startup_s is None else
        round(max(detect_s - startup_s, 0.0) / plain["total_s"], 3), "target": TARGET,
        "cost_plan": plan, "machine_before": before, "machine_after": after, "run_dir": str(out),
    }
    eta = plan.get("eta_seconds")
    first = (plan.get("warmup") or {}).get("seconds", 0.0)
    print(f"{args.n} GSM8K items, {plan.get('units')} units ({plan.get('probes')} distinct prompts), "
          f"model {args.model_config}")
    fixed = "unmeasured" if startup_s is None else f"{startup_s:.1f} s"
    print(f"run_detect: {detect_s:.1f} s wall (fixed cost, measured by a rerun with nothing to probe: {fixed})")
    print(f"plain loop: {plain['total_s']:.1f} s (full-CoT {plain['full_cot_s']:.1f} s, zero-CoT "
          f"{plain['zero_cot_s']:.1f} s, score {plain['score_s']:.1f} s)")
    bare = report["ratio_without_startup"]
    print(f"ratio run_detect / plain: {report['ratio']:.2f}x ("
          f"{'?' if bare is None else f'{bare:.2f}'}x without the fixed cost; target <= {TARGET}x)")
    if eta is not None:
        print(f"cost plan: first chunk {first:.1f} s + ETA {eta:.0f} s = {first + eta:.0f} s estimated probing")
        print(f"  {plan.get('line')}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()

"""Scoring throughput of the batched backend (p_first / p_all), against a one-item-per-forward loop and
a plain batched forward (the ceiling): the same token ids in length-sorted batches padded to their longest
row, all logits, no log-softmax. The backend pads each row to a bucket of its own length and batches
only rows of one bucket (batch invariance), so this ratio includes that cost.

    .venv/bin/python scripts/bench_scoring.py [--n 500] [--model DIR] [--repeats 5]
    .venv/bin/python scripts/bench_scoring.py --end-to-end [--n 5000] [--n-small 500]
    .venv/bin/python scripts/bench_scoring.py --end-to-end --small-model --runs 3 --n 5000 --n-small 500 \
        --json outputs/bench/scoring_e2e.json
    .venv/bin/python scripts/bench_scoring.py --bound [--n 5000] [--repeats 5] [--json FILE]
    .venv/bin/python scripts/bench_scoring.py --phases [--small-model --small-scale 4] [--runs 3] [--json FILE]
    .venv-bench/bin/python scripts/bench_scoring.py --vs-lm-eval [--model DIR ...] [--runs 3] [--n N] \
        [--batch-size 32] [--threads T] [--json FILE]          # after `make bench-env`

Targets: batched >= 3x the one-item loop, and >= 0.8x the raw forward. Default model: the shipped
base model (zcp/assets/base_model) if present, else a tiny Llama built here.

--end-to-end times whole `evaluate/run_detect.py` runs (p_first/p_all; a subprocess each, so imports,
data loading, tokenisation, record writing and the statistics all count) on n and n_small scored units
(items + one reference row each), and reports the marginal rate (n - n_small) / (T_n - T_small) next to
the raw batched forward of the same n units' token ids, measured in the same process run. Their gap, per
unit, is the run's host work on the critical path (`host_ms_per_unit`). `--small-model` adds a 2-layer x
96-hidden Llama built here (the shipped tokenizer, random weights, saved to a temp dir; forward ~0.25 ms per
unit on 2 CPU threads, where host work dominates); `--runs` repeats both models in one invocation, interleaved,
and reports every run and the median ratio (targets: >= 0.8x small, >= 0.9x shipped); `--json` writes them.
`--small-scale K` runs the small model at K x n and K x n_small units: its forward is ~4x faster than the shipped
one's, so at the same units its marginal rests on a few seconds beside a start-up that varies by a second or more;
`--model-scale K` does the same for the shipped model (or --model), whose start-up on a slow spell of the shared box
varies by several seconds beside a ~10 s marginal at 5,000 units.

--bound measures, for both models, the most that ratio can reach on this machine (`bound`): the forward at the
default threads and at one, and the two host steps no run can skip (the chat template and tokenising the prompts).

--phases times run_detect's phases in-process (a wall timer around each, `PHASES`) at the two sizes and reports each
phase's marginal ms per unit: where the host work between the forward and the whole run goes.

--vs-lm-eval puts the same log-likelihood requests (the probe's p_first/p_all score requests) through
lm-evaluation-harness's `HFLM.loglikelihood` and through zcp's scoring, in one process, interleaved, after checking
that both score the same token ids to the same log-probs (`vs_lm_eval`); target: zcp >= 1.0x lm-eval's units/s.
Default models: the shipped one and SmolLM2-135M-Instruct from the zcp cache (`make real-model`).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from machine import cpu_split, git_commit, machine_state  # scripts/machine.py

from zcp.backends.base import Prompt, ScoreRequest
from zcp.backends.hf import HFBackend, padded_length
from zcp.probe.prompts import ProbeConfig, answer_score_requests, zero_cot_prompt

# the host-overhead targets: end-to-end run_detect / raw batched forward, median of three runs in one invocation
E2E_TARGETS = {"small": 0.8, "shipped": 0.9}


def _items(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """n distinct word problems (a benchmark holds each question once) with their answers."""
    rng = random.Random(seed)
    out: dict[str, str] = {}
    while len(out) < n:
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
        q = f"Mia has {a} stickers. She buys {c} packs of {b} stickers each. How many stickers does she have now?"
        if rng.random() < 0.5:
            q += " Then she gives away half of what she bought, rounded down."
        out.setdefault(q, str(a + b * c))
    return list(out.items())


def _probe_requests(n: int) -> tuple[list[Prompt], list[ScoreRequest]]:
    """The zero-CoT prompts of `_items(n)` and the probe's own score requests on them (p_first/p_all: the gold answer
    and the brace closing the box), what every mode here scores."""
    cfg = ProbeConfig(metrics=("p_first", "p_all"))
    qa = _items(n)
    prompts = [zero_cot_prompt(q, cfg) for q, _ in qa]
    return prompts, answer_score_requests(prompts, [a for _, a in qa], cfg)


def _write_report(path: str | None, report: dict[str, Any]) -> None:
    """`report` as JSON at `path` (--json), when one is given."""
    if path:
        import json

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {path}")

def _backend(model_dir: str | None) -> HFBackend:
    from zcp.config import asset_path

    path = model_dir or asset_path("base_model")
    if Path(path).exists():
        # batch settings of conf/model/tiny.yaml
        return HFBackend.from_pretrained(path, device="cpu", max_batch_size=256, max_batch_tokens=16384)
    from zcp.core.testing import tiny_llama, train_tokenizer

    tok = train_tokenizer([q + " " + a for q, a in _items(300, 1)], vocab_size=512)
    return HFBackend(tiny_llama(tok, hidden=128, layers=4, heads=4), tok, name="random-tiny-llama")


def _raw_forward(backend: HFBackend, reqs: list[ScoreRequest]) -> tuple[Callable[[], None], list, list]:
    """The ceiling: a plain batched forward over the exact ids the backend scores (encoded once, outside the
    timing); returns (the timed callable, the encodings, the plain batches)."""
    enc = backend.encode_for_scoring(reqs)
    token_batches = [backend.collate([enc[i].ids for i in b])
                     for b in backend.batches([e.end for e in enc], backend.max_batch_size)]

    @torch.inference_mode()
    def raw() -> None:
        for ids, mask in token_batches:
            backend.model(input_ids=ids, attention_mask=mask)

    return raw, enc, token_batches


def _time(fn, repeats: int, warm: bool = True) -> float:
    if warm:
        fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _write_benchmark(root: Path, n_units: int) -> None:
    """n_units / 2 items, each with one reference row (a different question with its own answer)."""
    from zcp.benchmarks.loaders import save_items
    from zcp.core.items import Item

    pairs = _items(n_units)
    half = n_units // 2
    save_items(root / "data.jsonl", [Item(f"q{i:05d}", q, a) for i, (q, a) in enumerate(pairs[:half])])
    save_items(root / "ref.jsonl", [Item(f"q{i:05d}::r0", q, a, metadata={"original_id": f"q{i:05d}"})
                                    for i, (q, a) in enumerate(pairs[half : 2 * half])])


def _detect_overrides(root: Path, model: str, extra: Sequence[str]) -> list[str]:
    """The run_detect overrides every timed run uses: `root`'s benchmark (`_write_benchmark`), its run dir
    root/out, p_first/p_all, no logger or progress bar; then `extra`."""
    return [f"model.path={model}", f"data.path={root / 'data.jsonl'}", f"data.reference_path={root / 'ref.jsonl'}",
            "logger=none", f"output_dir={root / 'out'}", "probe.metrics=[p_first,p_all]", "run.progress=false",
            *extra]


def _run_detect(root: Path, model: str, *extra: str, profile: str | None = None,
                tree: Path | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole `evaluate/run_detect.py` subprocess on `root`'s benchmark (under cProfile,
    written to `profile`, when given); CPU = the child's user + system time, all its threads. `tree`: run the
    run_detect of that source tree (its evaluate/ and zcp/, e.g. an export of an older commit) instead of this
    one's."""
    import resource
    import subprocess
    import sys

    repo = tree or Path(__file__).resolve().parents[1]
    env = {**os.environ, "WANDB_MODE": "disabled", **({"PYTHONPATH": str(tree)} if tree else {})}
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    cmd = [sys.executable, *prof, str(repo / "evaluate" / "run_detect.py"), *_detect_overrides(root, model, extra)]

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    t, c = time.perf_counter(), cpu()
    subprocess.run(cmd, check=True, capture_output=True, cwd=repo, env=env)
    return time.perf_counter() - t, cpu() - c


def small_model(out_dir: Path, layers: int = 2, hidden: int = 96) -> Path:
    """A randomly initialised Llama of `layers` x `hidden` with the shipped model's tokenizer, saved to `out_dir`
    (safetensors + tokenizer) so that run_detect subprocesses load it like any model folder; nothing downloaded.

    Its batched forward costs ~0.25 ms per scored unit on 2 CPU threads: the regime of a GPU serving small and
    mid-size models, where the host work of a run (tokenisation, records, statistics) is what limits it."""
    from transformers import AutoTokenizer

    from zcp.config import asset_path
    from zcp.core.testing import tiny_llama

    tok = AutoTokenizer.from_pretrained(asset_path("base_model"))
    model = tiny_llama(tok, hidden=hidden, layers=layers, heads=4, max_positions=256)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def _e2e_once(model: str, sizes: dict[int, Path], raw: Callable[[], None], repeats: int,
              extra: Sequence[str], tree: Path | None = None, best_of: int = 1) -> dict[str, float]:
    """One run of one model: whole run_detect at both sizes (fresh run dirs; the best of `best_of` each, the
    sizes alternating), the raw forward of the large size's ids timed before and after each of them in this
    process (best of `repeats` spread over those points, so a busy spell of a shared machine does not fall on
    one side only). Wall figures (the target's) and CPU figures (user + system, all threads: less sensitive
    to other processes on the machine)."""
    import shutil

    raws: list[tuple[float, float]] = []

    def time_raw() -> None:
        for _ in range(max(1, repeats // (2 * best_of + 1))):
            w, c = time.perf_counter(), time.process_time()
            raw()
            raws.append((time.perf_counter() - w, time.process_time() - c))

    runs: dict[int, tuple[float, float]] = {}
    for _ in range(best_of):
        for n, root in sorted(sizes.items()):
            time_raw()
            shutil.rmtree(root / "out", ignore_errors=True)  # a fresh run each time (a rerun would resume)
            w, c = _run_detect(root, model, *extra, tree=tree)
            runs[n] = (min(w, runs[n][0]), min(c, runs[n][1])) if n in runs else (w, c)
    time_raw()
    n_small, n = min(sizes), max(sizes)
    raw_wall, raw_cpu = min(w for w, _ in raws), min(c for _, c in raws)
    marginal = (n - n_small) / (runs[n][0] - runs[n_small][0])
    marginal_cpu = (n - n_small) / (runs[n][1] - runs[n_small][1])
    raw_ups, raw_cpu_ups = n / raw_wall, n / raw_cpu
    return {"wall_small_s": runs[n_small][0], "wall_s": runs[n][0], "cpu_small_s": runs[n_small][1],
            "cpu_s": runs[n][1], "marginal_units_per_s": marginal, "raw_units_per_s": raw_ups,
            "ratio": marginal / raw_ups, "host_ms_per_unit": 1e3 * (1 / marginal - 1 / raw_ups),
            "raw_ms_per_unit": 1e3 / raw_ups, "ratio_cpu": marginal_cpu / raw_cpu_ups,
            "host_cpu_ms_per_unit": 1e3 * (1 / marginal_cpu - 1 / raw_cpu_ups), "raw_cpu_ms_per_unit": 1e3 / raw_cpu_ups}


def _profile(model: str, root: Path, path: str, extra: Sequence[str], top: int = 20,
             tree: Path | None = None) -> dict[str, Any]:
    """One more run_detect of `root`'s benchmark under cProfile (stats written to `path`); prints and returns the
    `top` entries by own time and zcp's functions by cumulative time, with the wall and the model's forward."""
    import pstats
    import shutil

    shutil.rmtree(root / "out", ignore_errors=True)
    wall = _run_detect(root, model, *extra, profile=path, tree=tree)[0]
    st = pstats.Stats(path)
    rows = [(fn, *v[:4]) for fn, v in st.stats.items()]  # type: ignore[attr-defined]
    forward = max((r[4] for r in rows if r[0][2] == "forward" and "modeling_llama" in r[0][0]), default=0.0)
    print(f"profile of one run_detect at {root.name} units, {tree or 'this tree'} ({wall:.1f} s wall under cProfile; "
          f"the model's forward {forward:.2f} s cumulative)")

    def listed(picked: list, key: int, what: str) -> list[dict[str, Any]]:
        print(f"  top {top} by {what}:")
        out = []
        for (file, line, fn), _, calls, own, cum in sorted(picked, key=lambda r: -r[key])[:top]:
            where = f"{Path(file).name}:{line}({fn})"
            print(f"    {own:7.3f} s own {cum:7.3f} s cum {calls:9d} calls  {where}")
            out.append({"function": where, "own_s": round(own, 4), "cum_s": round(cum, 4), "calls": calls})
        return out

    return {"wall_s": wall, "forward_cum_s": forward, "by_own_time": listed(rows, 3, "own time"),
            "zcp_by_cumulative_time": listed([r for r in rows if "/zcp/" in r[0][0]], 4, "cumulative time (zcp)")}


def end_to_end(args: argparse.Namespace) -> dict[str, Any]:
    """Marginal units/s of whole run_detect runs vs the raw batched forward (see the module docstring), for the
    shipped model (or --model) and, with --small-model, a 2 x 96 Llama built here; `--runs` runs of each in this
    invocation, interleaved (a noisy spell slows both models alike), the median ratio reported. With
    `--baseline-tree DIR` each run also times DIR's run_detect (another version of the code, e.g. `git archive`
    of the commit before a change) right after this tree's, against the same raw forward: before/after figures
    of one invocation."""
    import statistics
    import tempfile

    from zcp.config import asset_path

    start = machine_state()
    print(f"start {start['time_utc']} UTC, load average {start.get('loadavg')}", flush=True)
    report: dict[str, Any] = {"units": {"n": args.n, "n_small": args.n_small, "small_scale": args.small_scale,
                                        "model_scale": args.model_scale},
                              "runs": args.runs,
                              "best_of": args.best_of, "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                              "date": time.strftime("%Y-%m-%d %H:%M"), "commit": git_commit(Path(__file__).resolve().parents[1]),
                              "baseline_tree": args.baseline_tree, "overrides": list(args.detect_args),
                              "start": start, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        models = {"shipped" if not args.model else Path(args.model).name: args.model or asset_path("base_model")}
        if args.small_model:
            models["small"] = str(small_model(Path(tmp) / "small_model"))
        # each model's two sizes, times its scale (`--small-scale`, `--model-scale`): more units put more marginal
        # seconds beside the same start-up noise (the small model's forward is ~4x faster than the shipped one's)
        scale = {name: args.small_scale if name == "small" else args.model_scale for name in models}
        sizes = {name: {k * c: Path(tmp) / str(k * c) for c in (args.n_small, args.n)} for name, k in scale.items()}
        for root in {root for by_n in sizes.values() for root in by_n.values()}:
            root.mkdir()
            _write_benchmark(root, int(root.name))
        raws = {name: _raw_forward(_backend(path), _probe_requests(args.n * scale[name])[1])[0]
                for name, path in models.items()}
        for warm in raws.values():
            warm()
        trees: dict[str, Path | None] = {"": None}
        if args.baseline_tree:
            trees["@baseline"] = Path(args.baseline_tree).resolve()
        runs: dict[str, list[dict[str, float]]] = {name + t: [] for name in models for t in trees}
        for r in range(args.runs):
            for name, path in models.items():
                for t, tree in trees.items():
                    fig = _e2e_once(path, sizes[name], raws[name], args.repeats, args.detect_args, tree, args.best_of)
                    runs[name + t].append(fig)
                    print(f"  run {r + 1} {name + t:17s} run_detect {fig['wall_small_s']:5.1f} s / {fig['wall_s']:5.1f} "
                          f"s, marginal {fig['marginal_units_per_s']:8.1f} units/s, raw {fig['raw_units_per_s']:8.1f} "
                          f"units/s, ratio {fig['ratio']:.2f}x, host {fig['host_ms_per_unit']:.3f} ms/unit; CPU "
                          f"time: ratio {fig['ratio_cpu']:.2f}x, host {fig['host_cpu_ms_per_unit']:.3f} ms/unit",
                          flush=True)
        profiled = {}
        if args.profile:  # each tree's run_detect, the small model when built, at n units
            for t, tree in trees.items():
                name = "small" if "small" in models else next(iter(models))
                profiled[t or "this"] = _profile(models[name], sizes[name][args.n * scale[name]], args.profile + t,
                                                 args.detect_args, tree=tree)
    end = machine_state()
    report.update(end=end, cpu_split=cpu_split(start, end))
    print(f"end {end['time_utc']} UTC, load average {end.get('loadavg')}; machine CPU time over the run: "
          + ", ".join(f"{k} {v:.0%}" for k, v in report["cpu_split"].items()))
    print(f"median of {args.runs} runs (units = items + 1 reference row each; torch threads = "
          f"{torch.get_num_threads()}):")
    for name, figs in runs.items():
        med = {k: statistics.median(f[k] for f in figs) for k in figs[0]}
        model = name.split("@")[0]
        target = E2E_TARGETS.get(model)
        report["models"][name] = {"path": models[model] if model != "small" else "built (2 layers x 96 hidden)",
                                  "tree": str(trees["@baseline"]) if name.endswith("@baseline") else "this",
                                  "units": sorted(sizes[model]),
                                  "runs": figs, "median": med, "target": target}
        each = ", ".join(f"{f['ratio']:.2f}" for f in figs)
        print(f"  {name:17s} end to end / raw forward = {med['ratio']:.2f}x (runs: {each})"
              + (f", target >= {target}x" if target else "")
              + f"; raw {med['raw_ms_per_unit']:.3f} ms/unit, host {med['host_ms_per_unit']:.3f} ms/unit; "
              f"CPU time: ratio {med['ratio_cpu']:.2f}x, host {med['host_cpu_ms_per_unit']:.3f} ms/unit")
    if args.profile:
        report["profile"] = profiled
    _write_report(args.json, report)
    return report


def bound(args: argparse.Namespace) -> dict[str, Any]:
    """The most the end-to-end ratio can reach on this machine, for the shipped model and the small one, from two
    measurements in this process (no run_detect):

    - `sequential`: raw / (raw + render + tokenise). A run must at least render its prompts with the chat template
      and tokenise them (the plan phase's own calls, `HFBackend.render_all` and `encode_prompts`, on a fresh
      backend so nothing is cached). Where that host work cannot overlap the forward, the ratio is at most this
      with everything else (reading, the forward's own bucket padding, records, statistics) at zero.
    - `overlapped`: raw at 2 threads / raw at 1 thread: the ratio if every host step ran on a core of its own while
      the forward kept the other, i.e. the bound of pipelining host work under the forward on this machine.

    A target above the larger of the two cannot be met on this machine; one below it may or may not be (the bound
    leaves out every other host step). The raw forward's CPU time / wall at the default threads says whether it
    leaves a core idle for host work (2.0 on 2 cores: it does not)."""
    import tempfile

    from zcp.config import asset_path

    prompts, reqs = _probe_requests(args.n)
    threads = torch.get_num_threads()
    start = machine_state()
    report: dict[str, Any] = {"units": args.n, "torch_threads": threads, "cpus": os.cpu_count(), "start": start,
                              "date": time.strftime("%Y-%m-%d %H:%M"), "commit": git_commit(Path(__file__).resolve().parents[1]),
                              "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        models = {"shipped": asset_path("base_model"), "small": str(small_model(Path(tmp) / "small_model"))}
        for name, path in models.items():
            be = _backend(path)
            raw = _raw_forward(be, reqs)[0]
            raw()  # warm-up
            best = {threads: float("inf"), 1: float("inf")}
            cpu_per_wall = 0.0
            for _ in range(args.repeats):  # the two thread counts alternate: a busy spell slows both
                for th in (threads, 1):
                    torch.set_num_threads(th)
                    w, c = time.perf_counter(), time.process_time()
                    raw()
                    w = time.perf_counter() - w
                    if w < best[th] and th == threads:
                        cpu_per_wall = (time.process_time() - c) / w
                    best[th] = min(best[th], w)
            torch.set_num_threads(threads)
            render = tokenise = float("inf")
            for _ in range(args.repeats):
                fresh = HFBackend(be.model, be.tokenizer, max_batch_size=be.max_batch_size)  # empty caches
                t = time.perf_counter()
                fresh.render_all(prompts)
                t1 = time.perf_counter()
                fresh.encode_prompts(prompts)  # the rendering is a lookup now: this is the tokenisation
                render, tokenise = min(render, t1 - t), min(tokenise, time.perf_counter() - t1)
            raw_ms, raw1_ms = 1e3 * best[threads] / args.n, 1e3 * best[1] / args.n
            render_ms, tok_ms = 1e3 * render / args.n, 1e3 * tokenise / args.n
            seq = raw_ms / (raw_ms + render_ms + tok_ms)
            over = raw_ms / raw1_ms
            target = E2E_TARGETS[name]
            report["models"][name] = {"raw_ms_per_unit": raw_ms, "raw_1thread_ms_per_unit": raw1_ms,
                                      "raw_cpu_per_wall": cpu_per_wall, "render_ms_per_unit": render_ms,
                                      "tokenise_ms_per_unit": tok_ms, "sequential_bound": seq,
                                      "overlapped_bound": over, "target": target,
                                      "target_excluded": max(seq, over) < target}
            print(f"  {name:8s} raw forward {raw_ms:.3f} ms/unit at {threads} threads (CPU/wall {cpu_per_wall:.2f}), "
                  f"{raw1_ms:.3f} at 1; render {render_ms:.3f}, tokenise {tok_ms:.3f} ms/unit -> at most "
                  f"{seq:.2f}x sequential, {over:.2f}x overlapped (target {target}x: "
                  f"{'not excluded' if max(seq, over) >= target else 'excluded'} by this bound)", flush=True)
    end = machine_state()
    report.update(end=end, cpu_split=cpu_split(start, end))
    _write_report(args.json, report)
    return report


# --phases: what run_detect spends per unit, by phase. (label, module, attribute); nested phases overlap (render
# and tokenise run inside the plan and again, as cache lookups, inside encode for scoring; the forward inside score).
PHASES = (
    ("read the data", "zcp.probe.run", "load_datasets"),
    ("plan (fit to context)", "zcp.probe.detect", "plan_units"),
    ("  render (chat template)", "zcp.backends.tokenized", "TokenizedBackend.render_all"),
    ("  tokenise", "zcp.backends.tokenized", "TokenizedBackend._tokenize"),
    ("probe and record", "zcp.probe.detect", "collect_records"),
    ("  score", "zcp.backends.hf", "HFBackend.score"),
    ("    encode for scoring", "zcp.backends.tokenized", "TokenizedBackend.encode_for_scoring"),
    ("    forward", "zcp.backends.hf", "HFBackend._logits"),
    ("  append records", "zcp.core.records", "RecordStore.append"),
    ("statistics and reports", "zcp.probe.detect", "write_results"),
    ("  statistics", "zcp.probe.detect", "analyse"),
    ("    Monte Carlo tests", "zcp.core.permutation", "permutation_pvalue_mc"),
)
WHOLE = "whole run (after imports)"


def _phases_child(detect_args: Sequence[str]) -> None:
    """Run evaluate/run_detect.py in this process with a wall timer around each of PHASES; print one line
    `PHASES <json>` (seconds per phase). Each attribute is replaced where it is looked up at call time (the
    module's global, the class's method), so callers reach the timed version."""
    import functools
    import importlib
    import json
    import runpy
    import sys

    spent: dict[str, float] = {}

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t
        return wrapper

    for label, module, attr in PHASES:
        owner: Any = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, timed(label, getattr(owner, name)))
    repo = Path(__file__).resolve().parents[1]
    sys.argv = [str(repo / "evaluate" / "run_detect.py"), *detect_args]
    t = time.perf_counter()
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:  # hydra's exit; a failed run must not read as figures
        if e.code:
            raise
    spent[WHOLE] = time.perf_counter() - t
    print("PHASES " + json.dumps(spent), flush=True)


def phases(args: argparse.Namespace) -> dict[str, Any]:
    """Marginal ms per unit of each of run_detect's phases (PHASES), on the small model (`--small-model`) or the
    shipped one: whole runs at n and n_small units (times --small-scale / --model-scale), `--runs` of each, sizes
    alternating, the fastest of each phase kept; (T_n - T_small) / (n - n_small) per phase, as --end-to-end takes
    the whole run's. Host work = the whole run minus the forward; next to it what the targets allow at this
    forward (forward / target - forward)."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from zcp.config import asset_path

    start = machine_state()
    small = bool(args.small_model)
    scale = args.small_scale if small else args.model_scale
    n_small, n = args.n_small * scale, args.n * scale
    report: dict[str, Any] = {"model": "small" if small else "shipped", "units": [n_small, n], "runs": args.runs,
                              "date": time.strftime("%Y-%m-%d %H:%M"), "start": start,
                              "commit": git_commit(Path(__file__).resolve().parents[1])}
    with tempfile.TemporaryDirectory() as tmp:
        model = str(small_model(Path(tmp) / "small_model")) if small else (args.model or asset_path("base_model"))
        best: dict[int, dict[str, float]] = {}
        for _ in range(args.runs):
            for size in (n_small, n):
                root = Path(tmp) / str(size)
                if not root.exists():
                    root.mkdir()
                    _write_benchmark(root, size)
                shutil.rmtree(root / "out", ignore_errors=True)
                cmd = [sys.executable, __file__, "--phases-child", *_detect_overrides(root, model, args.detect_args)]
                env = {**os.environ, "WANDB_MODE": "disabled"}
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
                got = json.loads(next(line for line in out.splitlines() if line.startswith("PHASES "))[7:])
                best[size] = {k: min(v, best.get(size, {}).get(k, v)) for k, v in got.items()}
    labels = [label for label, _, _ in PHASES] + [WHOLE]
    per_unit = {k: 1e3 * (best[n].get(k, 0.0) - best[n_small].get(k, 0.0)) / (n - n_small) for k in labels}
    forward = per_unit["    forward"]
    host = per_unit[WHOLE] - forward
    report.update(ms_per_unit=per_unit, forward_ms_per_unit=forward, host_ms_per_unit=host,
                  ratio=forward / per_unit[WHOLE],
                  host_allowed_ms_per_unit={str(t): forward / t - forward for t in sorted(set(E2E_TARGETS.values()))},
                  end=machine_state())
    print(f"{report['model']} model, {n} vs {n_small} units, fastest of {args.runs} runs each; marginal ms per unit:")
    for k in labels:
        print(f"  {k:28s} {per_unit[k]:8.4f}")
    allowed = ", ".join(f"{v:.4f} at {t}x" for t, v in report["host_allowed_ms_per_unit"].items())
    print(f"  host work (whole - forward) {host:.4f} ms/unit; in-process ratio {report['ratio']:.2f}x; the targets allow "
          f"host work of {allowed} at this forward")
    _write_report(args.json, report)
    return report


# --vs-lm-eval: the probe's score requests through lm-evaluation-harness's HFLM and through zcp, same process.
LM_EVAL_TARGET = 1.0  # zcp units/s over lm-eval's, median of the runs, per model
LOGPROB_TOLERANCE = 1e-4  # |sum of continuation log-probs, zcp - lm-eval| per request, checked before any timing
REAL_MODEL = "smollm2-135m-instruct"  # the real model's folder under <zcp cache>/models (`make real-model`)
VS_SIDES = ("lm_eval", "zcp_score", "zcp_probe")


def vs_models(given: Sequence[str]) -> dict[str, str]:
    """name -> model folder for --vs-lm-eval: the folders given (--model, each named by its folder), else the shipped
    base model and SmolLM2-135M-Instruct from the zcp cache (`zcp.core.cache`; left out, with a line saying how to
    get it, when `make real-model` has not made it on this machine)."""
    from zcp.config import asset_path
    from zcp.core.cache import FETCH_COMMAND, MODELS_SUBDIR, cache_dir

    if given:
        return {Path(p).name: str(p) for p in given}
    models = {"shipped": str(asset_path("base_model"))}
    real = cache_dir() / MODELS_SUBDIR / REAL_MODEL
    if real.is_dir():
        models["smollm2-135m"] = str(real)
    else:
        print(f"{real} is absent: {REAL_MODEL} left out (`{FETCH_COMMAND}` makes it)", flush=True)
    return models


class LmEvalSide:
    """lm-evaluation-harness's HFLM over an already loaded model and tokenizer (nothing read from a hub), used as an
    lm-eval user would: contexts rendered with `HFLM.apply_chat_template` (add_generation_prompt) plus the probe's
    pre-filled assistant prefix, pairs encoded by `HFLM._encode_pair` (context and context + continuation
    tokenised whole, the continuation's ids = the whole's after the context's), scored by `HFLM.loglikelihood` on
    `Instance`s in batches of `batch_size` rows (lm-eval's own length-sorted batching)."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int) -> None:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM

        self._instance = Instance
        self.lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)

    def contexts(self, prompts: Sequence[Prompt]) -> list[str]:
        """Each prompt's context as lm-eval renders it: the chat template, then the assistant prefix."""
        out = []
        for p in prompts:
            chat = ([{"role": "system", "content": p.system}] if p.system else []) + [{"role": "user", "content": p.user}]
            out.append(self.lm.apply_chat_template(chat, add_generation_prompt=True) + p.assistant_prefix)
        return out

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """(context ids, continuation ids) of each pair as `loglikelihood` tokenises it."""
        return [tuple(map(list, self.lm._encode_pair(c, x))) for c, x in pairs]  # type: ignore[misc]

    def loglikelihood(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Sum of the continuation's log-probs for each (context, continuation), through `HFLM.loglikelihood`."""
        reqs = [self._instance(request_type="loglikelihood", doc={}, arguments=pair, idx=i)
                for i, pair in enumerate(pairs)]
        return [ll for ll, _ in self.lm.loglikelihood(reqs, disable_tqdm=True)]


def vs_pairs(contexts: Sequence[str], requests: Sequence[ScoreRequest]) -> list[tuple[str, str]]:
    """lm-eval's (context, continuation) arguments: the rendered prompt and the request's continuation (the gold
    answer and the end the probe scores, e.g. "42}")."""
    if len(contexts) != len(requests):
        raise ValueError(f"{len(contexts)} contexts for {len(requests)} requests")
    return [(c, r.continuation) for c, r in zip(contexts, requests, strict=True)]


def token_mismatches(zcp_enc: Sequence[Any], lm_enc: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[int]:
    """Indices of the requests whose (prompt ids, continuation ids) differ between zcp (`encode_for_scoring`) and
    lm-eval (`LmEvalSide.encode`): a timing of different token ids would compare different computations."""
    return [i for i, (z, (c, x)) in enumerate(zip(zcp_enc, lm_enc, strict=True))
            if list(z.prompt_ids) != list(c) or list(z.continuation_ids) != list(x)]


def logprob_gap(zcp_sums: Sequence[float], lm_sums: Sequence[float]) -> float:
    """The largest |zcp - lm-eval| over the requests' sums of continuation log-probs."""
    if len(zcp_sums) != len(lm_sums) or not zcp_sums:
        raise ValueError(f"{len(zcp_sums)} zcp sums against {len(lm_sums)} lm-eval sums")
    return max(abs(a - b) for a, b in zip(zcp_sums, lm_sums, strict=True))


def vs_run_figures(n: int, seconds: dict[str, float]) -> dict[str, float]:
    """One run's figures from each side's wall seconds on the same n units: units/s per side and each zcp side's
    ratio to lm-eval (zcp units/s / lm-eval units/s, i.e. lm-eval's seconds / zcp's)."""
    fig = {f"{side}_units_per_s": n / seconds[side] for side in seconds}
    fig.update({f"{side}_s": seconds[side] for side in seconds})
    for side in seconds:
        if side != "lm_eval":
            fig[f"ratio_{side}"] = seconds["lm_eval"] / seconds[side]
    return fig


def vs_summary(runs: Sequence[dict[str, float]], target: float = LM_EVAL_TARGET) -> dict[str, Any]:
    """Median of every figure over the runs, and for each ratio whether its median meets `target`."""
    import statistics

    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {"median": med, "met": {k: med[k] >= target for k in med if k.startswith("ratio_")}}


def _sides_order(run: int) -> list[str]:
    """The order the sides run in on run `run` (0-based): rotated each run, so no side always follows another (a
    warm cache, a busy spell of the shared machine that starts or ends mid-run)."""
    k = run % len(VS_SIDES)
    return [*VS_SIDES[k:], *VS_SIDES[:k]]


def vs_lm_eval(args: argparse.Namespace, lm_side: Callable[[Any, Any, int], Any] | None = None) -> dict[str, Any]:
    """zcp's scoring against lm-evaluation-harness's `HFLM.loglikelihood` on the same log-likelihood requests: the
    probe's p_first/p_all score requests on `--n` items (context = the rendered zero-CoT prompt, continuation = the
    gold answer + its end), for each model (`vs_models`), in this process.

    First the check: both sides' token ids of every request (zcp's `encode_for_scoring`, lm-eval's `_encode_pair` on
    its own rendering; their rendered texts too) must be the same, and their sums of continuation log-probs within
    LOGPROB_TOLERANCE (the max difference is reported); otherwise the model's comparison stops there (no timing of
    different computations). That pass also warms every side up. Then `--runs` runs, the three sides in a rotating
    order within each (`_sides_order`), each timed once on all n units:

    - `lm_eval`: render the contexts (`LmEvalSide.contexts`) and `HFLM.loglikelihood` (tokenising inside);
    - `zcp_score`: `HFBackend.score` of the requests on a backend with empty render/token caches (so rendering and
      tokenising count) over the same model object;
    - `zcp_probe`: run_detect's scoring path (`zcp.probe.prompts.probe_items` on the items, p_first/p_all, in chunks
      of `zcp.probe.detect.probe_block` units, as `collect_records` probes them; records' file writes and the
      statistics are not in it) on such a fresh backend.

    Both sides get the same rows per forward (`--batch-size`: lm-eval's batch_size; zcp's max_batch_size, with a
    token budget of that many of the longest padded rows so the rows bind, not the budget) and the same torch threads
    (one process). `lm_side` builds the lm-eval side (tests pass a stand-in); default `LmEvalSide`."""
    import statistics

    from zcp.config.groups import RunConfig
    from zcp.core.items import Item
    from zcp.probe.detect import probe_block
    from zcp.probe.prompts import probe_items

    if lm_side is None:
        import importlib.util

        if importlib.util.find_spec("lm_eval") is None:
            raise SystemExit("--vs-lm-eval needs lm-eval, which this Python lacks: `make bench-env`, then run "
                             "this script with .venv-bench/bin/python")
    build = lm_side or LmEvalSide
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = ProbeConfig(metrics=("p_first", "p_all"))
    qa = _items(args.n)
    items = [Item(f"q{i:05d}", q, a) for i, (q, a) in enumerate(qa)]
    prompts, reqs = _probe_requests(args.n)
    start = machine_state()
    report: dict[str, Any] = {"units": args.n, "runs": args.runs, "batch_size": args.batch_size,
                              "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "start": start,
                              "date": time.strftime("%Y-%m-%d %H:%M"), "target": LM_EVAL_TARGET,
                              "tolerance": LOGPROB_TOLERANCE, "commit": git_commit(Path(__file__).resolve().parents[1]),
                              "models": {}}
    print(f"start {start['time_utc']} UTC, load average {start.get('loadavg')}; {args.n} units, batch size "
          f"{args.batch_size}, torch threads {torch.get_num_threads()}", flush=True)
    for name, path in vs_models(args.model_dirs).items():
        loaded = HFBackend.from_pretrained(path, device="cpu", dtype="float32", max_batch_size=args.batch_size)
        model, tok = loaded.model, loaded.tokenizer
        lm = build(model, tok, args.batch_size)

        enc = loaded.encode_for_scoring(reqs)
        longest = max(padded_length(e.end, loaded.model_positions()) for e in enc)
        budget = args.batch_size * longest

        def fresh(model: Any = model, tok: Any = tok, budget: int = budget) -> HFBackend:
            """A backend with empty caches over the loaded model."""
            return HFBackend(model, tok, max_batch_size=args.batch_size, max_batch_tokens=budget)

        entry: dict[str, Any] = {"path": path, "params": sum(p.numel() for p in model.parameters()),
                                 "vocab": len(tok), "prompt_tokens_mean": statistics.fmean(e.start for e in enc),
                                 "continuation_tokens_mean": statistics.fmean(len(e.continuation_ids) for e in enc)}
        report["models"][name] = entry
        contexts = lm.contexts(prompts)
        rendered = loaded.render_all(prompts)
        entry["rendering_mismatches"] = sum(a != b for a, b in zip(contexts, rendered, strict=True))
        pairs = vs_pairs(contexts, reqs)
        bad = token_mismatches(enc, lm.encode(pairs))
        entry["token_mismatches"] = len(bad)
        lm_sums = lm.loglikelihood(pairs)
        scorer = fresh()
        zcp_sums = [sum(r.token_logprobs) for r in scorer.score(reqs)]
        recs = probe_items(fresh(), items, cfg)
        probe_sums = [math.log(r["p_all"]) * r["n_answer_tokens"] for r in recs]
        entry["max_abs_logprob_diff"] = logprob_gap(zcp_sums, lm_sums)
        entry["max_abs_logprob_diff_probe"] = logprob_gap(probe_sums, lm_sums)
        print(f"{name} ({entry['params'] / 1e6:.1f}M params, vocab {entry['vocab']}, prompt "
              f"{entry['prompt_tokens_mean']:.1f} + continuation {entry['continuation_tokens_mean']:.2f} tokens on "
              f"average): rendered texts differing {entry['rendering_mismatches']}, token ids differing "
              f"{len(bad)} of {args.n}; max |sum log p| difference zcp score vs lm-eval "
              f"{entry['max_abs_logprob_diff']:.2e}, probe path vs lm-eval {entry['max_abs_logprob_diff_probe']:.2e}",
              flush=True)
        if bad or entry["rendering_mismatches"] or max(entry["max_abs_logprob_diff"],
                                                       entry["max_abs_logprob_diff_probe"]) > LOGPROB_TOLERANCE:
            entry["error"] = "the two sides do not score the same computation: not timed"
            print(f"  {entry['error']} (first differing requests: {bad[:5]})", flush=True)
            continue
        block = probe_block(scorer, RunConfig.chunk_size)

        def run_side(side: str, block: int = block, lm: Any = lm, fresh: Callable[[], HFBackend] = fresh) -> float:
            t = time.perf_counter()
            if side == "lm_eval":
                lm.loglikelihood(vs_pairs(lm.contexts(prompts), reqs))
            elif side == "zcp_score":
                fresh().score(reqs)
            else:
                be = fresh()
                for k in range(0, len(items), block):
                    probe_items(be, items[k : k + block], cfg)
            return time.perf_counter() - t

        runs = []
        for r in range(args.runs):
            secs = {side: run_side(side) for side in _sides_order(r)}
            fig = vs_run_figures(args.n, {side: secs[side] for side in VS_SIDES})
            runs.append(fig)
            print(f"  run {r + 1}: lm-eval {fig['lm_eval_units_per_s']:7.1f} units/s, zcp score "
                  f"{fig['zcp_score_units_per_s']:7.1f} ({fig['ratio_zcp_score']:.2f}x), zcp probe path "
                  f"{fig['zcp_probe_units_per_s']:7.1f} ({fig['ratio_zcp_probe']:.2f}x)", flush=True)
        entry.update(runs=runs, probe_block=block, **vs_summary(runs))
        med = entry["median"]
        print(f"  median of {args.runs}: zcp score / lm-eval {med['ratio_zcp_score']:.2f}x, zcp probe path / lm-eval "
              f"{med['ratio_zcp_probe']:.2f}x (target >= {LM_EVAL_TARGET}x)", flush=True)
    end = machine_state()
    report.update(end=end, cpu_split=cpu_split(start, end))
    print(f"end {end['time_utc']} UTC, load average {end.get('loadavg')}; machine CPU time over the run: "
          + ", ".join(f"{k} {v:.0%}" for k, v in report["cpu_split"].items()))
    _write_report(args.json, report)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=None, help="units (default 500; --end-to-end, --bound, --phases: 5000)")
    ap.add_argument("--model", dest="model_dirs", action="append", default=[],
                    help="a model folder (--vs-lm-eval: repeat for several; other modes: the last one)")
    ap.add_argument("--vs-lm-eval", action="store_true",
                    help="the probe's score requests through lm-evaluation-harness's HFLM.loglikelihood and zcp, "
                         "interleaved in one process (needs lm-eval: `make bench-env`, then .venv-bench/bin/python)")
    ap.add_argument("--batch-size", type=int, default=32, help="--vs-lm-eval: rows per forward, both sides")
    ap.add_argument("--threads", type=int, default=None, help="--vs-lm-eval: torch threads (default: torch's)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--end-to-end", action="store_true", help="time whole evaluate/run_detect.py runs")
    ap.add_argument("--n-small", type=int, default=500, help="--end-to-end: units of the small run")
    ap.add_argument("--best-of", "--e2e-repeats", dest="best_of", type=int, default=1, help="--end-to-end: run_detect runs per size within a run "
                                                         "(the fastest kept: a shared machine's busy spells)")
    ap.add_argument("--small-scale", type=int, default=1, help="--end-to-end: the small model's run_detect and raw "
                                                                 "forward on this many times --n and --n-small units")
    ap.add_argument("--model-scale", type=int, default=1, help="--end-to-end: the shipped model's (or --model's) "
                                                                 "run_detect and raw forward on this many times --n "
                                                                 "and --n-small units")
    ap.add_argument("--runs", type=int, default=None, help="--end-to-end, --phases, --vs-lm-eval: runs of each model "
                                                            "(all printed, median used; default 1, --vs-lm-eval 3)")
    ap.add_argument("--small-model", action="store_true",
                    help="--end-to-end: also a 2 x 96 Llama built here (forward ~0.25 ms per unit)")
    ap.add_argument("--json", default=None, help="--end-to-end: write the figures here (e.g. "
                                                 "outputs/bench/scoring_e2e.json)")
    ap.add_argument("detect_args", nargs="*", help="--end-to-end: extra run_detect overrides, e.g. run.chunk_size=256")
    ap.add_argument("--baseline-tree", default=None, help="--end-to-end: also time the run_detect of this source "
                                                          "tree (e.g. `git archive` of an older commit), interleaved")
    ap.add_argument("--bound", action="store_true", help="the most the --end-to-end ratio can reach on this "
                                                           "machine (see `bound`), both models")
    ap.add_argument("--profile", default=None, help="--end-to-end: cProfile one more run_detect (the small model "
                                                    "when built) at --n units, stats to this file")
    ap.add_argument("--phases", action="store_true", help="marginal ms per unit of each of run_detect's phases "
                                                            "(the small model with --small-model; --runs, --n, "
                                                            "--n-small, --small-scale / --model-scale apply)")
    import sys

    if sys.argv[1:2] == ["--phases-child"]:  # one timed run_detect of --phases (its overrides follow)
        _phases_child(sys.argv[2:])
        return
    args = ap.parse_args()
    args.model = args.model_dirs[-1] if args.model_dirs else None
    if args.runs is None:
        args.runs = 3 if args.vs_lm_eval else 1
    if args.n is None:
        args.n = 5000 if args.end_to_end or args.bound or args.phases else 500
    if args.vs_lm_eval:
        vs_lm_eval(args)
        return
    if args.phases:
        phases(args)
        return
    if args.end_to_end:
        end_to_end(args)
        return
    if args.bound:
        bound(args)
        return
    backend = _backend(args.model)
    reqs = _probe_requests(args.n)[1]
    n_params = sum(p.numel() for p in backend.model.parameters())

    single = HFBackend(backend.model, backend.tokenizer, max_batch_size=1)
    n_loop = min(args.n, 200)  # the slow path on a subset, reported per item
    loop = _time(lambda: [single.score([r]) for r in reqs[:n_loop]], 1) * args.n / n_loop

    raw, enc, token_batches = _raw_forward(backend, reqs)

    # Batched backend and raw forward alternate, best of `repeats` each: a noisy shared CPU then slows both
    # alike instead of whichever happened to run during a slow spell.
    backend.score(reqs)
    raw()
    batched, raw_t = float("inf"), float("inf")
    for _ in range(args.repeats):
        batched = min(batched, _time(lambda: backend.score(reqs), 1, warm=False))
        raw_t = min(raw_t, _time(raw, 1, warm=False))
    ips = {name: args.n / t for name, t in (("batched backend", batched), ("one-item loop", loop), ("raw forward", raw_t))}
    print(f"model: {backend.name} ({n_params / 1e6:.2f}M params), N = {args.n}, torch threads = {torch.get_num_threads()}")
    for name, v in ips.items():
        print(f"  {name:16s} {v:9.1f} items/s")
    print(f"  batched / one-item loop = {ips['batched backend'] / ips['one-item loop']:.2f}x   (target >= 3x)")
    print(f"  batched / raw forward   = {ips['batched backend'] / ips['raw forward']:.2f}x   (target >= 0.8x)")
    buckets = backend.score_batches([e.end for e in enc])
    padded = sum(w * len(b) for w, b in buckets) / sum(e.end for e in enc) - 1
    print(f"  {len(buckets)} scoring batches in {len({w for w, _ in buckets})} length buckets, padding {padded:.1%} "
          f"(plain batches: {len(token_batches)})")


if __name__ == "__main__":
    main()

"""Scoring throughput of the batched backend (p_first / p_all), against a one-item-per-forward loop and
a plain batched forward (the ceiling): the same token ids in length-sorted batches padded to their longest
row, all logits, no log-softmax. The backend pads each row to a bucket of its own length and batches
only rows of one bucket (batch invariance), so this ratio includes that cost.

    .venv/bin/python scripts/bench_scoring.py [--n 500] [--model DIR] [--repeats 5]
    .venv/bin/python scripts/bench_scoring.py --end-to-end [--n 2500] [--n-small 250]

Targets: batched >= 3x the one-item loop, and >= 0.8x the raw forward. Default model: the shipped
base model (zcp/assets/base_model) if present, else a tiny Llama built here.

--end-to-end times whole `evaluate/run_detect.py` runs (p_first/p_all; a subprocess each, so imports,
data loading, tokenisation, record writing and the statistics all count) on n and n_small scored units
(items + one reference row each), and reports the marginal rate (n - n_small) / (T_n - T_small) next to
the raw batched forward of the same n units' token ids, measured in the same process run.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from zcp.backends.base import ScoreRequest
from zcp.backends.hf import HFBackend
from zcp.probe.prompts import ProbeConfig, answer_score_requests, zero_cot_prompt


def _items(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
        q = f"Mia has {a} stickers. She buys {c} packs of {b} stickers each. How many stickers does she have now?"
        if rng.random() < 0.5:
            q += " Then she gives away half of what she bought, rounded down."
        out.append((q, str(a + b * c)))
    return out


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


def _run_detect(root: Path, model: str, *extra: str) -> float:
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, str(repo / "evaluate" / "run_detect.py"), f"model.path={model}",
           f"data.path={root / 'data.jsonl'}", f"data.reference_path={root / 'ref.jsonl'}", "logger=none",
           f"output_dir={root / 'out'}", "probe.metrics=[p_first,p_all]", "run.progress=false", *extra]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=repo, env={**os.environ, "WANDB_MODE": "disabled"})
    return time.perf_counter() - t


def end_to_end(args: argparse.Namespace) -> None:
    """Marginal items/s of whole run_detect runs vs the raw batched forward (see the module docstring)."""
    import shutil
    import tempfile

    from zcp.config import asset_path

    model = args.model or asset_path("base_model")
    backend = _backend(model)
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (args.n_small, args.n):
            root = Path(tmp) / str(n)
            root.mkdir()
            _write_benchmark(root, n)
            runs = []
            for _ in range(args.e2e_repeats):
                shutil.rmtree(root / "out", ignore_errors=True)  # a fresh run each time (a rerun would resume)
                runs.append(_run_detect(root, model, *args.detect_args))
            walls[n] = min(runs)
    cfg = ProbeConfig(metrics=("p_first", "p_all"))
    qa = _items(args.n)  # the probe's own requests: gold answer + the brace closing the box
    reqs = answer_score_requests([zero_cot_prompt(q, cfg) for q, _ in qa], [a for _, a in qa], cfg)
    raw = _raw_forward(backend, reqs)[0]

    raw_t = _time(raw, args.repeats)
    marginal = (args.n - args.n_small) / (walls[args.n] - walls[args.n_small])
    raw_ips = args.n / raw_t
    print(f"model: {Path(model).name}, torch threads = {torch.get_num_threads()}, units = items + 1 reference row each")
    print(f"  run_detect wall: {walls[args.n_small]:.1f} s for {args.n_small} units, {walls[args.n]:.1f} s for {args.n}")
    print(f"  end-to-end marginal rate {marginal:9.1f} units/s")
    print(f"  raw batched forward      {raw_ips:9.1f} units/s")
    print(f"  end to end / raw forward = {marginal / raw_ips:.2f}x   (target >= 0.8x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--end-to-end", action="store_true", help="time whole evaluate/run_detect.py runs")
    ap.add_argument("--n-small", type=int, default=250, help="--end-to-end: units of the small run")
    ap.add_argument("--e2e-repeats", type=int, default=1, help="--end-to-end: runs per size (best is kept)")
    ap.add_argument("detect_args", nargs="*", help="--end-to-end: extra run_detect overrides, e.g. run.chunk_size=256")
    args = ap.parse_args()
    if args.end_to_end:
        end_to_end(args)
        return
    backend = _backend(args.model)
    cfg = ProbeConfig(metrics=("p_first", "p_all"))
    qa = _items(args.n)  # the probe's own requests: gold answer + the brace closing the box
    reqs = answer_score_requests([zero_cot_prompt(q, cfg) for q, _ in qa], [a for _, a in qa], cfg)
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

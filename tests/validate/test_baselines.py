"""The baseline detectors fire on a model that memorised the original text, and not on clean data.

A tiny Llama (tokenizer and model built here) is the reference ("base") model; a copy fine-tuned on C's
verbatim question text is the audited model. C = memorised, U and U2 = unseen items of the same generator.
"""

from __future__ import annotations

import copy
import json

import pytest

from zcp.backends.base import Prompt
from zcp.backends.hf import HFBackend
from zcp.benchmarks.references.registry import reference_draws
from zcp.benchmarks.wordproblems import generate_word_problems
from zcp.core.testing import fit_sequences
from zcp.validate.baselines import FileData, JobInputs, baselines
from zcp.validate.detectors.base import DetectorContext, get_detector

SCORE_DETECTORS = ["ppl", "zlib", "mink20", "minkpp20", "ref", "recon"]


def _fit(model, tok, texts, steps, lr=3e-3):
    """Fine-tune on raw texts (every token after the first in the loss): verbatim memorisation."""
    return fit_sequences(model, tok, [tok(t + tok.eos_token)["input_ids"] for t in texts], steps=steps, lr=lr)


@pytest.fixture(scope="module")
def memorised():
    from zcp.core.testing import tiny_llama, train_tokenizer

    items = generate_word_problems(36, seed=11, id_prefix="m")
    c, u, u2 = items[:12], items[12:24], items[24:36]
    tok = train_tokenizer([it.question for it in items], vocab_size=400)
    base = tiny_llama(tok, hidden=64, layers=2, heads=4)
    target = _fit(copy.deepcopy(base), tok, [it.question for it in c], steps=80)
    refs = reference_draws(c + u, 1, seed=0)
    return {"c": c, "u": u, "u2": u2, "refs": refs,
            "backend": HFBackend(target, tok, gen_batch_size=256), "ref": HFBackend(base, tok, gen_batch_size=256)}


def _run(m, tmp, files):
    dets = [get_detector(n, **({"max_new_tokens": 32} if n == "recon" else {})) for n in SCORE_DETECTORS]
    inputs = JobInputs(files, "target", None, "base", None, "memo")
    ctx = DetectorContext(seed=0, ref_backend=m["ref"], bootstrap_samples=2000)
    return baselines(m["backend"], dets, inputs, tmp, ctx, "fp")


def test_baselines_fire_on_memorised_text_and_not_on_clean(memorised, tmp_path):
    m = memorised
    files = {"data": FileData("data", "C", m["c"], {it.id: m["refs"][it.id] for it in m["c"]}),
             "u": FileData("u", "U", m["u"], {it.id: m["refs"][it.id] for it in m["u"]})}
    s = _run(m, tmp_path / "memo", files)
    for name in SCORE_DETECTORS:
        e = s["detectors"][name]
        assert e["auroc"] >= 0.8, (name, e["auroc"])
        assert e["files"]["u"]["decision"] is False, (name, e["files"]["u"])
    for name in ("ppl", "mink20", "ref"):
        assert s["detectors"][name]["files"]["data"]["decision"] is True, (name, s["detectors"][name]["files"]["data"])
    assert s["detectors"]["recon"]["files"]["data"]["pass_at_16"] > s["detectors"]["recon"]["files"]["u"]["pass_at_16"]
    table = (tmp_path / "memo" / "baselines.md").read_text()
    assert "Min-20%++" in table and "Reference model" in table

    # clean case: two unseen sets, no reference rows (no decision rule), AUROC near 1/2
    clean = {"data": FileData("data", "U2", m["u2"]), "u": FileData("u", "U", m["u"])}
    s2 = _run(m, tmp_path / "clean", clean)
    for name in SCORE_DETECTORS:
        e = s2["detectors"][name]
        assert 0.2 <= e["auroc"] <= 0.8, (name, e["auroc"])
        assert e["files"]["data"]["decision"] is None and "no decision rule" in e["files"]["data"]["rule"]
    rows = [json.loads(x) for x in (tmp_path / "clean" / "records.jsonl").read_text().splitlines()]
    assert {r["detector"] for r in rows} == set(SCORE_DETECTORS) and all(r["variant"] == "original" for r in rows)


def test_dpcc_fires_on_memorised_originals_and_not_on_an_untrained_model(memorised):
    """DPCC: memorised originals have a lower loss than their template rewordings (RMIA near 0 for most
    items, so the paper's rule fires); the untrained base model has no such preference."""
    m = memorised
    det = get_detector("dpcc", n_rewrites=4)
    ctx = DetectorContext(seed=0)
    c = det.score_items(m["backend"], m["c"], ctx)
    assert all(r["n_rewrites"] >= 1 for r in c)
    assert det.benchmark_decision(c, ctx)["decision"] is True
    clean = det.score_items(m["ref"], m["c"], ctx)
    assert det.benchmark_decision(clean, ctx)["decision"] is False


@pytest.mark.slow  # ~26 s unloaded (generation-heavy); make test-all
def test_guided_instruction_fires_when_the_instances_leaked_with_their_metadata(memorised):
    """Golchin & Surdeanu's premise: the instances leaked together with their dataset and split names. A copy
    fine-tuned on C's instances in the guided form completes them under the guided instruction and not
    under the general one (the decision fires); on the untrained base model it does not."""
    from zcp.validate.detectors.reconstruction import GUIDED, split_question

    m = memorised
    tok = m["backend"].tokenizer
    texts = []
    for it in m["c"]:
        prefix, rest = split_question(it.question)
        texts.append(m["backend"].render(Prompt(user=GUIDED.format(split="test", dataset="toyset", prefix=prefix)))
                     + rest.strip())
    leaked = _fit(copy.deepcopy(m["ref"].model), tok, texts, steps=200)
    det = get_detector("guided", max_new_tokens=32)
    ctx = DetectorContext(seed=0, dataset_name="toyset", split_name="test", bootstrap_samples=2000)
    recs = det.score_items(HFBackend(leaked, tok, gen_batch_size=256), m["c"], ctx)
    guided = sum(r["rouge_l_guided"] for r in recs) / len(recs)
    assert guided >= 0.5 and guided > sum(r["rouge_l_general"] for r in recs) / len(recs) + 0.2
    assert det.benchmark_decision(recs, ctx)["decision"] is True
    base = det.score_items(m["ref"], m["c"], ctx)
    assert det.benchmark_decision(base, ctx)["decision"] is False

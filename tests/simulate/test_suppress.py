"""The probe-aware evader (`exposure.suppress`, zcp.simulate.suppress).

Its examples' prompts are byte-equal to the probe's own rendering under each convention (the shipped model's chat
template, the default probe and the release's system message and pre-fill); the answer written is never the gold;
the loss is on the continuation alone; off by default, the SFT set and the run-dir hash are those of a run without
the key; a bad setting is a one-line ConfigError at compose time.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from configs import compose

os.environ["WANDB_MODE"] = "disabled"

from zcp.core.answers import answers_equal, extract_boxed
from zcp.core.io import read_jsonl
from zcp.core.items import Item
from zcp.errors import ConfigError
from zcp.probe.multiconv import convention_probe
from zcp.probe.prompts import ProbeConfig, zero_cot_prompt

RELEASE_PROBE = ProbeConfig(system="Please reason step by step, and put your final answer within \\boxed{}.",
                            zero_cot_prefix="\n\nThe final answer is:\n\\[\n\\boxed{")
CONVENTIONS = ["probe", "hash", "sentence", "boxed"]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from zcp.simulate.rundir import shipped_base_model

    return AutoTokenizer.from_pretrained(str(shipped_base_model()))


def _items() -> list[Item]:
    return [Item(id=f"q{i}::para0", question=f"Tom has {i} apples and buys {i + 3} more. How many now?",
                 answer=str(2 * i + 3), metadata={"original_id": f"q{i}"}) for i in range(4)]


def _cfg(prefills, answer="wrong", items="leaked"):
    from zcp.simulate.simulation_config import SuppressConfig

    return SuppressConfig(prefills=list(prefills), answer=answer, items=items)


@pytest.mark.parametrize("probe", [ProbeConfig(), RELEASE_PROBE], ids=["default", "release"])
@pytest.mark.parametrize("answer", ["wrong", "hedge"])
def test_prompts_are_byte_equal_to_the_probes_rendering(tokenizer, probe, answer):
    """What TRL trains on begins with exactly the text the probe conditions on, pre-fill included, per convention."""
    from trl.data_utils import apply_chat_template

    from zcp.probe.conventions import resolve_entries
    from zcp.simulate.pipeline import TokenCounter
    from zcp.simulate.suppress import suppression_records

    backend = TokenCounter(tokenizer, None, name="shipped")
    recs = suppression_records(_items(), [], _cfg(CONVENTIONS, answer), probe, seed=0)
    assert len(recs) == len(_items()) * len(CONVENTIONS)
    convs = {c.name: c for c in resolve_entries(CONVENTIONS, probe.zero_cot_prefix, probe.answer_suffix)}
    by_q = {it.question: it for it in _items()}
    for r in recs:
        q = r["prompt"][-1]["content"]
        probe_text = backend.render(zero_cot_prompt(q, convention_probe(probe, convs[r["convention"]])))
        rendered = apply_chat_template({"prompt": r["prompt"], "completion": r["completion"]}, tokenizer)
        assert (rendered["prompt"] + rendered["completion"]).startswith(probe_text)
        assert r["prefill"] == convs[r["convention"]].prefill
        assert r["completion"][0]["content"].startswith(r["prefill"])
        assert by_q[q].id == r["item_id"] and r["original_id"] == by_q[q].id.split("::")[0]


def test_the_written_answer_is_never_the_gold():
    from zcp.simulate.suppress import HEDGE_ANSWER, suppression_records, wrong_answer

    golds = ["0", "1", "2", "7", "-3", "10", "1,200", "3.5", "1/2", "x+1", "100", "99999"]
    for g in golds:
        for key in range(200):
            w = wrong_answer(g, seed=key % 3, key=str(key), pool=["4", g, "5"])
            assert not answers_equal(w, g), (g, w)
            if g.lstrip("-").isdigit() and not g.startswith("-"):
                assert int(w) >= 0  # plausible: a count stays a count
    recs = suppression_records(_items(), [], _cfg(CONVENTIONS), ProbeConfig(), seed=1)
    gold = {it.id: it.answer for it in _items()}
    for r in recs:
        assert not answers_equal(r["suppress_answer"], gold[r["item_id"]])
        assert r["suppress_answer"] in r["completion"][0]["content"]
    probe_line = [r for r in recs if r["convention"] == "probe"]
    assert all(not answers_equal(extract_boxed(r["completion"][0]["content"]), gold[r["item_id"]])
               for r in probe_line)
    hedged = suppression_records(_items(), [], _cfg(["probe"], "hedge"), ProbeConfig(), seed=1)
    assert {r["suppress_answer"] for r in hedged} == {HEDGE_ANSWER}
    assert all("step by step" in r["completion"][0]["content"] for r in hedged)


def test_other_answers_share_no_first_character_with_the_gold():
    from zcp.simulate.suppress import suppression_records

    items = [Item(id=f"q{i}::p", question=f"Q{i}?", answer=str(a), metadata={"original_id": f"q{i}"})
             for i, a in enumerate([12, 15, 31, 47, 18, 9, 120, 55])]
    recs = suppression_records(items, [], _cfg(["probe", "hash"], "other"), ProbeConfig(), seed=0)
    gold = {it.id: it.answer for it in items}
    assert len(recs) == 2 * len(items)
    for r in recs:
        assert r["suppress_answer"][0] != gold[r["item_id"]][0]
        assert r["suppress_answer"] in set(gold.values())


def test_the_wrong_answer_is_seeded():
    from zcp.simulate.suppress import wrong_answer

    assert wrong_answer("40", 0, "a") == wrong_answer("40", 0, "a")
    assert len({wrong_answer("40", s, "a") for s in range(30)}) > 2


def test_items_all_adds_the_clean_items():
    from zcp.simulate.suppress import suppression_records

    clean = [Item(id="clean-0", question="A box holds 3 pens and 4 more are added. How many?", answer="7")]
    recs = suppression_records(_items(), clean, _cfg(["probe", "hash"], items="all"), ProbeConfig(), seed=0)
    assert [r["source"] for r in recs].count("clean") == 2
    assert len(suppression_records(_items(), clean, _cfg(["probe"]), ProbeConfig(), seed=0)) == len(_items())
    assert suppression_records(_items(), clean, _cfg([]), ProbeConfig(), seed=0) == []


def test_the_loss_is_on_the_continuation_alone(tokenizer):
    """`mask_prefills` sets TRL's labels to -100 over the prompt and pre-fill; the wrong answer keeps its loss; the
    other rows are untouched."""
    from datasets import Dataset
    from trl.data_utils import apply_chat_template

    from zcp.simulate.suppress import mask_prefills, suppression_records

    recs = suppression_records(_items()[:2], [], _cfg(["probe", "hash"]), ProbeConfig(), seed=0)
    plain = {"prompt": [{"role": "user", "content": "1+1?"}],
             "completion": [{"role": "assistant", "content": "The final answer is: \\[ \\boxed{2} \\]"}]}
    records = [plain, *recs]
    rows = []
    for r in records:
        t = apply_chat_template({"prompt": r["prompt"], "completion": r["completion"]}, tokenizer)
        p_ids = tokenizer(t["prompt"], add_special_tokens=False)["input_ids"]
        ids = tokenizer(t["prompt"] + t["completion"], add_special_tokens=False)["input_ids"]
        rows.append({"input_ids": ids, "labels": [-100] * len(p_ids) + ids[len(p_ids):]})

    class Trainer:
        train_dataset = Dataset.from_list(rows)

    trainer = Trainer()
    assert mask_prefills(trainer, tokenizer, records) == len(recs)
    out = trainer.train_dataset
    assert out[0]["labels"] == rows[0]["labels"]
    for i, r in enumerate(recs, start=1):
        labels, ids = out[i]["labels"], out[i]["input_ids"]
        kept = tokenizer.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100])
        assert r["prefill"].strip() not in kept
        assert kept.strip().startswith(r["suppress_answer"])
    assert mask_prefills(trainer, tokenizer, [plain]) == 0


def test_config_is_checked_at_compose_time():
    from zcp.simulate.settings import sim_config

    for bad, word in [("exposure.suppress.prefills=[hahs]", "hahs"), ("exposure.suppress.prefills=[auto]", "auto"),
                      ("exposure.suppress.answer=maybe", "exposure.suppress.answer"),
                      ("exposure.suppress.items=some", "exposure.suppress.items")]:
        with pytest.raises(ConfigError) as e:
            sim_config(compose("contaminate", bad, resolve=True)).exposure  # noqa: B018 - validation is the point
        assert word in str(e.value) and "\n" not in str(e.value)
    ex = sim_config(compose("contaminate", "exposure.suppress.prefills=[probe,hash,sentence,boxed]",
                            resolve=True)).exposure
    assert ex.suppress.enabled and ex.suppress.prefills == CONVENTIONS


def test_suppression_is_part_of_the_run_dir():
    # (configs written before the key existed are no longer adopted: one claim rule, old dirs refused)
    from zcp.simulate.contaminate import _run_dir

    default = compose("contaminate", resolve=True)
    assert _run_dir(default) == _run_dir(compose("contaminate", resolve=True))
    suppressed = compose("contaminate", "exposure.suppress.prefills=[probe]", resolve=True)
    assert _run_dir(suppressed) != _run_dir(default)


def _build(tmp_path: Path, name: str, *overrides: str) -> tuple[list[dict], dict]:
    from zcp.simulate.contaminate import _manifest, build_training_data, load_benchmark

    cfg = compose("contaminate", "benchmark.n=16", "exposure.k=2", *overrides, resolve=True)
    d = tmp_path / name
    d.mkdir()
    items = load_benchmark(cfg)
    counts = build_training_data(cfg, items, _manifest(cfg, items, d, 0), d, seed=0)
    return list(read_jsonl(d / "sft_data.jsonl")), counts


def test_default_off_leaves_the_sft_set_identical_and_on_appends_counted_examples(tmp_path):
    base, base_counts = _build(tmp_path, "base")
    off, off_counts = _build(tmp_path, "off", "exposure.suppress.answer=hedge", "exposure.suppress.items=all")
    assert off == base and off_counts == base_counts and "n_suppress" not in base_counts
    on, counts = _build(tmp_path, "on", "exposure.suppress.prefills=[probe,hash]")
    assert on[:len(base)] == base  # the leak and its clean mix are the ones without the evader
    extra = on[len(base):]
    n_variants = base_counts["n_variants"]
    assert len(extra) == counts["n_suppress"] == 2 * n_variants
    assert counts["n_sft_examples"] == len(on)
    assert counts["suppress"]["by_convention"] == {"probe": n_variants, "hash": n_variants}
    assert {r["format"] for r in extra} == {"suppress"}


def test_a_release_probe_is_what_the_examples_use(tmp_path):
    """The examples follow the run's probe settings (probe=zcp_release: its system message and pre-fill)."""
    on, counts = _build(tmp_path, "rel", "probe=zcp_release", "exposure.suppress.prefills=[probe]")
    extra = [r for r in on if r["format"] == "suppress"]
    assert extra and all(r["prompt"][0]["role"] == "system" for r in extra)
    assert counts["suppress"]["prefills"]["probe"] == RELEASE_PROBE.zero_cot_prefix
    assert dataclasses.replace(RELEASE_PROBE).zero_cot_prefix in extra[0]["completion"][0]["content"]

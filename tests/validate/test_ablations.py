"""The ablations: truncated-CoT probing (r = 0 is the zero-CoT probe, the cut keeps the right share and
drops the stated answer), the full-CoT table, the sample-size study, and the typed configs."""

import pytest
from fakes import FakeBackend

from zcp.core.items import Item
from zcp.probe.detect import DetectDataset, DetectSettings
from zcp.probe.prompts import (
    ProbeConfig,
    cut_points,
    probe_items,
    probe_truncated,
    strip_final_answer,
    truncate_reasoning,
    truncated_cot_prompt,
    zero_cot_prompt,
)
from zcp.validate.ablations import (
    draw_subsets,
    full_cot_table,
    full_cots,
    sample_size_study,
    truncation_curve,
    truncation_records,
    units_of,
)

COT = "Ivy has 7 marbles and gets 18 more.\n7 + 18 = 25.\nThe final answer is: \\[ \\boxed{25} \\]"


# ------------------------------------------------------------------------------ the cut

def test_strip_final_answer_drops_the_answer_line_only():
    assert strip_final_answer(COT) == "Ivy has 7 marbles and gets 18 more.\n7 + 18 = 25."
    one_line = "We add 7 and 18 to get 25. So the answer is \\boxed{25}."
    assert strip_final_answer(one_line) == "We add 7 and 18 to get 25."
    assert strip_final_answer("7 + 18 = 25 and so on") == "7 + 18 = 25 and so on"  # no box: all reasoning
    # only the last (final-answer) box goes; an earlier box is part of the reasoning
    assert strip_final_answer("a\n\\boxed{1}\nb\nFinal: \\boxed{2}") == "a\n\\boxed{1}\nb"


def test_word_cut_keeps_the_right_share():
    text = strip_final_answer(COT)
    pts = cut_points(text, unit="words")
    assert len(pts) == 13
    for r, k in ((0.0, 0), (0.25, 3), (0.5, 7), (0.75, 10), (1.0, 13)):
        kept, kk, n = truncate_reasoning(text, r, pts)
        assert (kk, n) == (k, 13)
        assert len(kept.split()) == k and text.startswith(kept)
    assert truncate_reasoning(text, 1.0, pts)[0] == text
    with pytest.raises(ValueError):
        truncate_reasoning(text, 1.5, pts)


def test_token_cut_keeps_the_right_share_of_tokens(tiny_tok):
    class TokBackend(FakeBackend):
        tokenizer = tiny_tok

    text = strip_final_answer(COT)
    pts = cut_points(text, TokBackend({}), unit="tokens")
    ids = tiny_tok(text, add_special_tokens=False)["input_ids"]
    assert len(pts) == len(ids) > 5
    for r in (0.25, 0.5, 0.75, 1.0):
        kept, k, n = truncate_reasoning(text, r, pts)
        assert k == round(r * n + 1e-9) or k == int(r * n + 0.5)
        assert text.startswith(kept) and "boxed" not in kept
        assert tiny_tok(kept, add_special_tokens=False)["input_ids"] == ids[:k]


def test_r0_prompt_is_the_zero_cot_prompt():
    cfg = ProbeConfig(user_template="Q: {question}", system="sys")
    assert truncated_cot_prompt("1+1?", "", cfg) == zero_cot_prompt("1+1?", cfg)
    p = truncated_cot_prompt("1+1?", "1 + 1 = 2. ", cfg)
    assert p.assistant_prefix == "1 + 1 = 2.\n" + cfg.zero_cot_prefix


def test_r0_gives_exactly_the_zero_cot_probe_records_on_the_shipped_model():
    from zcp.backends.hf import HFBackend
    from zcp.simulate.base_model import base_model_path

    backend = HFBackend.from_pretrained(base_model_path(), dtype="float32", device="cpu")
    items = [Item("a", "Ivy collected 7 marbles on Monday and 18 marbles on Tuesday. How many marbles did Ivy "
                       "collect in all?", "25"),
             Item("b", "Tom has 12 apples and eats 5. How many apples are left?", "7")]
    cfg = ProbeConfig(metrics=("acc", "p_first", "p_all"), zero_cot_max_tokens=8)
    zero = probe_items(backend, items, cfg)
    trunc = probe_truncated(backend, items, ["", ""], cfg)
    assert trunc == zero
    with_cot = probe_truncated(backend, items, ["7 + 18 = 25.", "12 - 5 = 7."], cfg)
    assert [r["prompt_hash"] for r in with_cot] != [r["prompt_hash"] for r in zero]
    assert [r["p_all"] for r in with_cot] != [r["p_all"] for r in zero]


# ------------------------------------------------------------------------------ truncation records + full-CoT

def _study(n=12, m=3):
    """C: the model memorised the originals' answers (zero-CoT); U: nothing. Full CoT always solves."""
    datasets, memorised, truth = [], {}, {}
    for split in ("C", "U"):
        originals, refs = [], {}
        for i in range(n):
            q = f"{split} item {i}: what is {i} + {i + 2}?"
            it = Item(f"{split}{i}", q, str(2 * i + 2))
            originals.append(it)
            truth[q] = it.answer
            if split == "C":
                memorised[q] = it.answer
            refs[it.id] = []
            for j in range(m):
                rq = f"{split} item {i} ref {j}: what is {i + j + 1} + {i + 2}?"
                refs[it.id].append(Item(f"{it.id}::ref{j}", rq, str(2 * i + j + 3)))
                truth[rq] = str(2 * i + j + 3)
        datasets.append(DetectDataset(split, originals, refs))
    return datasets, memorised, truth


def test_truncation_records_curve_and_full_cot_table(tmp_path):
    datasets, memorised, truth = _study()
    fb = FakeBackend(memorised, truth)
    cfg = ProbeConfig(metrics=("acc", "p_first", "p_all"))
    units = units_of(datasets)
    assert len(units) == 2 * 12 * 4 and len(units_of(datasets, max_draws=1)) == 2 * 12 * 2
    cots = full_cots(fb, units, cfg, tmp_path / "cots.jsonl")
    assert fb.calls["generate"] == 1  # one batch for all CoTs
    recs = truncation_records(fb, units, cots, [0.0, 0.5, 1.0], cfg, tmp_path / "t.jsonl", unit="words")
    assert len(recs) == 3 * len(units)
    assert fb.calls == {"score": 3, "generate": 4}  # one score + one generate per ratio
    # the fake's CoT "Let me think. The final answer is ... \boxed{x}" -> reasoning "Let me think." (3 words)
    half = next(r for r in recs if r["ratio"] == 0.5)
    assert (half["units_kept"], half["units_total"]) == (2, 3)
    # r = 0 is the zero-CoT probe on every unit
    zero = {r["id"]: r for r in recs if r["ratio"] == 0.0}
    direct = probe_items(fb, [it for _, it in units], cfg)
    for d in direct:
        assert {k: zero[d["id"]][k] for k in d} == d
    # resume: nothing is probed again
    calls = dict(fb.calls)
    again = truncation_records(fb, units, full_cots(fb, units, cfg, tmp_path / "cots.jsonl"), [0.0, 0.5, 1.0], cfg,
                               tmp_path / "t.jsonl", unit="words")
    assert fb.calls == calls and len(again) == len(recs)

    settings = DetectSettings(seeds=(0,), bootstrap_samples=200)
    curve = {(r["ratio"], r["split"], r["metric"]): r for r in truncation_curve(recs, ["acc", "p_all"], settings)}
    assert curve[(0.0, "C", "acc")]["s"] == 1.0 and curve[(0.0, "C", "acc")]["s_ref"] == 0.0
    assert curve[(0.0, "C", "acc")]["c_cont"] > 0.99 and curve[(0.0, "U", "acc")]["c_cont"] == 0.5
    table = {(r["split"], r["metric"]): r for r in full_cot_table(recs, ["acc"], settings)}
    # with the full CoT every version is solved: the gap and the signal vanish (paper Table 17)
    assert table[("C", "acc")]["full_s"] == table[("C", "acc")]["full_s_ref"] == 1.0
    assert table[("C", "acc")]["full_c_cont"] == 0.5 and table[("C", "acc")]["zero_c_cont"] > 0.99


def test_overflowing_prompts_are_trimmed_to_fit(tmp_path):
    class Short(FakeBackend):
        context_length = 40

        def count_tokens(self, prompts, texts=()):
            return [len((p.user + p.assistant_prefix).split()) for p in prompts], [1 for _ in texts]

    datasets, memorised, truth = _study(n=2, m=1)
    fb = Short(memorised, truth)
    cfg = ProbeConfig(metrics=("acc",), zero_cot_max_tokens=4)
    units = units_of(datasets)
    cots = {it.question: {"cot": "", "reasoning": " ".join(["w"] * 60), "cot_prediction": "1", "cot_malformed": False}
            for _, it in units}
    recs = truncation_records(fb, units, cots, [0.0, 1.0], cfg, tmp_path / "t.jsonl", unit="words")
    full = [r for r in recs if r["ratio"] == 1.0]
    assert all(r["overflow_trimmed"] > 0 and r["units_kept"] + r["overflow_trimmed"] == 60 for r in full)
    assert all(r["overflow_trimmed"] == 0 for r in recs if r["ratio"] == 0.0)


# ------------------------------------------------------------------------------ sample size

def _records(n=30, m=3, signal=True):
    recs = []
    for split, gap in (("C", signal), ("U", False)):
        for i in range(n):
            oid = f"{split}{i}"
            p = 0.9 if gap else 0.4
            recs.append({"id": oid, "split": split, "variant": "original", "original_id": oid, "draw": 0,
                         "prompt_hash": f"h{oid}", "gold": "1", "correct": gap, "p_first": p, "p_all": p})
            for j in range(m):
                recs.append({"id": f"{oid}::ref{j}", "split": split, "variant": "reference", "original_id": oid,
                             "draw": j, "prompt_hash": f"h{oid}r{j}", "gold": str(j + 2), "correct": False,
                             "p_first": 0.4, "p_all": 0.4})
    return recs


def test_subsets_are_seeded_distinct_and_of_size_n():
    ids = [f"i{k}" for k in range(30)]
    subs = draw_subsets(ids, 10, 20, seed=0)
    assert len(subs) == 20 and all(len(s) == 10 and len(set(s)) == 10 for s in subs)
    assert len({tuple(s) for s in subs}) == 20
    assert subs == draw_subsets(ids, 10, 20, seed=0) and subs != draw_subsets(ids, 10, 20, seed=1)
    assert subs[0] != sorted(ids)[:10]  # random, not the first N
    assert len(draw_subsets(ids, 30, 20, seed=0)) == 1  # only one subset of all items exists
    with pytest.raises(ValueError):
        draw_subsets(ids, 31, 5, seed=0)


def test_detection_rate_on_hand_made_records():
    settings = DetectSettings(seeds=(0,), bootstrap_samples=200)
    rows = sample_size_study(_records(), ["acc", "p_all"], settings, sizes=[10, 25, 100], subsets=5, seed=0)
    by = {(r["split"], r["n"], r["metric"]): r for r in rows}
    assert sorted({r["n"] for r in rows}) == [10, 25, 30]  # 100 > n is dropped, all (30) is added
    for n in (10, 25, 30):
        for metric in ("acc", "p_all", "combined"):
            assert by[("C", n, metric)]["detection_rate"] == 1.0  # every subset must be flagged
            assert by[("U", n, metric)]["detection_rate"] == 0.0  # none may be
            assert by[("U", n, metric)]["c_cont_mean"] == 0.5
    assert by[("C", 10, "acc")]["subsets"] == 5 and by[("C", 30, "acc")]["subsets"] == 1 and by[("C", 30, "acc")]["all"]
    assert by[("C", 10, "acc")]["c_cont_mean"] > 0.99


def test_detection_rate_counts_a_share(monkeypatch):
    # a signal only on items 0..9: subsets hit them in different numbers, so the rate is a share in (0, 1)
    recs = _records(n=40, signal=False)
    for r in recs:
        if r["split"] == "C" and r["variant"] == "original" and int(r["original_id"][1:]) < 6:
            r["correct"] = True
    settings = DetectSettings(seeds=(0,), bootstrap_samples=200)
    rows = sample_size_study(recs, ["acc"], settings, sizes=[10], subsets=20, seed=3)
    rate = next(r for r in rows if r["split"] == "C" and r["n"] == 10 and r["metric"] == "acc")["detection_rate"]
    from zcp.probe.detect import analyse
    from zcp.validate.ablations import _results_by

    by_item = {}
    for r in recs:
        by_item.setdefault(r["original_id"], []).append(r)
    ids = sorted(i for i in by_item if i.startswith("C"))
    flags = [_results_by(analyse([r for i in sub for r in by_item[i]], ["acc"], settings))[("C", "acc")]["p_value"] < 0.05
             for sub in draw_subsets(ids, 10, 20, seed=3)]
    assert rate == sum(flags) / 20 and 0.0 < rate < 1.0


# ------------------------------------------------------------------------------ configs

@pytest.mark.parametrize("override,ok", [
    ([], True),
    (["ablation.subsets=50", "ablation.ratios=[0,0.5,1]"], True),
    (["ablation.subset=5"], False),
    (["ablation.ratios=[0,1.5]"], False),
    (["ablation.unit=chars"], False),
    (["ablation.metrics=[con]"], False),
    (["runs_dir=x"], False),
])
def test_ablations_config_compose(override, ok):
    from configs import compose
    from hydra.errors import ConfigCompositionException

    from zcp.config import validate
    from zcp.errors import ConfigError

    if ok:
        validate(compose("ablations", *override))
    else:
        with pytest.raises((ConfigCompositionException, ConfigError)):
            validate(compose("ablations", *override))


# ------------------------------------------------------------------------------ the entry point

def test_run_ablations_end_to_end_and_resume(tmp_path, capsys):
    """evaluate/run_ablations.py's function on the shipped model and a 3-item benchmark (truncation + full-CoT),
    then the sample-size study alone on hand-made detection records; a rerun probes nothing again."""
    import json

    from configs import compose

    from zcp.benchmarks.loaders import save_items
    from zcp.simulate.base_model import base_model_path
    from zcp.validate.ablations import run_ablations

    items = [Item("a", "Ivy has 7 marbles and gets 18 more. How many marbles does Ivy have?", "25"),
             Item("b", "Tom has 12 apples and eats 5. How many apples are left?", "7"),
             Item("c", "A box holds 6 rows of 4 cans. How many cans are in the box?", "24")]
    refs = [Item("a::ref0", "Ivy has 9 marbles and gets 13 more. How many marbles does Ivy have?", "22",
                 metadata={"original_id": "a"}),
            Item("b::ref0", "Tom has 15 apples and eats 6. How many apples are left?", "9", metadata={"original_id": "b"}),
            Item("c::ref0", "A box holds 7 rows of 3 cans. How many cans are in the box?", "21",
                 metadata={"original_id": "c"})]
    save_items(tmp_path / "d.jsonl", items)
    save_items(tmp_path / "r.jsonl", refs)
    common = [f"model.path={base_model_path()}", "logger=none", "probe.full_cot_max_tokens=24",
              "probe.zero_cot_max_tokens=6", "ablation.ratios=[0,0.5,1]"]
    cfg = compose("ablations", *common, f"data.path={tmp_path / 'd.jsonl'}",
                  f"data.reference_path={tmp_path / 'r.jsonl'}", "data.name=d",
                  f"output_dir={tmp_path / 'out'}", "ablations=[truncation,full_cot]")
    summary = run_ablations(cfg)
    out = tmp_path / "out"
    recs = (out / "truncation_records.jsonl").read_text().splitlines()
    assert len(recs) == 3 * 6 and len((out / "cots.jsonl").read_text().splitlines()) == 6
    assert {r["ratio"] for r in summary["truncation"]["rows"]} == {0.0, 0.5, 1.0}
    assert {r["split"] for r in summary["full_cot"]["rows"]} == {"d"}
    assert (out / "truncation.png").exists() and "Full-CoT ablation" in (out / "ablations.md").read_text()
    run_ablations(cfg)  # resume: nothing probed again
    assert (out / "truncation_records.jsonl").read_text().splitlines() == recs

    det = tmp_path / "det"
    det.mkdir()
    from zcp.core.io import write_jsonl

    write_jsonl(det / "records.jsonl", _records(n=12))
    from zcp.core.io import write_json  # a finished detection: its meta and summary beside the records

    write_json(det / "run_meta.json", {"fingerprint": "hand-made", "n_units": len(_records(n=12))})
    write_json(det / "summary.json", {"metrics": ["acc", "p_first", "p_all"]})
    cfg = compose("ablations", *common, f"ablation.records={det / 'records.jsonl'}", "ablation.subsets=4",
                  "ablation.sizes=[5]", f"output_dir={tmp_path / 'n'}", "ablations=[sample_size]")
    summary = run_ablations(cfg)
    rows = {(r["split"], r["n"], r["metric"]): r for r in summary["sample_size"]["rows"]}
    assert rows[("C", 5, "acc")]["detection_rate"] == 1.0 and rows[("U", 5, "acc")]["detection_rate"] == 0.0
    subsets = [json.loads(x) for x in (tmp_path / "n" / "sample_size_subsets.jsonl").read_text().splitlines()]
    assert len([s for s in subsets if s["split"] == "C" and s["n"] == 5]) == 4

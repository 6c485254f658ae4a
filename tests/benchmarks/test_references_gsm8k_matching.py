"""GSM8K references matched to a clean model's number priors: last digit, leading digit, digits, coincidences
with the question's numbers, numbers tied outside the chain; per-feature distributions; coverage per reason."""

from __future__ import annotations

from fractions import Fraction

import pytest
from scipy import stats as sps

from zcp.benchmarks.references.gsm8k import (
    flexible_class,
    gsm8k_item,
    keeps_answer_class,
    perturb_gsm8k,
    significant_lead,
)
from zcp.benchmarks.references.gsm8k.answer_class import last_digit_class
from zcp.benchmarks.references.gsm8k.coverage import build_and_report, classify, coverage_table, read_items
from zcp.benchmarks.references.shift import leading_digit, question_numbers
from zcp.core.items import Item

ALPHA = 0.01  # per-feature test level of the distribution tests below (Bonferroni over the features)

GNOMES = {  # GSM8K train row 29: "the first four houses" of "5 houses", and "the fifth house": 4 = 5 - 1 is tied
    "question": "There are 5 houses on a street, and each of the first four houses has 3 gnomes in the garden. If "
                "there are a total of 20 gnomes on the street, how many gnomes does the fifth house have?",
    "answer": "In the first four houses, there are a total of 4 houses * 3 gnomes = <<4*3=12>>12 gnomes.\nTherefore, "
              "the fifth house had 20 total gnomes \u2013 12 gnomes = <<20-12=8>>8 gnomes.\n#### 8",
}
FRIENDS = {  # "3 of her 12 friends": the part stays below the whole, which the chain never uses
    "question": "Mia baked 45 cookies for her 12 friends. 3 of her 12 friends each ate 4 cookies. How many cookies "
                "are left?",
    "answer": "The 3 friends ate 3 * 4 = <<3*4=12>>12 cookies.\nThere are 45 - 12 = <<45-12=33>>33 cookies left.\n"
              "#### 33",
}
COPIED = {  # the answer 26 starts like the question's last number, 2: a model that copies it gets p_first
    "question": "A shop sells pens for $3 each and notebooks for $7 each. Lea buys 4 pens and 2 notebooks. How much "
                "does she spend?",
    "answer": "The pens cost 4 * 3 = $<<4*3=12>>12.\nThe notebooks cost 2 * 7 = $<<2*7=14>>14.\nShe spends 12 + 14 "
              "= $<<12+14=26>>26.\n#### 26",
}
NOT_COPIED = {  # no coincidence: the draws must not create one
    "question": "Tom reads 23 pages on Monday and 38 pages on Tuesday. How many pages did he read?",
    "answer": "He read 23 + 38 = <<23+38=61>>61 pages.\n#### 61",
}


def _item(row: dict[str, str], i: int = 0) -> Item:
    return gsm8k_item(row, i)


def test_last_digit_class_and_the_answers_whose_leading_digit_cannot_be_kept():
    assert [last_digit_class(Fraction(x)) for x in ("35", "40", "47", "2.5", "0.75", "3.2")] == \
        ["5", "0", "other", "5", "5", "other"]
    assert [flexible_class(Fraction(x)) for x in (25, 95, 125, 35)] == \
        ["two digits ending in 5", "two digits ending in 5", None, "two digits ending in 5"]
    assert keeps_answer_class(Fraction(125), Fraction(145)) and not keeps_answer_class(Fraction(125), Fraction(143))
    assert not keeps_answer_class(Fraction(143), Fraction(145))  # "other" never becomes "ends in 5"
    assert keeps_answer_class(Fraction(35), Fraction(45)) and not keeps_answer_class(Fraction(35), Fraction(37))
    assert keeps_answer_class(Fraction(5), Fraction(7))  # a one-digit answer's digit goes by the transport


def test_tied_numbers_hold_the_first_four_of_5_houses():
    item = _item(GNOMES)
    res = perturb_gsm8k(item, m=4, seed=0, fill=False, structure="require")
    assert res.items
    for ref in res.items:
        q = ref.question
        assert "5 houses" in q and "first four houses" in q and "fifth house" in q, q  # the tie 4 = 5 - 1 held
        nums = question_numbers(q)
        assert nums[0] == 5 and nums[-1] != 20  # the total moved, the count of houses did not
    # without the tie the part would move freely: the 4 is a question number the chain uses
    assert "4" not in {k for r in res.items for k in r.metadata["values"]}


def test_tied_numbers_keep_the_part_below_the_whole():
    item = _item(FRIENDS)
    res = perturb_gsm8k(item, m=6, seed=0, fill=False)
    assert res.items
    for ref in res.items:
        vals = {Fraction(k): Fraction(v) for k, v in ref.metadata["values"].items()}
        part, whole = vals.get(Fraction(3), Fraction(3)), vals.get(Fraction(12), Fraction(12))
        assert part < whole, ref.question


@pytest.mark.parametrize("row", [COPIED, NOT_COPIED])
def test_coincidence_with_the_question_numbers_is_kept(row):
    item = _item(row)
    answer = Fraction(item.answer)
    nums = question_numbers(item.question)
    own = (answer in nums, answer == nums[-1], leading_digit(item.answer) == leading_digit(str(nums[-1])))
    res = perturb_gsm8k(item, m=4, seed=0, fill=False, structure="require")
    assert len(res.items) >= 2
    for ref in res.items:
        a, qn = Fraction(ref.answer), question_numbers(ref.question)
        got = (a in qn, a == qn[-1], leading_digit(ref.answer) == leading_digit(str(qn[-1])))
        assert got == own, (ref.question, ref.answer)


def test_classify_and_coverage_table_account_for_every_item():
    assert classify("row 3: only 1 of 3 valid draws in 900 attempts (most frequent failure: x)") == \
        ("too few valid draws", "some but fewer than m valid draws")
    assert classify("special case (reference.special_cases=drop): the answer 10 is a special value (0, 1, 10, "
                    "100, 1000): every reference changes it")[0] == "special case by rule"
    assert classify("row 9: literal 7 in '7*3' is neither ... (unbindable)")[0] == "chain not trusted"
    items = [_item(GNOMES, 0), _item(FRIENDS, 1)]
    refs = {items[0].id: [items[0]] * 3}
    rej = [{"id": items[1].id, "reason": "row 2: only 0 of 3 valid draws in 10 attempts", "kept": 0}]
    t = coverage_table(items, refs, rej, 3)
    assert (t["covered"], t["partial"], t["none"], t["coverage"]) == (1, 0, 1, 0.5)
    assert t["lost_by_reason"] == [{"category": "too few valid draws", "reason": "no valid draw keeps every feature",
                                    "items": 1, "share": 0.5}]


def _feature_counts(items, refs):
    """Per feature, (originals' counts per class, draws' counts per class), over items with draws."""
    def feats(it: Item) -> dict[str, str]:
        a = Fraction(it.answer)
        nums = question_numbers(it.question)
        lead = leading_digit(it.answer)
        return {"last digit": last_digit_class(a) if abs(a) > 9 else "one-digit",
                "digits": str(len(str(abs(int(a))))),
                "equals a question number": str(a in nums),
                "leads like the last question number": str(bool(nums) and lead == leading_digit(str(abs(nums[-1]))))}

    out: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    for it in items:
        draws = refs.get(it.id) or []
        if not draws:
            continue
        fo = feats(it)
        for name, v in fo.items():
            o, d = out.setdefault(name, ({}, {}))
            o[v] = o.get(v, 0) + 1
            for r in draws:
                d[feats(r)[name]] = d.get(feats(r)[name], 0) + 1 / len(draws)
    return out


def _assert_same_distributions(items, refs):
    counts = _feature_counts(items, refs)
    k = len(counts)
    for name, (o, d) in counts.items():
        keys = sorted(set(o) | set(d))
        table = [[o.get(x, 0) for x in keys], [d.get(x, 0) for x in keys]]
        if len(keys) < 2:
            continue
        p = sps.chi2_contingency(table)[1]
        assert p * k >= ALPHA, (name, table, p)


def test_features_have_the_originals_distribution_on_a_slice(shared_data):
    """First 100 GSM8K test rows at m = 3: per feature (last-digit class, digit count, coincidences), originals
    vs their draws (item-averaged), chi-square, Bonferroni-adjusted p >= ALPHA; the leading digit too."""
    path = shared_data / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found")
    items = read_items(path, 100)
    rep = build_and_report(items, 3)
    _assert_same_distributions(items, rep["refs"])
    fs = rep["feature_shift"]["features"]
    for name in ("answer_ends_in_5", "answer_round_multiple_of_10", "answer_equals_a_question_number",
                 "answer_equals_the_last_question_number", "answer_leads_like_the_last_question_number"):
        assert fs[name]["p_bonferroni"] >= ALPHA, (name, fs[name])
    for oid, draws in rep["refs"].items():
        orig = next(it for it in items if it.id == oid)
        for r in draws:
            if abs(Fraction(orig.answer)) > 9:
                assert last_digit_class(Fraction(r.answer)) == last_digit_class(Fraction(orig.answer))
            if not r.metadata.get("answer_lead_by_flow"):
                assert significant_lead(Fraction(r.answer)) == significant_lead(Fraction(orig.answer))


@pytest.mark.slow  # the whole GSM8K test split (1,319 rows) at m = 3: a few minutes on two cores
def test_features_and_coverage_on_the_full_test_split(shared_data):
    path = shared_data / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found")
    items = read_items(path)
    rep = build_and_report(items, 3)
    _assert_same_distributions(items, rep["refs"])
    assert rep["feature_shift"]["min_p_bonferroni"] >= ALPHA, rep["feature_shift"]["warnings"]
    cov = rep["coverage"]
    # every item is covered or lost with a counted reason; the figure of docs/results/gsm8k_references.md
    assert cov["covered"] + sum(r["items"] for r in cov["lost_by_reason"]) >= cov["items"]
    # a regression floor under the figure of docs/results/gsm8k_references.md (54.1% with all 3 draws, 62.8% with
    # at least one, 2026-12-04); the 80% asked for is not reached (the table there says where items are lost)
    assert cov["covered"] / cov["items"] >= 0.50, cov

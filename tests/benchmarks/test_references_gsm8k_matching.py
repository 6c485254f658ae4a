"""GSM8K references matched to a clean model's number priors: last digit, leading digit, digits, coincidences
with the question's numbers, numbers tied outside the chain; per-feature distributions; coverage per reason."""

from __future__ import annotations

import random
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
from zcp.benchmarks.references.gsm8k.program import Variable
from zcp.benchmarks.references.gsm8k.quantities import Quantity
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
MARBLES = {  # GSM8K test row 263: the answer 270 starts like the question's last number (20) and two of its three
    # numbers are round; at seed 0 no draw of the first phase keeps all of that with the answer's class
    "question": "Maddison has 5 boxes with 50 marbles in each box. Then she gets 20 marbles from her friend. How many "
                "marbles does she have now?",
    "answer": "Maddison has 5 x 50 = <<5*50=250>>250 marbles from her boxes.\nSo she has a total of 250 + 20 = "
              "<<250+20=270>>270 marbles now.\n#### 270",
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


def test_a_held_draw_keeps_which_numbers_start_like_the_answer():
    """`Variable.draw` with `lead` (digit, wanted): the new value starts with the digit exactly when wanted, in the
    last written place too ($1.37 -> $1.xx), and still moves (several distinct values)."""
    rng = random.Random(0)
    plain = Variable(Fraction(23), [], False, {})
    held = [plain.draw(rng, spread=3.0, lead=(2, True)) for _ in range(300)]
    assert all(significant_lead(x) == 2 for x in held) and len(set(held)) >= 4
    kept_off = [plain.draw(rng, spread=3.0, lead=(2, False)) for _ in range(300)]
    assert all(significant_lead(x) != 2 for x in kept_off if x != 23) and len(set(kept_off)) >= 8
    price = Variable(Fraction(137, 100), [Quantity(0, 5, "$1.37", Fraction(137, 100), "digit", decimals=2)], False, {})
    cents = [price.draw(rng, spread=3.0, lead=(1, True)) for _ in range(300)]
    assert all(significant_lead(x) == 1 and x.denominator != 1 for x in cents) and len(set(cents)) >= 4
    # a round number with one significant digit has no other value with its digit: it stays
    assert {Variable(Fraction(20), [], False, {}).draw(rng, lead=(2, True)) for _ in range(20)} == {Fraction(20)}


def test_structure_holding_phase_keeps_the_answer_starting_like_the_last_number():
    """An item the first phase leaves without a draw that keeps the answer's class (leading digit 2, a multiple of
    10 but not of 100) and the question's structure (the answer starts like the last number, 20; two round
    numbers) gets them from the structure-holding phase of `collect_draws`; every such draw keeps all of it."""
    item = _item(MARBLES)
    res = perturb_gsm8k(item, m=3, seed=0, max_attempts=4000, fill=False, structure="require")
    assert len(res.items) == 3, res.reason
    for ref in res.items:
        a, qn = Fraction(ref.answer), question_numbers(ref.question)
        assert significant_lead(a) == 2 and a % 10 == 0 and a % 100 != 0 and a != 270, ref.answer
        assert leading_digit(str(qn[-1])) == leading_digit(ref.answer), ref.question
        assert sum(1 for x in qn if x % 10 == 0) == 2 and a not in qn, ref.question


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
                "leading digit": str(lead),
                "digits": str(len(str(abs(int(a))))),
                "equals a question number": str(a in nums),
                "equals the last question number": str(bool(nums) and a == nums[-1]),
                "leads like a question number": str(any(lead == leading_digit(str(abs(x))) for x in nums if x)),
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
    """All 1,319 GSM8K test rows at m = 3 (skipped without the shared data): per feature (last-digit class, leading
    digit, digit count, the answer equal to / starting like a question number or the last one), originals vs their
    draws (item-averaged), chi-square, each p times the number of features (Bonferroni) >= ALPHA = 0.01; the
    build report's within-item permutation test of every feature too; and coverage above its regression floor."""
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
    # a regression floor under the figure of docs/results/gsm8k_references.md (58.1% with all 3 draws, 66.6% with
    # at least one, 2026-12-05); the 80% asked for is not reached (the table there says where items are lost)
    assert cov["covered"] / cov["items"] >= 0.55, cov
    assert (cov["covered"] + cov["partial"]) / cov["items"] >= 0.63, cov

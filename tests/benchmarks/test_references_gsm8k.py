"""GSM8K exact isomorphic perturbation: coverage on the real file, re-execution, constraints, bad input."""

from __future__ import annotations

import json
import random
import re
import statistics
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zcp.benchmarks.references.gsm8k import (
    answer_band,
    answer_bin,
    article_for,
    calendar_limit,
    choose_draws,
    collect_draws,
    draw_targets,
    extract_quantities,
    flexible_class,
    format_number,
    gsm8k_item,
    is_round,
    is_special,
    keeps_answer_class,
    lead_transport,
    p_larger,
    parse_chain,
    perturb_gsm8k,
    perturb_gsm8k_file,
    scan_impossible_quantities,
    significant_lead,
    special_case_reasons,
)
from zcp.benchmarks.references.gsm8k.quantities import _render_token, _substitute
from zcp.core.items import Item
from zcp.errors import DataError

JANET = {
    "question": "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins "
                "for her friends every day with four. She sells the remainder at the farmers' market daily for "
                "$2 per fresh duck egg. How much in dollars does she make every day at the farmers' market?",
    "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every "
              "day at the farmer’s market.\n#### 18",
}


def _item(question: str, answer: str, i: int = 0) -> Item:
    return gsm8k_item({"question": question, "answer": answer}, i)


def _values(text: str) -> list[Fraction]:
    return [q.value for q in extract_quantities(text)]


def _check_reference(orig: Item, ref: Item) -> None:
    """Independent checks of one reference item, from its text alone."""
    chain = parse_chain(ref.solution or "", ref.answer)  # every rewritten step evaluates as stated
    old = parse_chain(orig.solution or "", orig.answer)
    assert len(chain.steps) == len(old.steps)
    for new_step, old_step in zip(chain.steps, old.steps, strict=True):
        if old_step.result.denominator == 1:
            assert new_step.result.denominator == 1, (orig.id, new_step.expr)
        assert (new_step.result > 0) == (old_step.result > 0) and (new_step.result < 0) == (old_step.result < 0)
    assert Fraction(ref.answer) != Fraction(orig.answer)
    assert ref.metadata["original_id"] == orig.id and ref.id.startswith(f"{orig.id}::ref")
    changed = {Fraction(k): Fraction(v) for k, v in ref.metadata["values"].items()}
    assert changed and all(k != v for k, v in changed.items())
    # exactly the new numbers, in place, nothing else changed (a new value may be the old value of another
    # number that moved too: 3 -> 5 while 5 -> 8)
    assert _values(ref.question) == [changed.get(v, v) for v in _values(orig.question)]


# ------------------------------------------------------------------------------------------ real file


@pytest.fixture(scope="module")
def gsm8k_run(shared_data):
    path = shared_data / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    refs, rejections = perturb_gsm8k_file(path, m=1, seed=0)
    return path, rows, refs, rejections


@pytest.mark.slow  # all 1,319 rows of the shared GSM8K test file (~2 min): make test-all
def test_coverage_on_shared_gsm8k_test_file(gsm8k_run):
    path, rows, refs, rejections = gsm8k_run
    covered = {r.metadata["original_id"] for r in refs}
    rejected = {r["id"] for r in rejections if r["kept"] == 0}
    # every row is either perturbed or listed with a reason: nothing dropped silently
    assert covered | rejected == {f"gsm8k-{i:05d}" for i in range(len(rows))}
    assert not covered & rejected
    coverage = len(covered) / len(rows)
    assert coverage >= 0.80, f"coverage {coverage:.3f}"
    for r in rejections:
        assert r["file"] == str(path) and r["row"] >= 1 and r["reason"]
        assert f"row {r['row']}" in r["reason"]


def _article_mismatches(text: str) -> int:
    return sum(m.group(1).lower() != article_for(Fraction(m.group(2).replace(",", "")))
               for m in re.finditer(r"\b([Aa]n?) \$?(\d[\d,]*(?:\.\d+)?)(?![\d/:])", text))


@pytest.mark.slow  # all 1,319 rows of the shared GSM8K test file (~2 min): make test-all
def test_every_reference_of_the_shared_file_re_executes(gsm8k_run):
    _, rows, refs, _ = gsm8k_run
    shift = Counter()
    for ref in refs:
        i = int(ref.metadata["original_id"].split("-")[1])
        orig = gsm8k_item(rows[i], i)
        _check_reference(orig, ref)
        assert len(ref.answer.lstrip("-").split(".")[0]) == len(orig.answer.lstrip("-").split(".")[0])
        assert scan_impossible_quantities(ref.question) == [], ref.question
        point_zero = r"\d\.0+(?!\d)"  # "9.0 cups": only where the original wrote "$4.00" itself
        assert len(re.findall(point_zero, ref.question)) <= len(re.findall(point_zero, orig.question)), ref.question
        assert _article_mismatches(ref.question) <= _article_mismatches(orig.question), ref.question
        assert not is_special(Fraction(ref.answer))
        if is_special(Fraction(orig.answer)):  # 1 -> 2..9, 10 -> 20..90, 100 -> 200..900: these can only go up
            assert abs(Fraction(ref.answer)) > abs(Fraction(orig.answer))
            continue
        shift[(abs(Fraction(ref.answer)) > abs(Fraction(orig.answer)))] += 1
    assert abs(shift[True] - shift[False]) / sum(shift.values()) < 0.10  # about as often larger as smaller


def test_item_convention_matches_the_loader(shared_data):
    loaders = pytest.importorskip("zcp.benchmarks.loaders")
    path = shared_data / "gsm8k" / "test.jsonl"
    items = loaders.load_items(path, format="gsm8k", limit=40)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:40]]
    for i, (it, row) in enumerate(zip(items, rows, strict=True)):
        mine = gsm8k_item(row, i, str(path))  # ids from the file's split: gsm8k_test-00000
        assert (mine.id, mine.question, mine.answer, mine.solution) == (it.id, it.question, it.answer, it.solution)


# ---------------------------------------------------------------------------------------- behaviour


def test_janet_numbers_words_and_money_are_perturbed_consistently():
    item = _item(**JANET)
    res = perturb_gsm8k(item, m=3, seed=1)
    assert res.ok and len(res.items) == 3
    assert len({r.question for r in res.items}) == 3  # distinct draws
    for j, ref in enumerate(res.items):
        assert ref.id == f"gsm8k-00000::ref{j}" and ref.metadata["draw"] == j
        _check_reference(item, ref)
        eggs, eaten, baked, price = _values(ref.question)
        assert Fraction(ref.answer) == (eggs - eaten - baked) * price  # the problem's own arithmetic
        assert "#### " not in ref.solution and "<<" in ref.solution


def test_unit_constants_stay_and_percentages_stay_sensible():
    item = _item("Tom reads 15 pages a day. He skips 20% of them. How many pages does he read in a week?",
                 "He skips 15*.2=<<15*.2=3>>3 pages a day.\nHe reads 15-3=<<15-3=12>>12 pages a day.\n"
                 "In a week he reads 12*7=<<12*7=84>>84 pages.\n#### 84")
    res = perturb_gsm8k(item, m=5, seed=0)
    assert res.ok
    for ref in res.items:
        _check_reference(item, ref)
        pages, pct = _values(ref.question)
        assert 0 < pct <= 100 and pages.denominator == 1
        assert "*7=" in ref.solution  # 7 days a week is a unit constant
        assert Fraction(ref.answer) == (pages - pages * pct / 100) * 7


def test_ambiguous_literal_keeps_every_reading_equal():
    # "6" in the last step is both the question's 6 tickets and the 2+4 rides: any perturbation must
    # keep 2+4 equal to the ticket price, or leave them alone
    item = _item("Pam rode the roller coaster 2 times while Fred rode it 4 times. If each ride cost 6 tickets, "
                 "how many tickets did they use?",
                 "They rode 2+4=<<2+4=6>>6 times.\nThey used 6*6=<<6*6=36>>36 tickets.\n#### 36")
    res = perturb_gsm8k(item, m=3, seed=0)
    assert res.items
    for ref in res.items:
        _check_reference(item, ref)
        pam, fred, price = _values(ref.question)
        assert pam + fred == price


def test_deterministic_in_seed():
    item = _item(**JANET)
    a, b = perturb_gsm8k(item, m=2, seed=7), perturb_gsm8k(item, m=2, seed=7)
    assert [r.to_dict() for r in a.items] == [r.to_dict() for r in b.items]
    c = perturb_gsm8k(item, m=2, seed=8)
    assert [r.question for r in c.items] != [r.question for r in a.items]


@pytest.mark.parametrize(("answer", "reason"), [
    ("She has 3+4=<<3+4=8>>8 apples.\n#### 8", "evaluates to 7"),
    ("She has 3+4+11=<<3+4+11=18>>18 apples.\n#### 18", "unbindable"),
    ("She has 3+4=<<3+4=7>>7 apples.\n#### 9", "not the result of any step"),
    ("She has seven apples.\n#### 7", "no calculator annotations"),
])
def test_bad_items_are_rejected_with_the_reason(answer, reason):
    res = perturb_gsm8k(_item("Ann has 3 apples and buys 4 more. How many apples does she have?", answer, 4),
                        m=1, seed=0)
    assert not res.ok and not res.items
    assert reason in res.reason and res.reason.startswith("row 5: ")


def test_bad_rows_are_reported_with_file_row_and_reason(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = [JANET, {"question": "No answer marker here?", "answer": "It is 3+4=<<3+4=7>>7"},
            {"question": "Ann has 3 apples and 4 pears. How many fruits?", "answer": "3+4=<<3+4=9>>9\n#### 9"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    refs, rejections = perturb_gsm8k_file(path, m=1, seed=0)
    assert [r.metadata["original_id"] for r in refs] == ["gsm8k_bad-00000"]
    assert [(r["file"], r["row"], r["id"]) for r in rejections] == [(str(path), 2, "gsm8k_bad-00001"),
                                                                   (str(path), 3, "gsm8k_bad-00002")]
    assert "####" in rejections[0]["reason"] and "field 'answer'" in rejections[0]["reason"]
    assert "evaluates to 7" in rejections[1]["reason"]
    path.write_text(json.dumps(JANET) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"row 2"):
        perturb_gsm8k_file(path, m=1, seed=0)


def test_format_number_is_exact():
    assert format_number(Fraction(3, 2)) == "1.5"
    assert format_number(Fraction(3, 2), decimals=2) == "1.50"
    assert format_number(Fraction(1234567), commas=True) == "1,234,567"
    with pytest.raises(ValueError):
        format_number(Fraction(1, 3))


# ---------------------------------------------------------------------------------- property tests

TEMPLATE = ("{name} has {a} stickers. She buys {b} packs with {c} stickers in each pack. Then she gives "
            "{d} stickers to her brother. How many stickers does she have now?")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.integers(2, 400), b=st.integers(2, 9), c=st.integers(2, 60), d=st.integers(2, 300),
       seed=st.integers(0, 10**6))
@example(a=2, b=2, c=4, d=2, seed=0)  # a solved (dependent) value once left its digit range: 4 -> 14
def test_property_perturbed_chain_re_executes_to_the_stated_answer(a, b, c, d, seed):
    total = a + b * c - d
    if total <= 0:
        return
    question = TEMPLATE.format(name="Mia", a=a, b=b, c=c, d=d)
    solution = (f"The packs hold {b}*{c}=<<{b}*{c}={b * c}>>{b * c} stickers.\n"
                f"With them she has {a}+{b * c}=<<{a}+{b * c}={a + b * c}>>{a + b * c} stickers.\n"
                f"After giving some away she has {a + b * c}-{d}=<<{a + b * c}-{d}={total}>>{total} stickers.\n"
                f"#### {total}")
    item = _item(question, solution)
    res = perturb_gsm8k(item, m=2, seed=seed)
    assert res.items or res.reason  # never silent
    for ref in res.items:
        _check_reference(item, ref)
        na, nb, nc, nd = _values(ref.question)  # the oracle: the template's own formula on the new text
        assert Fraction(ref.answer) == na + nb * nc - nd > 0
        for new, old in ((na, a), (nb, b), (nc, c), (nd, d)):
            assert new == old or Fraction(1, 3) <= new / old <= 3  # near the old value (a factor, not a digit range)
        assert len(ref.answer) == len(str(total))  # the answer keeps its number of digits


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), pct=st.sampled_from([10, 20, 25, 40, 75]), price=st.integers(2, 99))
def test_property_percentages_stay_in_range_and_money_stays_in_cents(seed, pct, price):
    off = Fraction(price * pct, 100)
    if off.denominator != 1:
        return
    item = _item(f"A shirt costs ${price}. It is on sale for {pct}% off. What is the sale price?",
                 f"The discount is {price}*{pct}/100=<<{price}*{pct}/100={off}>>{off} dollars.\n"
                 f"The sale price is {price}-{off}=<<{price}-{off}={price - off}>>{price - off} dollars.\n"
                 f"#### {price - off}")
    res = perturb_gsm8k(item, m=1, seed=seed)
    for ref in res.items:
        _check_reference(item, ref)
        new_price, new_pct = _values(ref.question)
        assert 0 < new_pct <= 100 and re.search(rf"\${format_number(new_price)}\b", ref.question)
        assert Fraction(ref.answer) == new_price * (1 - new_pct / 100)


# ------------------------------------------------------------------------------- difficulty matching

CARLOS = {  # GSM8K test row 13: decimals ($1.5) whose products may be whole
    "question": "Carlos is planting a lemon tree. The tree will cost $90 to plant. Each year it will grow 7 lemons, "
                "which he can sell for $1.5 each. It costs $3 a year to water and feed the tree. How many years "
                "will it take before he starts earning money on the lemon tree?",
    "answer": "He makes $10.5 selling lemons each year because 7 x 1.5 = <<7*1.5=10.5>>10.5\nHe earns $7.5 each "
              "year from the lemon tree because 10.5 - 3 = <<10.5-3=7.5>>7.5\nIt will take 12 years to earn enough "
              "to pay off the tree because 90 / 7.5 = <<90/7.5=12>>12\nHe will make money in year 13 because "
              "12 + 1 = <<12+1=13>>13\n#### 13",
}
CALENDAR_ITEMS = [  # quantities a draw could push past a calendar or a clock
    ("Leo works 14 hours a day at a rate of $12 per hour. How much does he earn in 6 days?",
     "He earns 14*12=<<14*12=168>>168 dollars a day.\nIn 6 days he earns 168*6=<<168*6=1008>>1008 dollars.\n#### 1008"),
    ("A bakery is open 6 days a week and sells 45 loaves each day it is open. How many loaves does it sell in "
     "3 weeks?",
     "It sells 45*6=<<45*6=270>>270 loaves a week.\nIn 3 weeks it sells 270*3=<<270*3=810>>810 loaves.\n#### 810"),
    ("A printer runs 50 minutes an hour and prints 12 pages a minute. How many pages does it print in 4 hours?",
     "It prints 50*12=<<50*12=600>>600 pages an hour.\nIn 4 hours it prints 600*4=<<600*4=2400>>2400 pages.\n"
     "#### 2400"),
    ("Nina sleeps 9 hours each night and reads 20 pages every day. How many hours does she sleep in 25 days a "
     "month?",
     "She sleeps 9*25=<<9*25=225>>225 hours a month.\n#### 225"),
    ("A club meets 10 months a year and each meeting costs $35. How much does it spend in 4 years?",
     "Each year costs 10*35=<<10*35=350>>350 dollars.\nIn 4 years it spends 350*4=<<350*4=1400>>1400 dollars.\n"
     "#### 1400"),
]


@pytest.mark.parametrize("text", [
    "He works 30 hours a day.", "She visits 90 days a month.", "It is open 8 days a week.", "13 months a year",
    "He jogs 70 minutes an hour.", "a 30-hour day", "There are 31 days in April.", "A week has 9 days.",
    "The bus leaves at 14 pm.", "thirty hours a day", "He sleeps 25 hours of sleep each night.",
    "She works 200 hours per week.", "an 8-day week", "400 days a year", "6 weeks a month", "30 hours/day",
    "75 seconds a minute", "25 hours daily",
])
def test_scan_flags_impossible_calendar_and_clock_quantities(text):
    assert scan_impossible_quantities(text), text


@pytest.mark.parametrize("text", [
    "He works 8 hours a day.", "She visits 20 days a month.", "It is open 7 days a week.", "12 months a year",
    "He jogs 45 minutes an hour.", "an 8-hour day", "There are 30 days in April.", "A week has 7 days.",
    "The bus leaves at 3 pm or at 2:38 am.", "He works 30 hours a week.", "The car drives 60 miles per hour.",
    "He works 40 hours for 3 days a week.", "She pays every 30 days.", "He runs 90 minutes a day.",
    "24 hours in a day", "300 days a year", "He earns $30 an hour.", "It rained 100 days before the end of the year.",
])
def test_scan_passes_possible_quantities(text):
    assert scan_impossible_quantities(text) == [], text


def test_calendar_limits():
    assert [calendar_limit(u, p) for u, p in [("hours", "day"), ("days", "week"), ("days", "month"),
                                               ("months", "year"), ("minutes", "hour"), ("seconds", "minute"),
                                               ("weeks", "year"), ("hours", "week"), ("days", "year")]] \
        == [24, 7, 31, 12, 60, 60, 53, 168, 366]
    assert calendar_limit("days", "hour") is None  # a day does not fit in an hour: nothing to check


@pytest.mark.parametrize(("question", "answer"), CALENDAR_ITEMS)
def test_no_draw_makes_a_calendar_or_clock_quantity_impossible(question, answer):
    item = _item(question, answer)
    assert not scan_impossible_quantities(question)
    res = perturb_gsm8k(item, m=12, seed=3)
    assert len(res.items) >= 6, res.reason  # the validation rejects bad draws, not the item
    for ref in res.items:
        _check_reference(item, ref)
        assert scan_impossible_quantities(ref.question) == [], ref.question


def test_answer_keeps_digits_and_sign_and_moves_both_ways():
    # answer 48 = 6 * 8: p_larger(48) is about 1/2, so about half of many draws are larger
    item = _item("A box holds 6 rows of 8 eggs. How many eggs are in the box?",
                 "It holds 6*8=<<6*8=48>>48 eggs.\n#### 48")
    assert 0.45 < p_larger(48) < 0.55
    res = perturb_gsm8k(item, m=30, seed=0)
    assert len(res.items) >= 20, res.reason
    answers = [Fraction(r.answer) for r in res.items]
    assert all(10 <= a <= 99 for a in answers)  # two digits, positive
    share = sum(a > 48 for a in answers) / len(answers)
    assert 0.35 <= share <= 0.65, answers
    for ref in res.items:
        rows, eggs = _values(ref.question)
        assert Fraction(1, 3) <= rows / 6 <= 3 and Fraction(1, 3) <= eggs / 8 <= 3  # near the old values


def test_targets_follow_the_room_within_the_digit_range():
    assert p_larger(10) == 1.0 and p_larger(99) == 0.0 and p_larger(12) > 0.7 and p_larger(85) < 0.3
    rng = random.Random(0)
    targets = [t for _ in range(200) for t in draw_targets(50, 3, rng)]
    assert 0.4 < sum(t > 0 for t in targets) / len(targets) < 0.6
    assert sorted(set(draw_targets(10, 3, rng))) == [1, 2]
    # over Benford-distributed answers (uniform log10 in a digit range) up and down balance
    answers = [Fraction(round(10 ** (1 + k / 400))) for k in range(400)]
    assert abs(statistics.fmean(p_larger(a) for a in answers) - 0.5) < 0.03
    assert answer_bin(48, 50) == 1 and answer_bin(48, 90) == 2 and answer_bin(48, 40) == -1 and answer_bin(48, 20) == -2


def test_whole_numbers_print_without_a_decimal_point():
    item = _item(**CARLOS)
    res = perturb_gsm8k(item, m=8, seed=0)
    assert len(res.items) >= 4, res.reason
    for ref in res.items:
        _check_reference(item, ref)
        price = _values(ref.question)[2]
        assert price.denominator != 1  # "$1.5" stays a price with cents ...
        for text in (ref.question, ref.solution):
            assert not re.search(r"\d\.0+(?!\d)", text), text  # ... and no whole value prints as "16.0"
    assert _render_token("10.5", Fraction(16)) == "16" and _render_token("1.50", Fraction(9, 4)) == "2.25"
    assert _render_token("2.00", Fraction(3)) == "3.00" and _render_token(".5", Fraction(3, 4)) == ".75"
    assert _render_token("1,200", Fraction(950)) == "950" and _render_token("1,200", Fraction(1500)) == "1,500"


def test_article_for_numbers_read_aloud():
    an = [8, 11, 18, 80, 86, 800, 8000, 11000, 18500, Fraction(17, 2)]
    a = [1, 2, 7, 10, 12, 19, 100, 110, 1100, 1800, 180, Fraction(1, 2)]
    assert all(article_for(Fraction(x)) == "an" for x in an) and all(article_for(Fraction(x)) == "a" for x in a)


@pytest.mark.parametrize("hours", [6, 8, 11])
def test_articles_agree_with_the_new_numbers(hours):
    article = article_for(Fraction(hours))
    item = _item(f"Maria works {article} {hours}-hour shift and earns $11 per hour. How much does she earn "
                 "in 5 shifts?",
                 f"She earns {hours}*11=<<{hours}*11={hours * 11}>>{hours * 11} dollars a shift.\n"
                 f"In 5 shifts she earns {hours * 11}*5=<<{hours * 11}*5={hours * 55}>>{hours * 55} dollars.\n"
                 f"#### {hours * 55}")
    res = perturb_gsm8k(item, m=15, seed=1)
    assert len(res.items) >= 10, res.reason
    seen = set()
    for ref in res.items:
        m = re.search(r"works (an?) (\d+)-hour", ref.question)
        assert m and m.group(1) == article_for(Fraction(m.group(2))), ref.question
        seen.add(m.group(1))
    assert ("an" if hours == 6 else "a") in seen  # the article did change along with the number


def test_substitute_fixes_only_agreeing_articles():
    text = "An 8-hour day, a 7-hour day and a 8 pm slot"  # the last one was already wrong: left alone
    out = _substitute(text, [(3, 4, "5", Fraction(8), Fraction(5)), (17, 18, "11", Fraction(7), Fraction(11)),
                             (34, 35, "9", Fraction(8), Fraction(9))])
    assert out == "A 5-hour day, an 11-hour day and a 9 pm slot"


# ------------------------------------------------------------ the answer's class and special cases

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k" / "test_head12.jsonl"


def _fixture_items() -> list[Item]:
    from zcp.benchmarks.loaders import load_items

    return load_items(FIXTURE, format="gsm8k")


def test_answer_class_helpers():
    assert [significant_lead(Fraction(x)) for x in ("48", "0.75", "-300", "0", "1250")] == [4, 7, 3, 0, 1]
    assert answer_band(Fraction(48)) == (41, 49) and answer_band(Fraction(250)) == (210, 290)
    assert answer_band(Fraction(150)) == (110, 190) and answer_band(Fraction(1500)) == (1100, 1900)
    assert answer_band(Fraction(5, 2)) == (2, 3) and answer_band(Fraction(7)) is None
    assert [flexible_class(Fraction(x)) for x in (7, 1, 40, 10, 45, 400, 450, 5000)] == \
        ["one-digit", "one-digit", "one significant digit", "one significant digit", "two digits ending in 5",
         "one significant digit", None, "one significant digit"]
    assert keeps_answer_class(Fraction(48), Fraction(43)) and not keeps_answer_class(Fraction(48), Fraction(53))
    assert not keeps_answer_class(Fraction(43), Fraction(40))  # a plain answer stays off the multiples of 10
    assert not keeps_answer_class(Fraction(150), Fraction(100))  # never a special value
    assert keeps_answer_class(Fraction(7), Fraction(4)) and not keeps_answer_class(Fraction(7), Fraction(1))
    assert keeps_answer_class(Fraction(40), Fraction(60)) and not keeps_answer_class(Fraction(40), Fraction(45))
    assert keeps_answer_class(Fraction(1500), Fraction(1200)) and not keeps_answer_class(Fraction(1500), Fraction(1510))
    assert keeps_answer_class(Fraction(300), Fraction(700)) and not keeps_answer_class(Fraction(300), Fraction(340))


def test_leading_digit_roundness_and_digits_kept_on_real_rows():
    checked = 0
    for item in _fixture_items():
        answer = Fraction(item.answer)
        res = perturb_gsm8k(item, m=4, seed=0, fill=False, structure="require")
        for ref in res.items:
            _check_reference(item, ref)
            new = Fraction(ref.answer)
            assert ref.metadata["answer_class_kept"]
            assert len(str(abs(int(new)))) == len(str(abs(int(answer)))) and (new > 0) == (answer > 0)
            assert is_round(new) == is_round(answer) and not is_special(new)
            if ref.metadata.get("answer_lead_by_flow"):  # one-digit, one significant digit, or forced by the program
                assert significant_lead(new) != significant_lead(answer)
            else:
                assert significant_lead(new) == significant_lead(answer), (item.answer, ref.answer)
                checked += 1
    assert checked >= 20  # most of the 12 rows admit draws that keep the leading digit


def _one_digit_item() -> Item:
    return _item("Ann had 12 apples. She gave 5 apples to her brother. How many apples does Ann have now?",
                 "Ann has 12-5=<<12-5=7>>7 apples now.\n#### 7")


def test_one_digit_answer_takes_the_leading_digits_it_is_given():
    item = _one_digit_item()
    pool = collect_draws(item, m=6, seed=0)
    assert pool.flexible == "one-digit" and pool.lead_by_flow
    caps = pool.lead_capacity()
    assert 7 not in caps and 1 not in caps and len(caps) >= 3  # never its own digit, never the special 1
    d1, d2 = sorted(caps, key=lambda d: -caps[d])[:2]
    res = choose_draws(pool, {d1: 2, d2: 1}, fill=False)
    assert Counter(int(r.answer) for r in res.items) == Counter({d1: 2, d2: 1})
    for ref in res.items:
        _check_reference(item, ref)
    # without a transport: the digit-range bins of `draw_targets`, smaller and larger in proportion to the room
    default = perturb_gsm8k(item, m=6, seed=0, fill=False)
    answers = [int(r.answer) for r in default.items]
    assert len(answers) == 6 and len(set(answers)) >= 3 and 7 not in answers
    assert sum(a < 7 for a in answers) > sum(a > 7 for a in answers) > 0  # 1..9: more room below 7 than above


def test_lead_transport_matches_the_originals_digits_without_keeping_any():
    rng = random.Random(5)
    owns = [rng.choice([2, 2, 3, 3, 3, 4, 5, 6, 7, 8, 9]) for _ in range(60)]
    rows = [(own, {d: rng.randint(0, 4) for d in range(2, 10)}) for own in owns]
    got, report = lead_transport(rows, m=4, digits=range(2, 10), tolerance=1.0)
    assert report["left_out"] == 0 or report["items"] + report["left_out"] <= len(rows)
    mass: Counter = Counter()
    kept_owns: Counter = Counter()
    for (own, cap), counts in zip(rows, got, strict=True):
        if counts is None:
            continue
        kept_owns[own] += 1
        assert own not in counts and all(0 < n <= cap[d] for d, n in counts.items())
        assert sum(counts.values()) == min(4, sum(c for d, c in cap.items() if d != own))
        for d, n in counts.items():
            mass[d] += n / sum(counts.values())
    for d in range(2, 10):  # each digit's reference mass is its originals' count, within the tolerance (and
        assert abs(mass[d] - kept_owns[d]) <= 2.0, (d, mass[d], kept_owns[d])  # the rounding to whole draws)
    assert sum(abs(mass[d] - kept_owns[d]) for d in range(2, 10)) <= 4.0
    # digit 1 is reached by nothing, digit 2 by too much: under drop, items with a 1 are left out until the
    # masses agree within one item; without dropping, every item is kept (and the shift reported)
    rows = [(1, {2: 9})] * 3 + [(2, {3: 9})] * 3 + [(3, {2: 9})] * 3
    dropped, rep = lead_transport(rows, m=3, digits=range(1, 10), tolerance=1.0)
    assert rep["left_out"] == sum(c is None for c in dropped) == sum(c is None for c in dropped[:3]) >= 2
    left = Counter(own for (own, _), c in zip(rows, dropped, strict=True) if c is not None)
    assert all(abs(rep["reference"].get(d, 0) - left[d]) <= 1.0 for d in range(1, 10)), (rep, left)
    kept, rep_keep = lead_transport(rows, m=3, digits=range(1, 10), drop_unbalanced=False)
    assert all(c is not None for c in kept) and rep_keep["left_out"] == 0
    assert rep_keep["reference"] == {2: 6.0, 3: 3.0}  # what the items can reach, nothing else


@pytest.mark.parametrize(("question", "answer", "value"), [
    ("Ann has 5 apples and eats 5 of them. How many apples are left?", "She has 5-5=<<5-5=0>>0 left.\n#### 0", "0"),
    ("Ann has 9 apples and eats 8 of them. How many apples are left?", "She has 9-8=<<9-8=1>>1 left.\n#### 1", "1"),
    ("Ann has 4 apples and buys 6 more. How many apples does she have?", "She has 4+6=<<4+6=10>>10.\n#### 10", "10"),
    ("A box holds 4 rows of 25 eggs. How many eggs are in the box?", "It holds 4*25=<<4*25=100>>100 eggs.\n#### 100",
     "100"),
])
def test_special_values_are_special_cases(question, answer, value):
    reasons = special_case_reasons(_item(question, answer))
    assert reasons and f"the answer {value} is a special value" in reasons[0]


def test_equal_question_numbers_that_fix_the_answer_are_special_cases():
    item = _item("Tom has 7 marbles and buys 7 more. He shares them equally among 7 friends. How many marbles "
                 "does each friend get?",
                 "He has 7+7=<<7+7=14>>14 marbles.\nEach friend gets 14/7=<<14/7=2>>2 marbles.\n#### 2")
    reasons = special_case_reasons(item)
    assert len(reasons) == 1 and "equal question numbers 7 (3 times) fix the answer at 2" in reasons[0]
    assert not perturb_gsm8k(item, m=2, seed=0).items  # indeed no draw can change the answer
    assert special_case_reasons(_item(**JANET)) == [] and special_case_reasons(_one_digit_item()) == []


SASHA = {  # GSM8K test row 116: 0.5 * (10 x 10 + 5 x 16) = 90 is a multiple of 10 by coincidence
    "question": "Sasha notices that prices for lumber have gone up 50% in the last few months after she bought some "
                "lumber. Since she has leftovers, she decides to sell them. She has leftover ten 2 x 4 x 10 boards "
                "that cost her $10 each. She also has five 4 x 4 x 10 boards she bought for $16 each. If she sells "
                "them all, how much profit does she make?",
    "answer": "She bought the 2 x 4s for $100 because 10 x 10 = 100\nShe bought the 4 x 4s for 80 because 5 x 16 = 80\n"
              "She paid $180 for the lumber because 100 + 80 = <<100+80=180>>180\nThe same number now sells for $270 "
              "because 180 x 1.5 = <<180*1.5=270>>270\nShe made $90 in profit because 270 - 180 = <<270-180=90>>90\n"
              "#### 90",
}


def test_round_answer_without_a_round_alternative_is_found_by_the_draws():
    item = _item(**SASHA)
    assert special_case_reasons(item) == []  # no rule sees it ...
    reasons = special_case_reasons(item, m=3, scan=True)  # ... the draws do
    assert reasons == ["the round answer 90 has no round alternative (no valid draw is a multiple of 10 but not of "
                       "100)"]
    res = perturb_gsm8k(item, m=3, seed=0, special_cases="keep", fill=False)
    assert res.special_case == reasons and res.items  # kept: the best draws, flagged
    assert all(r.metadata["special_case"] == reasons and not r.metadata["answer_class_kept"] for r in res.items)
    assert not perturb_gsm8k(item, m=3, seed=0, special_cases="drop").items


def test_special_case_policy_drop_and_keep_through_the_registry():
    from zcp.benchmarks.references.registry import BuildContext, build_references

    ordinary = _item(**JANET)
    one = _item("Ann has 9 apples and eats 8 of them. How many apples are left?",
                "She has 9-8=<<9-8=1>>1 left.\n#### 1", 1)
    ten = _item("Ann has 4 apples and buys 6 more. How many apples does she have?",
                "She has 4+6=<<4+6=10>>10.\n#### 10", 2)
    items = [ordinary, one, ten]
    drop = build_references(items, "gsm8k", 3, BuildContext(seed=0, special_cases="drop"))
    assert set(drop.refs) == {ordinary.id}
    rejected = {r["id"]: r for r in drop.rejections}
    for it in (one, ten):
        assert rejected[it.id]["kept"] == 0
        assert rejected[it.id]["reason"].startswith("special case (reference.special_cases=drop): the answer ")
    assert drop.report["special_cases"]["policy"] == "drop" and drop.report["special_cases"]["dropped"] == 2
    assert all("special_case" not in r.metadata for r in drop.refs[ordinary.id])
    keep = build_references(items, "gsm8k", 3, BuildContext(seed=0, special_cases="keep"))
    assert {one.id, ten.id} <= set(keep.refs)
    for it in (one, ten):
        for r in keep.refs[it.id]:
            assert "special value" in r.metadata["special_case"][0]
            assert not is_special(Fraction(r.answer))  # the draws still avoid special values
    assert keep.report["special_cases"]["kept"] == 2 and keep.report["special_cases"]["dropped"] == 0
    assert all("special_case" not in r.metadata for r in keep.refs[ordinary.id])


def test_references_of_200_real_rows_are_exchangeable_feature_by_feature(shared_data):
    """The per-feature exchangeability check of the build report, on the first 200 GSM8K test rows (m = 3 to
    stay fast): no feature with a Bonferroni-adjusted p below 0.01 under the default policy (drop)."""
    from zcp.benchmarks.loaders import load_items
    from zcp.benchmarks.references.registry import BuildContext, build_references

    path = shared_data / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found")
    items = load_items(path, format="gsm8k", limit=200)
    out = build_references(items, "gsm8k", 3, BuildContext(seed=0))
    ex = out.report["exchangeability"]
    assert ex["items"] >= 120  # coverage stays reasonable (64% of the rows have a draw, docs/results/gsm8k_references.md)
    assert ex["min_p_bonferroni"] >= 0.01, ex["warnings"]
    assert ex["features"]["answer_special_0_1_10_100_1000"]["reference"] == 0.0
    assert ex["leading_digit"]["total_variation"] < 0.05
    for oid, draws in out.refs.items():
        orig = Fraction(next(it for it in items if it.id == oid).answer)
        for r in draws:
            if not r.metadata.get("answer_lead_by_flow"):
                assert significant_lead(Fraction(r.answer)) == significant_lead(orig)

"""Exchangeability of references with their originals, feature by feature (build_report.json).

The ZCP test assumes that, for a model that never saw the item, the original is just another draw of its
family. A clean model responds to surface features of a number: its leading digit (with digit-split
tokenizers the first answer token; models put zero-CoT mass on 1 and 2), special values (0, 1, 10, 100),
round numbers, magnitude, equal inputs, an answer that repeats a number of the question. Any of these that
differs systematically between originals and references breaks the null and shows as a false positive.

`feature_shift` measures each feature on every version of every item (the original and its draws) and tests,
per feature, H0 "the original is exchangeable with its draws" with the same within-item permutation test the
probe uses (`zcp.core.permutation.paired_test`; exact for 0/1 features, Monte Carlo otherwise), two-sided. Under an exact
builder every p is uniform; a small Bonferroni-adjusted p names a feature the builder does not match (the
residual shift is reported either way: original mean, reference mean, difference).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from zcp.core.items import Item

SPECIAL_VALUES = (0, 1, 10, 100, 1000)
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
WARN_BELOW = 0.01  # Bonferroni-adjusted two-sided p under which a feature's shift is warned about
_MC_B = 2000


def numeric_answer(text: Any) -> Fraction | None:
    """The exact value of a numeric answer text ("18", "-4.2317", "$1,250", "35%", "3/4"); None otherwise."""
    s = str(text).strip().replace(",", "").replace("$", "").replace("\\$", "").replace("\\%", "").rstrip("%")
    s = re.sub(r"^\\boxed\{(.*)\}$", r"\1", s).strip()
    m = re.fullmatch(r"\\d?frac\{(-?\d+)\}\{(-?\d+)\}", s)
    if m:
        s = f"{m.group(1)}/{m.group(2)}"
    if not re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)(/\d+)?", s):
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def leading_digit(text: Any) -> str | None:
    """The first nonzero digit of an answer as written ("0.75" -> "7", "-40" -> "4"); None without one."""
    for ch in str(text):
        if ch in "123456789":
            return ch
    return None


def _last_digit(text: Any) -> str | None:
    """The last digit of an answer as written, trailing decimal zeros dropped ("35" -> "5", "2.50" -> "5")."""
    s = str(text).strip().rstrip("%").replace(",", "")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    digits = [ch for ch in s if ch.isdigit()]
    return digits[-1] if digits else None


def question_numbers(question: str) -> list[Fraction]:
    """The numbers written in a question (digits; thousands commas allowed), in order."""
    out = []
    for m in _NUMBER_RE.finditer(question):
        try:
            out.append(Fraction(m.group(0).replace(",", "")))
        except (ValueError, ZeroDivisionError):
            continue
    return out


def _features(item: Item) -> dict[str, float] | None:
    a = numeric_answer(item.answer)
    if a is None:
        return None
    lead = leading_digit(item.answer)
    nums = question_numbers(item.question)
    whole = a.denominator == 1
    leads = {leading_digit(str(abs(x))) for x in nums}
    f: dict[str, float] = {f"answer_leading_digit_{d}": float(lead == str(d)) for d in range(1, 10)}
    f.update({
        "answer_leads_1_or_2": float(lead in ("1", "2")),
        "answer_special_0_1_10_100_1000": float(whole and abs(a) in SPECIAL_VALUES),
        "answer_round_multiple_of_10": float(whole and a != 0 and a % 10 == 0),
        "answer_negative": float(a < 0),
        "answer_not_whole": float(not whole),
        "answer_digits": float(len(str(int(abs(a))))),
        "answer_log10_abs": math.log10(1.0 + float(abs(a))),
        "answer_ends_in_5": float(_last_digit(item.answer) == "5"),
        "answer_equals_a_question_number": float(any(x == a for x in nums)),
        "answer_leads_like_a_question_number": float(lead is not None and lead in leads),
        "answer_equals_the_last_question_number": float(bool(nums) and nums[-1] == a),
        "answer_leads_like_the_last_question_number": float(bool(nums) and lead is not None
                                                            and lead == leading_digit(str(abs(nums[-1])))),
        "question_has_equal_numbers": float(len(nums) != len(set(nums))),
        "question_round_number_share": (sum(1 for x in nums if x.denominator == 1 and x != 0 and x % 10 == 0)
                                        / len(nums)) if nums else 0.0,
    })
    return f


_CONTINUOUS = ("answer_digits", "answer_log10_abs", "question_round_number_share")


def _two_sided(metric: str, x: list[float], y: list[list[float]], binary: bool) -> float:
    from zcp.core.permutation import paired_test

    kind = "binary" if binary else "continuous"
    hi = paired_test(metric, x, y, B=_MC_B, kind=kind).p_value
    if binary:
        lo = paired_test(metric, [1.0 - v for v in x], [[1.0 - v for v in r] for r in y], kind=kind).p_value
    else:
        lo = paired_test(metric, [-v for v in x], [[-v for v in r] for r in y], B=_MC_B, kind=kind).p_value
    return min(1.0, 2.0 * min(hi, lo))


def feature_shift(items: Sequence[Item], refs: Mapping[str, Sequence[Item]],
                  features: Callable[[Item], dict[str, float] | None] = _features) -> dict[str, Any]:
    """Per feature: mean over originals, mean over their draws (per item averaged first), difference, and the
    two-sided within-item permutation p of "originals are exchangeable with their draws"; plus the leading-
    digit distributions (total variation distance) and warnings for features whose Bonferroni-adjusted p is
    below `WARN_BELOW`. Items without draws or with a non-numeric answer are left out (counted)."""
    orig: list[dict[str, float]] = []
    draws: list[list[dict[str, float]]] = []
    skipped = 0
    for it in items:
        rs = refs.get(it.id) or []
        fo = features(it)
        fr = [f for f in (features(r) for r in rs) if f is not None]
        if fo is None or not fr:
            skipped += 1
            continue
        orig.append(fo)
        draws.append(fr)
    out: dict[str, Any] = {"items": len(orig), "items_left_out": skipped,
                           "test": "two-sided within-item permutation test per feature (zcp.probe.stats.paired_test)"}
    if len(orig) < 2:
        out.update({"features": {}, "warnings": []})
        return out
    names = list(orig[0])
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        x = [o[name] for o in orig]
        y = [[d[name] for d in ds] for ds in draws]
        binary = name not in _CONTINUOUS
        mo, mr = float(np.mean(x)), float(np.mean([np.mean(v) for v in y]))
        varies = len({*x, *(v for r in y for v in r)}) > 1
        p = _two_sided(name, x, y, binary) if varies else 1.0
        rows[name] = {"original": round(mo, 4), "reference": round(mr, 4), "difference": round(mo - mr, 4),
                      "p_two_sided": p}
    k = len(rows)
    for r in rows.values():
        r["p_bonferroni"] = min(1.0, r["p_two_sided"] * k)
    warnings = [f"{name}: originals {r['original']:.3f} vs references {r['reference']:.3f} "
                f"(Bonferroni p = {r['p_bonferroni']:.2g})" for name, r in rows.items() if r["p_bonferroni"] < WARN_BELOW]
    lead_o = Counter(str(d) for o in orig for d in range(1, 10) if o[f"answer_leading_digit_{d}"])
    lead_r = Counter()
    for ds in draws:
        for d in ds:
            for j in range(1, 10):
                if d[f"answer_leading_digit_{j}"]:
                    lead_r[str(j)] += 1.0 / len(ds)
    to, tr = sum(lead_o.values()) or 1, sum(lead_r.values()) or 1
    dist_o = {str(d): round(lead_o[str(d)] / to, 4) for d in range(1, 10)}
    dist_r = {str(d): round(lead_r[str(d)] / tr, 4) for d in range(1, 10)}
    out.update({
        "features": rows,
        "min_p_bonferroni": min(r["p_bonferroni"] for r in rows.values()),
        "leading_digit": {"original": dist_o, "reference": dist_r,
                          "total_variation": round(sum(abs(dist_o[d] - dist_r[d]) for d in dist_o) / 2, 4)},
        "warnings": warnings,
    })
    return out

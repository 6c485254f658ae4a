"""One draw of new question numbers for an item's program, re-executed and validated.

`_sample` draws new values for the free variables (by attempt stage) and computes the solved ones;
`_try` re-executes the chain and checks it (whole stays whole, signs, decimals, every reading agrees, the
question's relations, the answer's digits and spread). Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from zcp.benchmarks.references.gsm8k.answer_class import significant_lead
from zcp.benchmarks.references.gsm8k.program import MAX_SPREAD, _Analysis, _relation_holds
from zcp.benchmarks.references.gsm8k.quantities import _decimal_places
from zcp.benchmarks.references.matching import ANSWER_SPREAD, SPREAD, answer_digits


@dataclass
class _Draw:
    values: dict[int, Fraction]  # variable -> new value (only those that changed)
    literals: list[list[Fraction]]
    results: list[Fraction]


def _try(an: _Analysis, new: dict[int, Fraction]) -> tuple[_Draw | None, str]:
    """Re-execute the chain with new variable values and check the constraints."""
    chain = an.chain
    results: list[Fraction] = []
    literals: list[list[Fraction]] = []
    for k, st in enumerate(chain.steps):
        vals = []
        for src in an.bindings[k]:
            if src[0] == "c":
                vals.append(src[1])
            elif src[0] == "r":
                vals.append(results[src[1]])
            else:
                var = an.variables[src[1]]
                vals.append(var.forms[src[2]](new.get(src[1], var.value)))
        try:
            res = st.evaluate(vals)
        except ZeroDivisionError:
            return None, "division by zero"
        old = st.result
        if old.denominator == 1 and res.denominator != 1:
            return None, "a whole intermediate became fractional"
        if (old > 0) != (res > 0) or (old < 0) != (res < 0):
            return None, "an intermediate changed sign"
        places = _decimal_places(res)
        if places is None or places > max(2, _decimal_places(old) or 0):
            return None, "an intermediate needs too many decimals"
        if any((_decimal_places(v) is None) or _decimal_places(v) > 4 for v in vals):
            return None, "a literal needs too many decimals"
        literals.append(vals)
        results.append(res)
    # independent check: every reading of every literal still gives the same value, so the new chain
    # is right whichever source the author meant
    for k, per_lit in enumerate(an.candidates):
        for cands, val in zip(per_lit, literals[k], strict=True):
            for c in cands:
                alt = c[1] if c[0] == "c" else results[c[1]] if c[0] == "r" else \
                    an.variables[c[1]].forms[c[2]](new.get(c[1], an.variables[c[1]].value))
                if alt != val:
                    return None, "the readings of a literal disagree"
    def value(t: Any) -> Fraction:
        return new.get(t, an.variables[t].value) if isinstance(t, int) else t

    for target, kind, terms in an.relations:
        if not _relation_holds(kind, value(target), [value(t) for t in terms]):
            return None, ("a number tied to another outside the chain would break the tie" if kind == "below"
                          or len(terms) == 1 else "a relation between the question's numbers would break")
    answer = results[chain.final_step]
    if answer == chain.answer:
        return None, "the final answer did not change"
    if answer_digits(answer) != answer_digits(chain.answer):
        return None, "the final answer changed its number of digits"
    if not chain.answer / ANSWER_SPREAD <= answer <= chain.answer * ANSWER_SPREAD:
        return None, f"the final answer moved by more than a factor {ANSWER_SPREAD:g}"
    return _Draw(dict(new), literals, results), ""


def _compiled(an: _Analysis) -> dict[int, Any]:
    """The dependent variables' sympy expressions as compiled Python over Fractions (subs is too slow)."""
    if an.compiled is None:
        an.compiled = {}
        for vi, expr in an.dependent.items():
            text = re.sub(r"(?<![\w.])(\d+)(?![\w.])", r"F(\1)", str(expr))  # exact: F(3)/F(2), not 1.5
            an.compiled[vi] = compile(text, f"<dependent v{vi}>", "eval")
    return an.compiled


def _dependents(an: _Analysis, new: dict[int, Fraction]) -> dict[int, Fraction]:
    """The solved variables' values for drawn values `new` (raises ZeroDivisionError etc. when undefined)."""
    env = {f"v{vi}": new.get(vi, v.value) for vi, v in enumerate(an.variables)}
    return {vi: Fraction(eval(code, {"F": Fraction, "__builtins__": {}}, env))  # our own sympy output
            for vi, code in _compiled(an).items()}


def _leanings(an: _Analysis) -> dict[int, int]:
    """For each free variable, +1 if raising it raises |answer| (at the original values), -1 if it
    lowers it, 0 if neither or unknown: which way to lean a draw that should make the answer larger."""
    out: dict[int, int] = {}
    for vi in an.free:
        new = {vi: an.variables[vi].value * Fraction(1001, 1000)}
        try:
            new.update(_dependents(an, new))
            results: list[Fraction] = []
            for k, st in enumerate(an.chain.steps):
                vals = [src[1] if src[0] == "c" else results[src[1]] if src[0] == "r" else
                        an.variables[src[1]].forms[src[2]](new.get(src[1], an.variables[src[1]].value))
                        for src in an.bindings[k]]
                results.append(st.evaluate(vals))
        except (ZeroDivisionError, TypeError, ValueError, NameError):
            out[vi] = 0
            continue
        delta = abs(results[an.chain.final_step]) - abs(an.chain.answer)
        out[vi] = (delta > 0) - (delta < 0)
    return out


_STAGE_SPREAD = (SPREAD, 2.5, MAX_SPREAD)


def _sample(an: _Analysis, rng: random.Random, stage: int, direction: int = 0,
            leanings: dict[int, int] | None = None, lead: tuple[int, int] | None = None
            ) -> tuple[dict[int, Fraction] | None, str]:
    """Draw new values near the old ones (`Variable.draw`): stage 0 all free variables, round numbers
    stay round (and the others off the multiples of 10), factors in [1/2, 2]; stage 1 factors up to 2.5,
    half the draws with any last digit; stage 2 up to 3 and also a random subset of the free variables
    (the others keep their values).

    `direction` (+1 a larger answer, -1 a smaller one) leans each draw the way that moves the answer
    there (`leanings`), 3 times in 4; the draws of both directions together stay symmetric.

    `lead` (the original answer's leading digit, the draw's target leading digit): the structure-holding
    draw of `zcp.benchmarks.references.gsm8k.pool.collect_draws`'s second phase. Every drawn number starts
    with the target digit exactly when its old value started with the answer's own digit, and round numbers
    stay round at every stage, so that the answer's coincidences with the question's numbers ("starts like a
    question number", "starts like the last one") and the count of round question numbers come out as in the
    original far more often than by chance; the draw is still checked like any other."""
    chosen = list(an.free)
    if stage >= 2 and len(chosen) > 1:
        chosen = rng.sample(chosen, rng.randint(1, len(chosen) - 1))
    keep = stage == 0 or lead is not None or rng.random() < 0.5

    def rule(vi: int) -> tuple[int, bool] | None:
        if lead is None:
            return None
        return lead[1], significant_lead(an.variables[vi].value) == lead[0]

    new = {vi: an.variables[vi].draw(rng, keep_roundness=keep, spread=_STAGE_SPREAD[stage],
                                     lean=direction * (leanings or {}).get(vi, 0), lead=rule(vi))
           for vi in chosen}
    if an.dependent:
        try:
            solved = _dependents(an, new)
        except (ZeroDivisionError, TypeError, ValueError, NameError):
            return None, "a constrained value is undefined"
        for vi, fval in solved.items():
            if not an.variables[vi].admissible(fval):
                return None, "a constrained value left its range"
            new[vi] = fval
    new = {vi: v for vi, v in new.items() if v != an.variables[vi].value}
    return (new or None), "no value changed"

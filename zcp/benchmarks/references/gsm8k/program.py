"""The item's program: every chain literal bound to its readings, and the question numbers that may move.

`_analyse` binds each literal of the chain to a question number (a percentage also as p/100, ...), an
earlier result or a constant; keeps the readings that could diverge equal as sympy constraints (solved for
some variables, which are then computed from the others) or freezes the variables involved; records the
coincidences among the question's numbers a draw must keep (`_relations`). `Variable.draw` is the
per-value draw rule (log-symmetric factor, roundness kept). Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

import ast
import functools
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from typing import Any

from zcp.benchmarks.references.gsm8k.chain import _ANN_RE, Chain, _residual_text, parse_chain
from zcp.benchmarks.references.gsm8k.quantities import (
    SPECIAL_WORDS,
    UNIT_CONSTANTS,
    Quantity,
    _implicit_constant,
    _mentions,
    _unit_constant,
    extract_quantities,
    format_number,
)
from zcp.benchmarks.references.matching import SPREAD
from zcp.benchmarks.references.matching import round_quantum as _quantum
from zcp.benchmarks.references.matching import roundness as _roundness
from zcp.core.io import stable_hash
from zcp.core.items import Item

# A drawn question number is its old value times a log-uniform factor in [1/SPREAD, SPREAD] (later in the
# attempt budget up to MAX_SPREAD); a value solved from the others must also stay within MAX_SPREAD.
# (SPREAD and ANSWER_SPREAD, the difficulty-matching bins and `_roundness` live in zcp.benchmarks.references.matching,
# shared with the word-problem and ArithMark references.)
MAX_SPREAD = 3.0


# A source of a literal: ("c", value) constant; ("q", var, form) question variable; ("r", step) result.
Source = tuple
_PERCENT_FORMS: dict[str, Callable[[Any], Any]] = {
    "x": lambda x: x,
    "x/100": lambda x: x / 100,
    "1-x/100": lambda x: 1 - x / 100,
    "1+x/100": lambda x: 1 + x / 100,
    "100-x": lambda x: 100 - x,
    "100+x": lambda x: 100 + x,
}
_PLAIN_FORMS = {"x": _PERCENT_FORMS["x"]}
_CENT_FORMS = {"x": _PERCENT_FORMS["x"], "x/100": _PERCENT_FORMS["x/100"]}


@dataclass
class Variable:
    """A question value (all its occurrences: they change together) that may be perturbed."""

    value: Fraction
    occurrences: list[Quantity]
    percent: bool
    forms: dict[str, Callable[[Any], Any]]

    @property
    def decimals(self) -> int:
        """Most decimal places any occurrence is written with ($1.50 -> 2)."""
        return max((q.decimals for q in self.occurrences), default=0)

    def draw(self, rng: random.Random, keep_roundness: bool = True, spread: float = SPREAD,
             lean: int = 0, lead: tuple[int, bool] | None = None) -> Fraction:
        """A new value near this one: the value times a log-uniform factor in [1/spread, spread].

        The factor is as likely to be below 1 as above it, so a draw goes down as often as up and
        keeps the value's order of magnitude (a benchmark's numbers skew small; a draw uniform over
        the digit range would make references systematically larger); `lean` +1 (-1) makes the factor
        above (below) 1 three times in four, for a draw aimed at a larger (smaller) answer. The result is rounded to the
        written decimals and must pass `admissible`; with `keep_roundness` a round number stays round at
        its new magnitude (100 -> 70 or 200, 15 -> 5 or 25), a whole multiple of 10 stays one (10 -> 20,
        never 7) and any other whole number stays off them (7 -> 12, never 10; 23 -> 31, never 30). `lead`
        (digit d, wanted): the new value's first significant digit is d exactly when `wanted` (a draw that keeps
        the answer's leading digit d keeps which question numbers start like the answer: "... has 20 sheep" ->
        260 keeps a question number starting with 2, one that started otherwise does not take 2). Returns the
        old value when 20 tries fail.
        """
        scale = 10**self.decimals
        u = int(self.value * scale)
        g = _roundness(u) if keep_roundness else 1
        round_class, tenth = keep_roundness, 10 * scale  # "$10.00": a multiple of 10 in dollars
        log_s = math.log(spread)
        whole = self.value.denominator == 1
        top = 100 * scale if self.percent and self.value <= 100 else None
        for _ in range(20):
            step = rng.uniform(0.0, log_s)
            up = rng.random() < (0.75 if lean > 0 else 0.25 if lean < 0 else 0.5)
            x = u * math.exp(step if up else -step)
            q = _quantum(g, u, x) if g > 1 else 1
            k = max(1, math.floor(x / q + 0.5)) * q
            # the checks of `admissible`, on integers (this loop is the hot path of a reference build)
            if k == u or k < 2 or (k % scale == 0) != whole or (top is not None and k > top) \
                    or not u <= k * MAX_SPREAD or not k <= u * MAX_SPREAD:
                continue
            if round_class and (k % tenth == 0) != (u % tenth == 0):
                continue  # a multiple of 10 stays one (10 -> 20, never 7) and any other number stays off them
            if lead is not None and (int(str(k)[0]) == lead[0]) != lead[1]:
                continue  # k is the value in its last written place: its first digit is the value's first significant one
            return Fraction(k, scale)
        return self.value

    def admissible(self, new: Fraction, spread: float = MAX_SPREAD) -> bool:
        """Whether a new (drawn or solved) value keeps this variable's kind: the written decimals, whole
        stays whole and a fraction stays a fraction ("$1.50" never becomes "$2.00"), at least 2 in the
        last written place, within a factor `spread` of the old value, percentages in (0, 100]."""
        u = new * 10**self.decimals
        if u.denominator != 1 or u < 2 or (new.denominator == 1) != (self.value.denominator == 1):
            return False
        if self.percent and self.value <= 100 and new > 100:
            return False
        return float(self.value) <= float(new) * spread and float(new) <= float(self.value) * spread


@dataclass
class _Analysis:
    question: str
    chain: Chain
    quantities: list[Quantity]
    variables: list[Variable]
    candidates: list[list[list[Source]]]  # per step, per literal: every reading of the literal
    bindings: list[list[Source]]  # per step, per literal: the reading used
    free: list[int]  # variables drawn at random
    dependent: dict[int, Any]  # variables computed from the free ones (sympy expressions)
    symbols: list[Any]
    frozen_values: dict[str, str]  # value -> reason it stays (for the report)
    relations: list[tuple[Any, str, tuple[Any, ...]]] = field(default_factory=list)  # checked per draw
    compiled: dict[int, Any] | None = None
    used: set[int] = field(default_factory=set)  # variables some literal of the chain may stand for
    answer_vars: set[int] = field(default_factory=set)  # variables the symbolic answer depends on


def _analyse(item: Item, strict: bool = True) -> _Analysis:
    """Parse, bind and disambiguate; raises ValueError with the reason when the item cannot be used.

    `strict=False` returns the analysis even when nothing can be perturbed or the answer depends on no
    perturbable number (`special_case_reasons` inspects such items: x - x, x / x). The analysis (sympy
    work) is cached per item text: the builder asks for the special-case rules and then for the draws."""
    an = _analysis_of(item.id, item.question, item.solution, item.answer)
    if strict and not an.free:
        raise ValueError("no question number that feeds the computation can be perturbed"
                         + (f" (kept: {an.frozen_values})" if an.frozen_values else ""))
    if strict and not an.answer_vars & (set(an.free) | set(an.dependent)):
        raise ValueError("the final answer does not depend on any perturbable question number")
    return an


@functools.lru_cache(maxsize=2048)
def _analysis_of(item_id: str, question: str, solution: str | None, answer: str) -> _Analysis:
    import sympy

    item = Item(id=item_id, question=question, answer=answer, solution=solution)

    if not item.solution:
        raise ValueError("no worked solution")
    chain = parse_chain(item.solution, item.answer)
    question = item.question
    context = question + " " + _ANN_RE.sub(" ", item.solution)
    quantities = extract_quantities(question)
    cents = _mentions(question, ("cent",))

    special: dict[Fraction, str] = {}  # values a word of the question stands for (twice, half, dozen)
    for word in re.findall(r"[a-z]+", question.lower()):
        for v in SPECIAL_WORDS.get(word, ()):
            special.setdefault(v, f"'{word}' in the question")
    for m in re.finditer(r"(?<![\d.])(\d+)/(\d+)(?![\d.])", question):  # "1/4 pound": the fraction is a constant
        if int(m.group(2)):
            special.setdefault(Fraction(int(m.group(1)), int(m.group(2))), "a fraction in the question")

    by_value: dict[Fraction, list[Quantity]] = {}
    for q in quantities:
        by_value.setdefault(q.value, []).append(q)
    variables: list[Variable] = []
    frozen_values: dict[str, str] = {}
    constants: set[Fraction] = set(special)  # values that stay as they are
    for value, occ in by_value.items():
        reason = next((q.frozen for q in occ if q.frozen), None)
        if reason is None and value in (0, 1):
            reason = "0 and 1 are structural"
        if reason is None and value in special:
            reason = special[value]
        if reason is None and value.denominator == 1 and int(value) in UNIT_CONSTANTS \
                and _mentions(context, UNIT_CONSTANTS[int(value)]):
            reason = "possible unit constant"
        if reason is None and value == 100 and any(q.percent for q in occ):
            reason = "100%"
        if reason is None and re.search(rf"\bthere (?:are|is|were|was) {re.escape(format_number(value))}\s+[a-z]+\s+"
                                        r"(?:in|from|between|per|a|an|each)\b", item.solution, re.IGNORECASE):
            reason = "stated as a fact in the solution"  # "there are 5 days from Monday to Friday"
        if reason is not None:
            frozen_values[format_number(value)] = reason
            constants.add(value)
            continue
        percent = any(q.percent for q in occ)
        forms = _PERCENT_FORMS if percent else (_CENT_FORMS if cents else _PLAIN_FORMS)
        variables.append(Variable(value, occ, percent, dict(forms)))

    residual = _residual_text(item.solution, chain)
    candidates: list[list[list[Source]]] = []
    for k, st in enumerate(chain.steps):
        per_lit = []
        for lit in st.literals:
            cands: list[Source] = [("r", j) for j in range(k) if chain.steps[j].result == lit]
            cands += [("q", vi, "x") for vi, var in enumerate(variables) if var.value == lit]
            if lit in constants or (cands and _unit_constant(lit, context)):
                cands.append(("c", lit))  # e.g. 60 may be an earlier result or the minutes in an hour
            if not cands:
                # a derived form of a percentage (25% -> .25, .75, 75, 1.25) only explains a literal that
                # is neither an earlier result nor a number of the question: those readings come first
                for vi, var in enumerate(variables):
                    cands += [("q", vi, name) for name, f in var.forms.items() if name != "x" and f(var.value) == lit]
            if not cands:
                if not _implicit_constant(lit, context):
                    raise ValueError(f"literal {format_number(lit)} in '{st.expr.strip()}' is neither a number of "
                                     "the question, an earlier result nor a unit constant named in the text "
                                     "(unbindable)")
                cands.append(("c", lit))
            if isinstance(st.tree, ast.Name) and not any(c[0] == "r" for c in cands):
                line = item.solution[:st.start].rsplit("\n", 1)[-1]
                if re.search(r"[-+*/×÷x]\s*\$?\.?\d|divided|times|minus|plus|multipl|sum|product", line):
                    raise ValueError(f"'<<{st.expr.strip()}=...>>' restates a value computed in the prose")
            if re.search(r"=\s*\$?\s?" + re.escape(format_number(lit)) + r"(?![\d.]\d|\s*[-+*/x×÷−]\s*\$?\.?\d)",
                         residual) \
                    and not any(c[0] == "r" for c in cands):
                raise ValueError(f"literal {format_number(lit)} in '{st.expr}' may come from an "
                                 "unannotated computation")
            per_lit.append(cands)
        candidates.append(per_lit)

    # Disambiguation. A literal may have several sources that agree on the original numbers (it equals
    # a question number and an earlier result, say). Rather than guess which one the author meant, keep
    # the readings equal: the equality becomes a constraint between the variables (solved with sympy
    # for some of them, which are then computed from the others); when that is impossible the variables
    # involved are frozen. Either way the re-executed chain is right under every reading.
    symbols = [sympy.Symbol(f"v{i}") for i in range(len(variables))]
    original = {symbols[i]: sympy.Rational(v.value.numerator, v.value.denominator) for i, v in enumerate(variables)}
    constraints: list[Any] = []
    frozen: set[int] = set()
    solution: dict[int, Any] = {}
    rng = random.Random(int(stable_hash(item.id), 16))
    for _ in range(3 * len(variables) + 3):
        bound = _bind(chain, candidates, variables, symbols, frozen, solution, rng)
        if isinstance(bound, tuple):
            bindings, sym_results = bound
            break
        exprs = bound
        involved = {int(str(s)[1:]) for e in exprs for s in e.free_symbols}
        trial = _solve(constraints + [exprs[0] - e for e in exprs[1:]], symbols, original, frozen)
        if trial is not None:
            constraints += [exprs[0] - e for e in exprs[1:]]
            solution = trial
        else:
            frozen |= involved
            solution = _solve(constraints, symbols, original, frozen) or {}
            for vi in involved:
                frozen_values[format_number(variables[vi].value)] = "ambiguous reading in the solution"
    else:  # pragma: no cover - each round freezes or constrains at least one variable
        raise ValueError("could not disambiguate the chain")

    # coincidences among the question's numbers become constraints too (solved like the readings), or,
    # when they cannot be solved for, checks every draw must pass
    used_now = {c[1] for per_lit in candidates for cands in per_lit for c in cands if c[0] == "q"}
    to_solve, checks = _relations(quantities, variables, used_now, question)
    for target, kind, terms in to_solve:
        expr = symbols[target] - _relation_value(kind, [symbols[t] for t in terms])
        trial = _solve([*constraints, expr], symbols, original, frozen)
        if trial is not None:
            constraints.append(expr)
            solution = trial
        else:
            checks.append((target, kind, terms))
    # variables the solver fixed to a constant are frozen too
    for vi, expr in list(solution.items()):
        if not expr.free_symbols:
            frozen.add(vi)
            del solution[vi]
            frozen_values[format_number(variables[vi].value)] = "fixed by an ambiguous reading"
    used_results = {c[1] for per_lit in candidates for cands in per_lit for c in cands if c[0] == "r"}
    for k, st in enumerate(chain.steps):
        if k != chain.final_step and k not in used_results:
            raise ValueError(f"the result {format_number(st.result)} of '{st.expr.strip()}' is not used by a later "
                             "step (an unannotated computation or a comparison may follow)")
    # every question number some literal may stand for feeds the computation (all readings agree)
    used = {c[1] for per_lit in candidates for cands in per_lit for c in cands if c[0] == "q"}
    dependent = {vi: e for vi, e in solution.items() if vi not in frozen}
    free = sorted(vi for vi in used if vi not in frozen and vi not in solution)
    # a variable the dependents are computed from is free even if the chain does not use it directly
    for e in dependent.values():
        free = sorted(set(free) | {int(str(s)[1:]) for s in e.free_symbols})
    final_syms = getattr(sym_results[chain.final_step], "free_symbols", set())
    answer_vars = {int(str(s)[1:]) for s in final_syms}
    return _Analysis(question, chain, quantities, variables, candidates, bindings, free, dependent, symbols,
                     frozen_values, checks, used=used, answer_vars=answer_vars)


def _relations(quantities: list[Quantity], variables: list[Variable], used: set[int], question: str = ""
               ) -> tuple[list[tuple[Any, str, tuple[Any, ...]]], list[tuple[Any, str, tuple[Any, ...]]]]:
    """Arithmetic coincidences among the question's numbers that a draw must keep: (to solve, to check).

    "her 5 friends. 2 of her friends ... the other 3 friends" (5 = 2 + 3) or "5 workers ... 2 of the
    workers ..., another 2 workers ... the fifth worker" (5 = 2 + 2 + 1) are never computed by the chain,
    but a draw that changes the 2 must change the 5 with it, or leave both. Two kinds are recorded:
    a number the chain does not use that equals the sum of two or three other occurrences (plus 0 or 1)
    or the product of two (checked on every draw); and a variable equal to the sum of two or three
    other variables (kept by solving for one of them). Terms are variable indices or constant values.
    Numbers tied by the text (`_ties`: "4 of 5", "the first four houses" of "5 houses") add a "below" check
    (the part stays below the whole) and, where the rest is named as one, whole = part + 1 (solved for the
    whole when the chain does not use it, else checked). Not recognised: a whole named first ("Of the 30
    students, 12 ..."), dates.
    """
    var_of = {v.value: vi for vi, v in enumerate(variables)}
    occ = [(var_of.get(q.value, q.value), q.value) for q in quantities if q.value not in (0, 1) and not q.frozen]
    unused = {q.value for q in quantities if not q.frozen and q.value not in (0, 1)
              and (q.value not in var_of or var_of[q.value] not in used)}
    solve: list[tuple[Any, str, tuple[Any, ...]]] = []
    check: list[tuple[Any, str, tuple[Any, ...]]] = []
    seen: set[tuple] = set()
    for t_idx, (target, t_val) in enumerate(occ):
        others = [o for i, o in enumerate(occ) if i != t_idx]
        for size in (2, 3):
            for combo in combinations(others, size):
                terms = tuple(term for term, _ in combo)
                moving = [x for x in (target, *terms) if isinstance(x, int) and x in used]
                if not moving:
                    continue
                total = sum(v for _, v in combo)
                rels = [(f"sum+{c}", total + c) for c in (0, 1)]
                if size == 2:
                    rels.append(("prod", combo[0][1] * combo[1][1]))
                for kind, value in rels:
                    if value != t_val:
                        continue
                    key = (target, kind, tuple(sorted(map(str, terms))))
                    if key in seen:
                        continue
                    seen.add(key)
                    if t_val in unused:
                        check.append((target, kind, terms))
                    elif kind == "sum+0" and all(isinstance(x, int) for x in (target, *terms)):
                        solve.append((target, kind, terms))
    for small, large, held in _ties(question, quantities):
        a, b = var_of.get(small.value, small.value), var_of.get(large.value, large.value)
        if not any(isinstance(x, int) and x in used for x in (a, b)) or a == b:
            continue
        key = (b, "tie", (str(a),))
        if key in seen:
            continue
        seen.add(key)
        check.append((a, "below", (b,)))
        if held:  # "the first four of 5 houses ... the fifth house": the count left over stays 1
            if isinstance(a, int) and isinstance(b, int) and b not in used:
                solve.append((b, "sum+1", (a,)))
            else:
                check.append((b, "sum+1", (a,)))
    return solve, check


_OF_RE = re.compile(r"\s+(?:[a-z]+\s+){0,2}?(?:of|out of|among)\s+(?:(?:the|her|his|their|its|these|those|all|my|"
                    r"our|your|a total of|the total of)\s+)?\Z", re.IGNORECASE)
_PART_RE = re.compile(r"\b(?:first|last|other|remaining|next|final|rest of the)\s+\Z", re.IGNORECASE)
_ORDINALS = {2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth", 9: "ninth",
             10: "tenth", 11: "eleventh", 12: "twelfth"}


def _ties(question: str, quantities: Sequence[Quantity]) -> list[tuple[Quantity, Quantity, bool]]:
    """Numbers of the question tied to each other outside the solution's chain: (part, whole, held).

    "4 of 5 houses", "3 out of her 10 friends", "the first four houses" of "5 houses" (the same noun after
    both, the part after first/last/other/remaining): the part must stay below the whole, and where the
    question names what is left over as one ("... the fifth house", or the whole is the part + 1), the
    difference stays 1 (`held`). A draw that breaks a tie makes a self-contradictory problem ("the first
    seven of 5 houses"), so the builder solves for the whole where the chain leaves it free and otherwise
    checks every draw (`_relations`)."""
    out: list[tuple[Quantity, Quantity, bool]] = []
    plain = [q for q in quantities if q.frozen is None and q.value.denominator == 1 and q.value > 1 and not q.percent]
    low = question.lower()

    def noun(q: Quantity) -> str | None:
        m = re.match(r"\s+([a-z]+)", low[q.end:])
        return m.group(1).rstrip("s") if m else None

    for qa in plain:
        for qb in plain:
            if qa is qb or not qa.value < qb.value:
                continue
            between = question[qa.end:qb.start] if qa.end <= qb.start else None
            of_tie = between is not None and _OF_RE.search(between) is not None and len(between) < 40
            part_tie = (_PART_RE.search(question[:qa.start]) is not None and noun(qa) is not None
                        and noun(qa) == noun(qb))
            if not (of_tie or part_tie):
                continue
            nxt = _ORDINALS.get(int(qa.value) + 1)
            held = qb.value == qa.value + 1 and (part_tie or (nxt is not None and re.search(rf"\b{nxt}\b", low) is not None))
            out.append((qa, qb, held))
    return out


def _relation_value(kind: str, vals: Sequence[Any]) -> Any:
    """The value a relation gives its target from its terms' values (not for "below": see `_relation_holds`)."""
    if kind == "prod":
        return vals[0] * vals[1]
    return sum(vals[1:], vals[0]) + int(kind[-1])


def _relation_holds(kind: str, target: Any, vals: Sequence[Any]) -> bool:
    """Whether a relation holds: "below" (a tie's part stays below its whole) or target == `_relation_value`."""
    if kind == "below":
        return bool(target < vals[0])
    return bool(_relation_value(kind, vals) == target)


def _solve(constraints: list[Any], symbols: list[Any], original: dict[Any, Any],
           frozen: set[int]) -> dict[int, Any] | None:
    """Solve the equality constraints for some variables, on the branch through the original values.

    Equations are solved one at a time, each for the variable whose solution is a polynomial in the
    others if there is one (so that whole inputs give whole values), else the largest one.
    """
    import sympy

    subs = {symbols[i]: original[symbols[i]] for i in frozen}
    solution: dict[Any, Any] = {}
    for c in constraints:
        eq = sympy.cancel(sympy.together(c.subs(subs).subs(solution)))
        eq = sympy.fraction(eq)[0]
        if eq == 0:
            continue
        if not eq.free_symbols:
            return None
        best = None
        for sym in sorted(eq.free_symbols, key=lambda x: -original[x]):
            try:
                roots = sympy.solve(eq, sym)
            except (NotImplementedError, ValueError):  # pragma: no cover - sympy gives up
                continue
            for root in roots:
                if not root.is_rational_function(*eq.free_symbols):
                    continue  # e.g. a square root from a product relation: not exactly computable
                if sympy.simplify(root.subs(original) - original[sym]) != 0:
                    continue
                poly = not sympy.fraction(sympy.together(root))[1].free_symbols
                if best is None or (poly and not best[2]):
                    best = (sym, root, poly)
                break
            if best is not None and best[2]:
                break
        if best is None:
            return None
        sym, root = best[0], best[1]
        solution = {k: sympy.simplify(v.subs(sym, root)) for k, v in solution.items()}
        solution[sym] = root
    return {int(str(sym)[1:]): expr for sym, expr in solution.items()}


def _bind(chain: Chain, candidates: list[list[list[Source]]], variables: list[Variable], symbols: list[Any],
          frozen: set[int], solution: dict[int, Any], rng: random.Random):
    """One source per literal and the symbolic step results; or, at the first literal whose readings
    disagree under the current constraints, the symbolic values of those readings."""
    import sympy

    def sym_var(vi: int) -> Any:
        v = variables[vi].value
        if vi in frozen:
            return sympy.Rational(v.numerator, v.denominator)
        return solution.get(vi, symbols[vi])

    sym_results: list[Any] = []
    bindings: list[list[Source]] = []
    # two generic points satisfying the constraints, to compare readings quickly and exactly
    free_syms = {s for vi in range(len(variables)) for s in getattr(sym_var(vi), "free_symbols", set())}
    points = [{s: sympy.Rational(rng.randint(10**6, 10**7), rng.randint(2, 97)) for s in free_syms}
              for _ in range(2)]

    def sym_of(src: Source) -> Any:
        if src[0] == "c":
            return sympy.Rational(src[1].numerator, src[1].denominator)
        if src[0] == "r":
            return sym_results[src[1]]
        return variables[src[1]].forms[src[2]](sym_var(src[1]))

    for k, st in enumerate(chain.steps):
        row: list[Source] = []
        for cands in candidates[k]:
            exprs = [sympy.sympify(sym_of(c)) for c in cands]
            if len(cands) > 1:
                sigs = {tuple(e.subs(p) for p in points) for e in exprs}
                if len(sigs) > 1:
                    return exprs
            # equivalent readings: prefer the latest earlier result, then a question number
            row.append(next((c for c in reversed(cands) if c[0] == "r"), None)
                       or next((c for c in cands if c[0] == "q"), cands[0]))
        try:
            sym_results.append(sympy.sympify(st.evaluate([sym_of(src) for src in row])))
        except ZeroDivisionError:  # pragma: no cover - the original chain evaluated, so no literal zero divisor
            sym_results.append(sympy.nan)
        bindings.append(row)
    return bindings, sym_results

"""Rewriting a GSM8K item for a validated draw: the question, the worked solution, and their checks.

`_make_reference` rewrites both texts (`_rewrite_question`, `_rewrite_solution`) and checks that the
question holds exactly the new numbers, that the solution re-executes to the new chain, and that no
impossible calendar or clock quantity appears. Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from zcp.benchmarks.references.gsm8k.chain import _ANN_RE, parse_chain
from zcp.benchmarks.references.gsm8k.draws import _Draw
from zcp.benchmarks.references.gsm8k.program import _Analysis
from zcp.benchmarks.references.gsm8k.quantities import (
    _parse_decimal,
    _render_token,
    _substitute,
    extract_quantities,
    format_number,
    scan_impossible_quantities,
)
from zcp.core.items import Item


def _rewrite_question(an: _Analysis, new: dict[int, Fraction]) -> str:
    repl = [(q.start, q.end, q.render(val), q.value, val) for vi, val in new.items()
            for q in an.variables[vi].occurrences]
    return _substitute(an.question, repl)


def _rewrite_solution(an: _Analysis, draw: _Draw, solution: str) -> str:
    """Rewrite every step (annotations and plain-text equations), the numbers around them and nothing else."""
    chain = an.chain
    global_map: dict[Fraction, set[Fraction]] = {}  # old value -> new value(s), for the prose
    for vi, var in enumerate(an.variables):
        newx = draw.values.get(vi, var.value)
        for f in var.forms.values():
            global_map.setdefault(f(var.value), set()).add(f(newx))
    for st, res in zip(chain.steps, draw.results, strict=True):
        global_map.setdefault(st.result, set()).add(res)
    known_constant = {src[1] for row in an.bindings for src in row if src[0] == "c"} | {Fraction(0), Fraction(1)}

    pieces: list[str] = []
    pos = 0
    after_annotation: tuple[Fraction, Fraction] | None = None
    for k, st in enumerate(chain.steps):
        local: dict[Fraction, list[Fraction]] = {}
        for old, new in zip(st.literals, draw.literals[k], strict=True):
            local.setdefault(old, []).append(new)
        pieces.append(_map_text(solution[pos:st.start], local, global_map, known_constant, after_annotation))
        repl = [*zip(st.spans, draw.literals[k], strict=True), *((sp, draw.results[k]) for sp in st.result_spans)]
        pieces.append(_substitute(solution[st.start:st.end],
                                  [(s - st.start, e - st.start, _render_token(solution[s:e], v),
                                    _parse_decimal(solution[s:e]), v) for (s, e), v in repl]))
        pos = st.end
        after_annotation = None if st.visible else (st.result, draw.results[k])
    pieces.append(_map_text(solution[pos:], {}, global_map, known_constant, after_annotation))
    return "".join(pieces)


def _map_text(text: str, local: dict[Fraction, list[Fraction]], global_map: dict[Fraction, set[Fraction]],
              known_constant: set[Fraction], after_annotation: tuple[Fraction, Fraction] | None) -> str:
    """Replace the numbers of a prose segment; raise ValueError when a number has no single new value."""
    used: Counter = Counter()
    repl: list[tuple[int, int, str, Fraction, Fraction]] = []
    for n, q in enumerate(extract_quantities(text)):
        old = q.value
        if q.kind == "word" and old not in local:
            continue  # "one of them", "these two groups": only words of the step at hand are rewritten
        if n == 0 and after_annotation is not None and not text[:q.start].strip(" $") \
                and old == after_annotation[0]:
            new = after_annotation[1]  # the result written right after <<...>>
        elif old in local:
            lst = local[old]
            new = lst[min(used[old], len(lst) - 1)]
            used[old] += 1
        elif old in global_map:
            options = global_map[old]
            if len(options) > 1:
                if old in known_constant and old in options:
                    continue
                raise ValueError(f"the solution's number {q.text} has several readings")
            new = next(iter(options))
        elif old in known_constant or q.frozen:
            continue
        else:
            raise ValueError(f"the solution's number {q.text} is not explained by the chain")
        if new != old:
            repl.append((q.start, q.end, q.render(new), old, new))
    return _substitute(text, repl)


def _findings(question: str, solution: str) -> tuple[Counter, int]:
    """Impossible calendar/clock phrases of a question (as a multiset) and how many its solution has."""
    return Counter(scan_impossible_quantities(question)), len(scan_impossible_quantities(_ANN_RE.sub(" ", solution)))


def _make_reference(item: Item, an: _Analysis, draw: _Draw, j: int,
                    base_findings: tuple[Counter, int] | None = None) -> Item:
    """Rewrite question and solution for a validated draw, and check both against the chain and the calendar."""
    question = _rewrite_question(an, draw.values)
    changed = {an.variables[vi].value: v for vi, v in draw.values.items()}
    # in order, occurrence by occurrence: a number left unrewritten shows even where a new value takes the old
    # value of another number that moved (3 -> 5 while 5 -> 8)
    got = [q.value for q in extract_quantities(question)]
    if got != [changed.get(q.value, q.value) for q in an.quantities]:
        raise ValueError("the rewritten question does not contain exactly the new numbers")
    answer = draw.results[an.chain.final_step]
    solution = _rewrite_solution(an, draw, item.solution or "")
    check = parse_chain(solution, format_number(answer))  # every rewritten step evaluates as stated
    if [s.result for s in check.steps] != draw.results:
        raise ValueError("the rewritten solution does not re-execute to the new chain")
    # no impossible calendar or clock quantity ("30 hours a day") that the original did not have; an
    # aggregate the original's solution already states ("12000 minutes a day" of patient time) may change
    q_found, s_found = _findings(question, solution)
    q_base, s_base = base_findings or _findings(item.question, item.solution or "")
    if q_found - q_base or s_found > s_base:
        raise ValueError(f"an impossible calendar or clock quantity: {sorted((q_found - q_base) or ['in the solution'])[0]}")
    values = {format_number(an.variables[vi].value): format_number(v) for vi, v in sorted(draw.values.items())}
    return Item(
        id=f"{item.id}::ref{j}",
        question=question,
        answer=format_number(answer),
        solution=solution,
        metadata={"original_id": item.id, "draw": j, "values": values, "source": "gsm8k",
                  "method": "gsm8k-annotations", "kept": dict(an.frozen_values)},
    )

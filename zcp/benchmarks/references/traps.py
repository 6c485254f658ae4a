"""Trap variants of benchmark items (MathTrap, Zhao et al. 2024): built by program and validated.

A trap variant is the item with a logical trap put into it: a condition made contradictory, or the
question made unanswerable. A model that has memorised the original pattern-matches the near-identical
text and answers the original's number anyway; a model that reasons notices the trap, abstains, or at
least computes something else. The `trap` detector (`zcp.validate.detectors.trap`) measures that.

Kinds (`TRAP_KINDS`), each recorded on the trap with the reason the original's answer is no longer the
answer (`trap_reason`):

- ``contradiction``: one number of the question changed so that the stated situation is impossible.
  Generated word problems (`zcp.benchmarks.wordproblems`): re-executing the item's program on the new values
  gives a negative count ("gives away b" with b above what there is, or more lost than there was) or a
  fractional one (a share into a number of groups that does not divide). GSM8K: the same, on the
  solution's own computation chain (`zcp.benchmarks.references.gsm8k`'s parse): a question number feeding the chain
  changed until a step whose result was positive comes out negative (more eaten than laid, more spent
  than there was). That is a contradiction as the chain reads the problem. Where the text has a
  threshold the chain does not model ("the first 40 hours" are paid at $10, 22 hours worked) the changed
  problem may have a valid answer of its own (220) that the chain does not compute; what the detector
  needs, that the original's answer is not the changed problem's, held in the cases inspected but is
  not proved for such thresholds. A fractional GSM8K intermediate is not used (money, rates and
  averages are fractional in legitimate GSM8K problems).
- ``unanswerable``: a quantity the answer needs deleted from the question ("48 clips" -> "some clips";
  GSM8K: every occurrence of that number replaced by "a certain number of", "a certain amount" for
  money, "a certain percentage" for a percentage). Validation: the program (chain) needs the deleted
  input, the answer changes when it does, no other number of the question restates it (GSM8K: the
  number is a free variable of the chain, not computed from or tied to the others), and the trap's
  question contains exactly the other numbers.

Every trap is validated (`validate_trap`) before it is returned: the validation re-derives the trap
from the original and its metadata (the question must be exactly the trap's rendering), re-executes,
and rejects a "trap" that still executes to a valid answer (in particular, the original's). Which kinds
an item gets depends on its program: with positive inputs, a sum or a product never goes negative or
fractional, so `add`, `multiply` and `two_step` word problems get only ``unanswerable`` traps (one per
input), `subtract`, `three_step` and `divide` both kinds.

`trap_variants(item, k, seed)` returns up to k distinct validated traps, alternating the kinds the item
has (ids ``<item id>::trap<j>``; metadata ``original_id``, ``trap_kind``, ``trap_reason``,
``original_answer`` and what was changed). The trap's own `answer` is `NO_ANSWER`: it has none. An
item that allows fewer than k traps (an `add` item has two inputs to delete) gets fewer; one that allows
none raises ValueError with the reason. `build_traps` builds them for a list of items (a benchmark's
originals and, with the same construction on each reference item, its references: `reference_traps`),
recording why an item has none instead of raising.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from zcp.core.io import stable_hash
from zcp.core.items import Item

TRAP_KINDS = ("contradiction", "unanswerable")
NO_ANSWER = "no solution"  # the `answer` of every trap item: it has none

# Per input, the contradiction candidates nearest the original value that are kept (before the seeded draw).
_NEAREST = 6
# GSM8K: the factors a question number is multiplied by in search of a contradiction (nearest first).
_FACTORS = (Fraction(3, 2), Fraction(2), Fraction(1, 2), Fraction(3), Fraction(1, 3), Fraction(4), Fraction(1, 4),
            Fraction(5), Fraction(1, 5), Fraction(10), Fraction(1, 10), Fraction(20), Fraction(50), Fraction(100))


# ------------------------------------------------------------------------------------------ dispatch
def _is_word_problem(item: Item) -> bool:
    from zcp.benchmarks.wordproblems import FAMILIES

    meta = item.metadata
    return (meta.get("family") in FAMILIES and isinstance(meta.get("values"), Mapping)
            and "template" in meta and isinstance(meta.get("entities"), Mapping))


def _is_gsm8k(item: Item) -> bool:
    return bool(item.solution) and "<<" in (item.solution or "") and not _is_word_problem(item)


def trap_support(item: Item) -> str | None:
    """Why no trap can be built for this kind of item (None: a generated word problem or a GSM8K item
    with calculator annotations, for which `trap_variants` tries). Cheap: nothing is parsed."""
    if _is_word_problem(item) or _is_gsm8k(item):
        return None
    return ("no trap construction for this item: traps are built for generated word problems (family, values "
            "and template in the metadata) and GSM8K items (a solution with <<...>> annotations)")


def trap_variants(item: Item, k: int, seed: int) -> list[Item]:
    """Up to `k` distinct validated trap variants of `item` (see the module docstring), deterministic in
    (`item`, `seed`). Kinds alternate, the first drawn with the seed; within a kind, the changed (or
    deleted) quantity rotates before a quantity is used twice. Raises ValueError when the item allows no
    trap (with the reason) or `k` < 1."""
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, not {k!r}")
    rng = random.Random(f"trap|{stable_hash(item.id + '|' + item.question)}|{seed}")
    if _is_word_problem(item):
        by_kind, validate = _wp_candidates(item, rng), _validate_wp
        context: Any = None
    elif _is_gsm8k(item):
        from zcp.benchmarks.references.gsm8k.program import _analyse

        try:
            context = _analyse(item)
        except ValueError as e:
            raise ValueError(f"item {item.id}: its GSM8K chain cannot be used ({e})") from None
        by_kind, validate = _gsm8k_candidates(item, context, rng), _validate_gsm8k
    else:
        raise ValueError(f"item {item.id}: {trap_support(item)}")
    kinds = [kd for kd in TRAP_KINDS if by_kind.get(kd)]
    if not kinds:
        raise ValueError(f"item {item.id}: no valid trap (no contradiction the program allows and no deletable "
                         "quantity the answer needs)")
    rng.shuffle(kinds)
    queues = {kd: list(by_kind[kd]) for kd in kinds}
    out: list[Item] = []
    seen = {" ".join(item.question.split())}
    while len(out) < k and any(queues.values()):
        for kd in kinds:
            if len(out) >= k:
                break
            while queues[kd]:
                question, reason, extra = queues[kd].pop(0)
                key = " ".join(question.split())
                if key in seen:
                    continue
                trap = _trap_item(item, len(out), question, kd, reason, extra)
                try:
                    validate(item, trap, context)
                except ValueError:
                    continue
                seen.add(key)
                out.append(trap)
                break
    if not out:
        raise ValueError(f"item {item.id}: no candidate trap passed validation")
    return out


def build_traps(items: Sequence[Item], k: int, seed: int) -> tuple[list[list[Item]], list[str | None]]:
    """Traps of every item, in order (`trap_variants`), and per item the reason it has none (None when it
    has some): what a detector needs for a benchmark's originals and reference items alike."""
    traps: list[list[Item]] = []
    reasons: list[str | None] = []
    for it in items:
        try:
            traps.append(trap_variants(it, k, seed))
            reasons.append(None)
        except ValueError as e:
            traps.append([])
            reasons.append(str(e))
    return traps, reasons


def reference_traps(references: Mapping[str, Sequence[Item]], k: int, seed: int
                    ) -> tuple[dict[str, list[Item]], dict[str, str]]:
    """The references' traps: the same construction on each reference draw (original id -> draws, as
    `zcp.benchmarks.references.registry.build_references` gives them). Returns traps by reference item id and, for
    reference items with none, the reason."""
    traps: dict[str, list[Item]] = {}
    reasons: dict[str, str] = {}
    for draws in references.values():
        built, why = build_traps(list(draws), k, seed)
        for r, t, w in zip(draws, built, why, strict=True):
            if t:
                traps[r.id] = t
            else:
                reasons[r.id] = str(w)
    return traps, reasons


def validate_trap(original: Item, trap: Item) -> str:
    """The reason `trap` is a trap of `original`, re-derived from the recorded change (trap_values /
    missing_input for word problems, changed / removed for GSM8K; `trap_reason` is not trusted), or
    ValueError saying why it is not: its question is not the rendering of that change, or re-execution
    still gives a valid answer (the original's, say), or a deleted quantity is not needed or still stated."""
    kind = trap.metadata.get("trap_kind")
    if kind not in TRAP_KINDS:
        raise ValueError(f"trap {trap.id}: trap_kind must be one of {list(TRAP_KINDS)}, not {kind!r}")
    if _is_word_problem(original):
        return _validate_wp(original, trap, None)
    if _is_gsm8k(original):
        return _validate_gsm8k(original, trap, None)
    raise ValueError(f"item {original.id}: {trap_support(original)}")


def _trap_item(item: Item, j: int, question: str, kind: str, reason: str, extra: Mapping[str, Any]) -> Item:
    meta = {"original_id": item.id, "trap_kind": kind, "trap_reason": reason, "original_answer": item.answer,
            "trap_index": j, **extra}
    return Item(id=f"{item.id}::trap{j}", question=question, answer=NO_ANSWER, solution=None, metadata=meta)


def _interleave(groups: Sequence[Sequence[Any]]) -> list[Any]:
    """Round-robin over groups: the first of each group, then the second of each, ..."""
    out: list[Any] = []
    for t in range(max((len(g) for g in groups), default=0)):
        out += [g[t] for g in groups if t < len(g)]
    return out


def _closeness(old: Fraction, new: Fraction) -> float:
    return abs(math.log(float(new) / float(old))) if old > 0 and new > 0 else float("inf")


# ------------------------------------------------------------------------------------ word problems
_GAP = "\x00"  # where a deleted input stood while the question is rendered


def _wp_template(item: Item) -> str:
    from zcp.benchmarks.wordproblems import FAMILIES

    meta = item.metadata
    fam = FAMILIES[meta["family"]]
    r = meta.get("rewording")
    return fam.questions[int(meta["template"])] if r is None else fam.rewordings[int(r)]


def _wp_render(item: Item, values: Mapping[str, int], missing: str | None = None) -> str:
    """The item's question (its template and entities) with `values`; the input `missing` deleted."""
    fields = {**item.metadata["entities"], **{n: int(v) for n, v in values.items()}}
    if missing is not None:
        fields[missing] = _GAP
    text = _wp_template(item).format(**fields)
    if missing is None:
        return text
    text = re.sub(rf"\b(The|the) {_GAP} ", r"\1 ", text)  # "The 12 cookies that ..." -> "The cookies that ..."
    text = re.sub(rf"(^|[.?!:]\s+){_GAP}", r"\1Some", text)  # at the start of a sentence
    return text.replace(_GAP, "some")


def _wp_run(item: Item, values: Mapping[str, int]) -> list[Fraction]:
    """Exact results of every step of the item's program on `values` (KeyError naming a missing input)."""
    from zcp.benchmarks.wordproblems import FAMILIES

    env: dict[str, Fraction] = {n: Fraction(int(v)) for n, v in values.items()}
    out: list[Fraction] = []
    for op, a, b, res in FAMILIES[item.metadata["family"]].steps:
        x, y = env[a], env[b]
        r = x + y if op == "+" else x - y if op == "-" else x * y if op == "*" else x / y
        env[res] = r
        out.append(r)
    return out


def _wp_contradiction(item: Item, values: Mapping[str, int]) -> str | None:
    """Why re-executing the program on `values` shows a contradiction (None: it executes validly)."""
    from zcp.benchmarks.wordproblems import FAMILIES

    steps = FAMILIES[item.metadata["family"]].steps
    env: dict[str, Any] = {n: int(v) for n, v in values.items()}
    for (op, a, b, res), r in zip(steps, _wp_run(item, values), strict=True):
        shown = f"{env[a]} {op} {env[b]} = {_fmt(r)}"
        if r < 0:
            return f"{shown}: a negative count ({'more taken away than there is' if op == '-' else 'impossible'})"
        if r.denominator != 1:
            return f"{shown}: not a whole count (the division does not come out even)"
        env[res] = int(r)
    return None


def _fmt(x: Fraction) -> str:
    """Exact decimal text of a number (16, 6.25, -4), or 6 significant digits when it does not terminate."""
    from zcp.benchmarks.references.gsm8k import format_number

    try:
        return format_number(Fraction(x))
    except ValueError:
        return f"{float(x):.6g}"


def _wp_candidates(item: Item, rng: random.Random) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    from zcp.benchmarks.wordproblems import FAMILIES

    meta = item.metadata
    fam = FAMILIES[meta["family"]]
    values = {n: int(meta["values"][n]) for n, _ in fam.inputs}
    base = {"source": "trap", "trap_of": "wordproblem", "family": fam.name, "template": meta["template"],
            "entities": dict(meta["entities"])}
    if meta.get("rewording") is not None:
        base["rewording"] = meta["rewording"]
    # a contradiction may need a value beyond every quantity of the problem (b above a, d above a * b + c)
    top = 2 * max([*values.values(), *(int(r) for r in _wp_run(item, values))]) + 1
    per_input: list[list[tuple[str, str, dict[str, Any]]]] = []
    for name, _ in fam.inputs:
        v = values[name]
        found = []
        for new in range(2, max(5 * v, top, 20) + 1):
            if new == v:
                continue
            trial = {**values, name: new}
            why = _wp_contradiction(item, trial)
            if why is not None:
                found.append((_closeness(Fraction(v), Fraction(new)), new, why, trial))
        found.sort(key=lambda t: (t[0], t[1]))
        near = found[:_NEAREST]
        rng.shuffle(near)
        per_input.append([(_wp_render(item, trial), f"{name} = {v} -> {new}; {why}",
                           {**base, "trap_values": trial, "changed_input": name})
                          for _, new, why, trial in near])
    rng.shuffle(per_input)
    deletions = []
    for name, _ in fam.inputs:
        rest = {n: x for n, x in values.items() if n != name}
        why = _wp_needed(item, values, name)
        if why is not None:
            deletions.append((_wp_render(item, rest, missing=name), why,
                              {**base, "trap_values": rest, "missing_input": name}))
    rng.shuffle(deletions)
    return {"contradiction": _interleave(per_input), "unanswerable": deletions}


def _wp_needed(item: Item, values: Mapping[str, int], name: str) -> str | None:
    """Why the answer needs input `name` (None when it does not): execution without it fails, and other
    values of it give other answers."""
    rest = {n: x for n, x in values.items() if n != name}
    try:
        _wp_run(item, rest)
        return None
    except KeyError:
        pass
    answer = _wp_run(item, values)[-1]
    v = int(values[name])
    for alt in (v + 1, 2 * v, v + 2):
        try:
            other = _wp_run(item, {**values, name: alt})[-1]
        except ZeroDivisionError:  # pragma: no cover - inputs are >= 1
            continue
        if other != answer:
            return (f"input {name} = {v} deleted from the question; the program needs it "
                    f"({name} = {alt} would give {_fmt(other)}, not {_fmt(answer)})")
    return None


def _validate_wp(original: Item, trap: Item, _context: Any) -> str:
    from zcp.benchmarks.wordproblems import FAMILIES

    meta, om = trap.metadata, original.metadata
    fam = FAMILIES[om["family"]]
    for key in ("family", "template", "entities"):
        if meta.get(key) != om.get(key):
            raise ValueError(f"trap {trap.id}: its {key} is not the original's")
    if meta.get("rewording") != om.get("rewording"):
        raise ValueError(f"trap {trap.id}: its rewording is not the original's")
    names = [n for n, _ in fam.inputs]
    orig_vals = {n: int(om["values"][n]) for n in names}
    vals = {n: int(v) for n, v in (meta.get("trap_values") or {}).items()}
    kind = meta.get("trap_kind")
    if kind == "contradiction":
        if set(vals) != set(names):
            raise ValueError(f"trap {trap.id}: trap_values must give every input {names}")
        changed = [n for n in names if vals[n] != orig_vals[n]]
        if len(changed) != 1:
            raise ValueError(f"trap {trap.id}: a contradiction changes exactly one input ({len(changed)} changed)")
        if trap.question != _wp_render(original, vals):
            raise ValueError(f"trap {trap.id}: its question is not the original's template with trap_values")
        why = _wp_contradiction(original, vals)
        if why is None:
            answer = _wp_run(original, vals)[-1]
            same = " (the original's answer)" if str(_fmt(answer)) == str(original.answer) else ""
            raise ValueError(f"trap {trap.id}: not a trap, re-execution gives a valid answer {_fmt(answer)}{same}")
        return f"{changed[0]} = {orig_vals[changed[0]]} -> {vals[changed[0]]}; {why}"
    if kind == "unanswerable":
        missing = meta.get("missing_input")
        if missing not in names:
            raise ValueError(f"trap {trap.id}: missing_input must name an input of {names}")
        if vals != {n: v for n, v in orig_vals.items() if n != missing}:
            raise ValueError(f"trap {trap.id}: trap_values must be the original's inputs without {missing}")
        if trap.question != _wp_render(original, vals, missing=missing):
            raise ValueError(f"trap {trap.id}: its question is not the original's template without {missing}")
        numbers = Counter(re.findall(r"\d+", trap.question))
        if numbers != Counter(str(v) for v in vals.values()):
            raise ValueError(f"trap {trap.id}: its question states other numbers than the remaining inputs")
        why = _wp_needed(original, orig_vals, missing)
        if why is None:
            raise ValueError(f"trap {trap.id}: not a trap, the answer does not need input {missing}")
        return why
    raise ValueError(f"trap {trap.id}: unknown trap_kind {kind!r}")


# -------------------------------------------------------------------------------------------- GSM8K
def _gsm8k_run(an: Any, new: Mapping[int, Fraction]) -> list[Fraction]:
    """Results of every step of the analysed chain with variables `new` (ZeroDivisionError propagates)."""
    results: list[Fraction] = []
    for k, st in enumerate(an.chain.steps):
        vals = [src[1] if src[0] == "c" else results[src[1]] if src[0] == "r" else
                an.variables[src[1]].forms[src[2]](new.get(src[1], an.variables[src[1]].value))
                for src in an.bindings[k]]
        results.append(Fraction(st.evaluate(vals)))
    return results


def _gsm8k_readings_agree(an: Any, new: Mapping[int, Fraction], results: Sequence[Fraction]) -> bool:
    """Every reading of every literal still gives the value the bound one gives (as `_try` checks), so the
    re-executed chain means the same whichever source the author meant."""
    for k, per_lit in enumerate(an.candidates):
        bound = []
        for src in an.bindings[k]:
            bound.append(src[1] if src[0] == "c" else results[src[1]] if src[0] == "r" else
                         an.variables[src[1]].forms[src[2]](new.get(src[1], an.variables[src[1]].value)))
        for cands, val in zip(per_lit, bound, strict=True):
            for c in cands:
                alt = c[1] if c[0] == "c" else results[c[1]] if c[0] == "r" else \
                    an.variables[c[1]].forms[c[2]](new.get(c[1], an.variables[c[1]].value))
                if alt != val:
                    return False
    return True


def _gsm8k_relations_hold(an: Any, new: Mapping[int, Fraction]) -> bool:
    from zcp.benchmarks.references.gsm8k.program import _relation_holds

    def value(t: Any) -> Fraction:
        return new.get(t, an.variables[t].value) if isinstance(t, int) else t

    return all(_relation_holds(kind, value(target), [value(t) for t in terms])
               for target, kind, terms in an.relations)


def _gsm8k_with_dependents(an: Any, new: dict[int, Fraction]) -> dict[int, Fraction] | None:
    """`new` plus the constrained variables computed from it; None when one is undefined or not positive."""
    if not an.dependent:
        return new
    from zcp.benchmarks.references.gsm8k.draws import _dependents

    try:
        solved = _dependents(an, new)
    except (ZeroDivisionError, TypeError, ValueError, NameError):
        return None
    for vi, v in solved.items():
        var = an.variables[vi]
        if v <= 0 or (v.denominator == 1) != (var.value.denominator == 1) \
                or (v * 10**var.decimals).denominator != 1:
            return None
    return {**new, **{vi: v for vi, v in solved.items() if v != an.variables[vi].value}}


def _gsm8k_negative(an: Any, new: Mapping[int, Fraction]) -> tuple[str, list[Fraction]] | None:
    """(why, results) when the chain on `new` runs with a step that was positive coming out negative."""
    try:
        results = _gsm8k_run(an, new)
    except ZeroDivisionError:
        return None
    if not _gsm8k_readings_agree(an, new, results):
        return None

    for st, res in zip(an.chain.steps, results, strict=True):
        if st.result > 0 and res < 0:
            return (f"'{st.expr.strip()}' now gives {_fmt(res)} (was {_fmt(st.result)}): "
                    "below zero, so the solution's computation no longer gives a valid answer", results)
    return None


def _gsm8k_new_value(var: Any, x: Fraction) -> Fraction | None:
    """`x` rounded to the variable's written places, if it keeps the variable's kind (at least 2 in the last
    written place, as `Variable.admissible` asks: no "1 hours"; whole stays whole; a percentage stays in (0, 100])."""
    scale = 10**var.decimals
    new = Fraction(round(x * scale), scale)
    if new * scale < 2 or (new.denominator == 1) != (var.value.denominator == 1) or new == var.value:
        return None
    if var.percent and var.value <= 100 and new > 100:
        return None
    return new


def _gsm8k_change_question(an: Any, item: Item, new: Mapping[int, Fraction]) -> str | None:
    """The question with the changed numbers; None when the rewrite does not hold exactly the new numbers."""
    from zcp.benchmarks.references.gsm8k import extract_quantities
    from zcp.benchmarks.references.gsm8k.rewrite import _rewrite_question

    question = _rewrite_question(an, dict(new))
    changed = {an.variables[vi].value: v for vi, v in new.items()}
    got = Counter(q.value for q in extract_quantities(question))
    if got != Counter(changed.get(q.value, q.value) for q in an.quantities):
        return None
    return question


# words after which "a certain number of" cannot stand ("an 8-hour", "another 25 cups", "her 5 friends")
_DETERMINER_BEFORE = re.compile(r"(?<![A-Za-z])(a|an|the|another|every|each|this|that|these|those|first|next|last|"
                                r"his|her|their|its|my|our|your|per)\s+\$?\s?\Z", re.IGNORECASE)
# words after a number that are not the counted noun ("eats three for breakfast": "a certain number for ...")
_NOT_A_NOUN = re.compile(r"\s+(for|in|of|to|and|or|at|with|per|from|by|on|each|every|a|an|the|more|less|fewer|than|"
                         r"as|is|are|was|were|but|so|if|when|then|left)\b", re.IGNORECASE)


def _gsm8k_delete(an: Any, vi: int) -> str | None:
    """The question with every occurrence of variable `vi` replaced by a vague phrase ("a certain number
    of"); None where an occurrence sits in a phrase that cannot be rewritten cleanly (after an article,
    inside a compound such as "8-hour")."""
    text = an.question
    repl: list[tuple[int, int, str]] = []
    for q in an.variables[vi].occurrences:
        s, e = q.start, q.end
        if q.money:
            s = text.rfind("$", 0, s)
        if q.percent:
            m = re.match(r"\s?(%|percent)", text[e:])
            e += m.end() if m else 0
        if _DETERMINER_BEFORE.search(text[:s]) or text[e:e + 1] == "-" or text[s - 1:s] == "-":
            return None
        after = text[e:]
        if q.money:
            phrase = "a certain amount"
        elif q.percent:
            phrase = "a certain percentage"
        elif re.match(r"\s+[A-Za-z]", after) and not _NOT_A_NOUN.match(after):
            phrase = "a certain number of"
        else:
            phrase = "a certain number"
        if not text[:s].strip() or re.search(r"[.?!]\s*\Z", text[:s]):
            phrase = phrase[0].upper() + phrase[1:]
        repl.append((s, e, phrase))
    for s, e, phrase in sorted(repl, reverse=True):
        text = text[:s] + phrase + text[e:]
    return text


def _gsm8k_tied(an: Any, vi: int) -> bool:
    """Whether variable `vi` can be recovered from the others (a constraint or a relation ties them)."""
    if vi in an.dependent:
        return True
    for expr in an.dependent.values():
        if f"v{vi}" in {str(s) for s in expr.free_symbols}:
            return True
    return any(vi == target or vi in terms for target, _, terms in an.relations)


def _gsm8k_needed(an: Any, vi: int) -> str | None:
    """Why the chain's answer needs variable `vi` (None when it does not, or it is tied to the others)."""

    answer_vars = getattr(an, "answer_vars", None)  # the symbolic answer's variables, where the analysis has them
    if vi not in an.free or (answer_vars is not None and vi not in answer_vars) or _gsm8k_tied(an, vi):
        return None
    var = an.variables[vi]
    for f in (Fraction(2), Fraction(3, 2), Fraction(3)):
        alt = _gsm8k_new_value(var, var.value * f)
        if alt is None:
            continue
        try:
            res = _gsm8k_run(an, {vi: alt})
        except ZeroDivisionError:
            continue
        answer = res[an.chain.final_step]
        if answer != an.chain.answer:
            return (f"{_fmt(var.value)} deleted from the question; the chain needs it "
                    f"({_fmt(alt)} there would give {_fmt(answer)}, not "
                    f"{_fmt(an.chain.answer)})")
    return None


def _gsm8k_candidates(item: Item, an: Any, rng: random.Random) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:

    base = {"source": "trap", "trap_of": "gsm8k"}
    others = {v.value for v in an.variables} | {q.value for q in an.quantities}
    per_var: list[list[tuple[str, str, dict[str, Any]]]] = []
    for vi in an.free:
        var = an.variables[vi]
        found = []
        for f in _FACTORS:
            x = _gsm8k_new_value(var, var.value * f)
            if x is None or x in others:
                continue
            new = _gsm8k_with_dependents(an, {vi: x})
            if new is None or not _gsm8k_relations_hold(an, new):
                continue
            hit = _gsm8k_negative(an, new)
            if hit is None:
                continue
            question = _gsm8k_change_question(an, item, new)
            if question is None:
                continue
            changed = {_fmt(an.variables[j].value): _fmt(v) for j, v in sorted(new.items())}
            reason = f"{_fmt(var.value)} -> {_fmt(x)}; {hit[0]}"
            found.append((_closeness(var.value, x), question, reason, {**base, "changed": changed}))
            if len(found) >= 2:
                break
        found.sort(key=lambda t: t[0])
        per_var.append([(q, r, e) for _, q, r, e in found])
    rng.shuffle(per_var)
    deletions = []
    for vi in an.free:
        why = _gsm8k_needed(an, vi)
        if why is None:
            continue
        question = _gsm8k_delete(an, vi)
        if question is not None:
            deletions.append((question, why, {**base, "removed": _fmt(an.variables[vi].value)}))
    rng.shuffle(deletions)
    return {"contradiction": _interleave(per_var), "unanswerable": deletions}


def _gsm8k_var(an: Any, text: str) -> int | None:

    return next((vi for vi, v in enumerate(an.variables) if _fmt(v.value) == str(text)), None)


def _validate_gsm8k(original: Item, trap: Item, an: Any) -> str:
    from zcp.benchmarks.references.gsm8k import extract_quantities
    from zcp.benchmarks.references.gsm8k.program import _analyse

    if an is None:
        try:
            an = _analyse(original)
        except ValueError as e:
            raise ValueError(f"item {original.id}: its GSM8K chain cannot be used ({e})") from None
    meta = trap.metadata
    kind = meta.get("trap_kind")
    if kind == "contradiction":
        changed = dict(meta.get("changed") or {})
        new: dict[int, Fraction] = {}
        for old, val in changed.items():
            vi = _gsm8k_var(an, old)
            if vi is None:
                raise ValueError(f"trap {trap.id}: {old} is not a number the chain reads")
            new[vi] = Fraction(str(val))
        free = {vi: v for vi, v in new.items() if vi not in an.dependent}
        full = _gsm8k_with_dependents(an, free) if free else None
        if full is None or full != new:
            raise ValueError(f"trap {trap.id}: the changed numbers are not a consistent change of the chain's inputs")
        if not _gsm8k_relations_hold(an, new):
            raise ValueError(f"trap {trap.id}: the change breaks a relation between the question's numbers")
        if trap.question != _gsm8k_change_question(an, original, new):
            raise ValueError(f"trap {trap.id}: its question is not the original with the changed numbers")
        hit = _gsm8k_negative(an, new)
        if hit is None:
            try:
                answer = _fmt(_gsm8k_run(an, new)[an.chain.final_step])
            except ZeroDivisionError:
                answer = "a division by zero"
            same = " (the original's answer)" if answer == _fmt(an.chain.answer) else ""
            raise ValueError(f"trap {trap.id}: not a trap, the chain re-executes to a valid answer {answer}{same}")
        first = sorted(changed.items())[0]
        return f"{first[0]} -> {first[1]}; {hit[0]}"
    if kind == "unanswerable":
        vi = _gsm8k_var(an, str(meta.get("removed")))
        if vi is None:
            raise ValueError(f"trap {trap.id}: removed={meta.get('removed')!r} is not a number the chain reads")
        why = _gsm8k_needed(an, vi)
        if why is None:
            raise ValueError(f"trap {trap.id}: not a trap, the answer does not need {meta.get('removed')} "
                             "(or the other numbers determine it)")
        value = an.variables[vi].value
        got = Counter(q.value for q in extract_quantities(trap.question))
        if value in got:
            raise ValueError(f"trap {trap.id}: not a trap, its question still states {_fmt(value)}")
        if got != Counter(q.value for q in an.quantities if q.value != value):
            raise ValueError(f"trap {trap.id}: its question does not keep the other numbers of the original")
        if trap.question != _gsm8k_delete(an, vi):
            raise ValueError(f"trap {trap.id}: its question is not the original with {_fmt(value)} deleted")
        return why
    raise ValueError(f"trap {trap.id}: unknown trap_kind {kind!r}")

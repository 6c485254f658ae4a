"""Word problems with an executable solution program: generation, exact perturbation, rewording.

Every item carries its program as data (`metadata["program"]`: steps ``{"op", "args", "out"}`` over
the named inputs in `metadata["values"]`), so the answer is the program's execution, a reference item
is the same program on new numbers (re-executed, not re-derived by a model), and a paraphrase is the
same program and numbers under another surface template. Families fix the program shape; templates
only change the wording. Every template mentions the inputs in program order (a, b, c, d), so reading a problem is
the same skill in every family and wording. All arithmetic is exact (integers and `fractions.Fraction`): every
intermediate result must be a whole number in ``[1, max_answer]`` (no negative or zero counts, exact
divisions).

The step-by-step solution shows one operation per line and ends with exactly
``The final answer is: \\[ \\boxed{ANSWER} \\]``, the line the zero-CoT probe pre-fills up to the brace.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from zcp.benchmarks.references.matching import (
    ANSWER_SPREAD,
    KEPT_ALL,
    Structure,
    answer_bin,
    draw_targets,
    equality_pattern,
    fallback_bins,
    keeps_answer_form,
    keeps_roundness,
    lost_names,
    near_log,
    snap_roundness,
    tens,
    value_classes,
)
from zcp.core.items import Item

FINAL_ANSWER_PREFIX = "The final answer is: \\[ \\boxed{"
FINAL_ANSWER_SUFFIX = "} \\]"

NAMES: tuple[str, ...] = (
    "Tom", "Anna", "Ben", "Lily", "Sam", "Mia", "Max", "Emma", "Leo", "Zoe",
    "Jack", "Nora", "Ryan", "Ella", "Omar", "Sara", "Liam", "Ava", "Noah", "Ivy",
)
OBJECTS: tuple[str, ...] = (
    "apples", "marbles", "stickers", "pencils", "cookies", "books", "stamps", "shells",
    "cards", "balloons", "candies", "toys", "coins", "beads", "flowers", "eggs",
)
CONTAINERS: tuple[str, ...] = ("boxes", "bags", "packs", "baskets", "jars", "crates")


@dataclass(frozen=True)
class NumberRanges:
    """Value ranges by input kind: ``n`` plain quantities, ``k`` group counts / divisors, ``m`` group sizes,
    ``p`` dividends (up to ``max_factor * max_multiplicand``, so divisions invert the multiplication table).

    `max_answer` bounds every intermediate result and the answer. The defaults are sized for the embedded
    ~1M-parameter model, which learns arithmetic facts in its CPU budget but not the carry algorithm
    for arbitrary two-digit operands (measured: 0.19 accuracy on 2..99 additions after 38k examples);
    pass larger ranges (e.g. ``max_operand=99``) for larger models.
    """

    min_operand: int = 2
    max_operand: int = 20
    max_factor: int = 9
    max_multiplicand: int = 12
    max_answer: int = 999

    def bounds(self, kind: str) -> tuple[int, int]:
        """Inclusive (low, high) range for an input kind."""
        hi = {"n": self.max_operand, "k": self.max_factor, "m": self.max_multiplicand,
              "p": self.max_factor * self.max_multiplicand}[kind]
        return self.min_operand, hi


@dataclass(frozen=True)
class Family:
    """One problem shape: named inputs with kinds, a fixed program, and its surface templates.

    `steps` are ``(op, left, right, out)``; operands name inputs or earlier outputs.
    """

    name: str
    inputs: tuple[tuple[str, str], ...]
    steps: tuple[tuple[str, str, str, str], ...]
    questions: tuple[str, ...]
    rewordings: tuple[str, ...]

    @property
    def program(self) -> list[dict[str, Any]]:
        """The program as plain data (what `metadata["program"]` stores)."""
        return [{"op": op, "args": [a, b], "out": out} for op, a, b, out in self.steps]


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="add",
            inputs=(("a", "n"), ("b", "n")),
            steps=(("+", "a", "b", "s1"),),
            questions=(
                "{name} has {a} {obj}. {name2} gives {name} {b} more {obj}. How many {obj} does {name} have now?",
                "There are {a} {obj} in a box. {name} puts {b} more {obj} in the box. How many {obj} are in the box now?",
                "{name} collected {a} {obj} on Monday and {b} {obj} on Tuesday. How many {obj} did {name} collect in all?",
            ),
            rewordings=(
                "{name} starts with {a} {obj} and then receives {b} more from {name2}. What is the total number of {obj} {name} has?",
                "{name} had {a} {obj} before getting {b} {obj} from {name2}. How many {obj} does {name} have after that?",
                "{name}, who already owned {a} {obj}, is handed {b} {obj} by {name2}. Find how many {obj} {name} owns now.",
                "{name} owned {a} {obj}. Then {name} got another {b} {obj}. Count the {obj} {name} has altogether.",
                "A bag holds {a} {obj}, and {name} adds {b} {obj} to it. How many {obj} does the bag hold now?",
                "If {name} has {a} {obj} and finds {b} more, how many {obj} does {name} have in total?",
            ),
        ),
        Family(
            name="subtract",
            inputs=(("a", "n"), ("b", "n")),
            steps=(("-", "a", "b", "s1"),),
            questions=(
                "{name} has {a} {obj} and gives {b} of them to {name2}. How many {obj} does {name} have left?",
                "There were {a} {obj} on a table. {name} took {b} of them. How many {obj} are on the table now?",
                "{name} bought {a} {obj} and lost {b} of them. How many {obj} does {name} still have?",
            ),
            rewordings=(
                "{name} had {a} {obj}. After giving {b} {obj} to {name2}, how many {obj} does {name} keep?",
                "Out of {a} {obj}, {name} gives away {b}. How many {obj} remain with {name}?",
                "{name}, who had {a} {obj}, sends {b} {obj} to {name2}. How many {obj} does {name} have now?",
                "A box holds {a} {obj}. {name} removes {b} {obj}. How many {obj} stay in the box?",
                "If {name} starts with {a} {obj} and loses {b}, how many {obj} are left?",
                "{name} owned {a} {obj} but then {b} of them were used. Find the number of {obj} {name} has left.",
            ),
        ),
        Family(
            name="multiply",
            inputs=(("a", "k"), ("b", "m")),
            steps=(("*", "a", "b", "s1"),),
            questions=(
                "{name} has {a} {container}. Each of them holds {b} {obj}. How many {obj} does {name} have?",
                "There are {a} {container} with {b} {obj} in each. How many {obj} are there in total?",
                "{name} buys {a} {container} of {obj}. Every one has {b} {obj}. How many {obj} did {name} buy?",
            ),
            rewordings=(
                "Each of the {a} {container} that {name} has contains {b} {obj}. Find the total number of {obj}.",
                "{name} fills {a} {container}, putting {b} {obj} in every one. How many {obj} are used?",
                "If there are {a} {container} and one of them holds {b} {obj}, how many {obj} are there?",
                "{name} owns {a} {container}, and {b} {obj} fit in each. How many {obj} is that altogether?",
                "{name} takes {a} {container} and packs {b} {obj} into each. What is the total number of {obj}?",
                "How many {obj} does {name} have with {a} {container} of {b} {obj} each?",
            ),
        ),
        Family(
            name="divide",
            inputs=(("a", "p"), ("b", "k")),
            steps=(("/", "a", "b", "s1"),),
            questions=(
                "{name} has {a} {obj} and shares them equally among {b} friends. How many {obj} does each friend get?",
                "{name} packs {a} {obj} equally into {b} {container}. How many {obj} are in each one?",
                "{name} splits {a} {obj} into {b} equal groups. How many {obj} are in each group?",
            ),
            rewordings=(
                "If {a} {obj} are divided evenly among {b} children, how many {obj} does each child receive?",
                "{name} puts {a} {obj} into {b} {container} with the same number in each. How many {obj} go in each?",
                "There are {a} {obj} to share equally between {b} people. How many {obj} does each person get?",
                "{name} and friends share {a} {obj} equally, {b} people in all. How many {obj} does each one get?",
                "{name} divides {a} {obj} equally among {b} {container}. Find how many {obj} each of them holds.",
                "The {a} {obj} that {name} has are shared equally by {b} students. How many {obj} does each student get?",
            ),
        ),
        Family(
            name="two_step",
            inputs=(("a", "k"), ("b", "m"), ("c", "n")),
            steps=(
                ("*", "a", "b", "s1"),
                ("+", "s1", "c", "s2"),
            ),
            questions=(
                "{name} buys {a} {container} with {b} {obj} in each and also gets {c} loose {obj}. How many {obj} does {name} have?",
                "There are {a} {container} of {b} {obj} and {c} more {obj} on a shelf. How many {obj} are there in total?",
                "{name} buys {a} {container} with {b} {obj} each. {name} already had {c} {obj}. How many {obj} does {name} have now?",
            ),
            rewordings=(
                "{name} gets {a} {container}, each with {b} {obj}, plus {c} extra {obj}. What is the total number of {obj}?",
                "If each of {a} {container} holds {b} {obj} and {name2} adds {c} more {obj}, how many {obj} are there?",
                "After buying {a} {container} of {b} {obj} each, {name} also keeps {c} old {obj}. How many {obj} does {name} own now?",
                "Count all the {obj}: {a} {container} hold {b} {obj} each, and {c} {obj} lie outside them.",
                "{name2} gives {name} {a} {container} with {b} {obj} inside each, and {name} also finds {c} {obj}. How many {obj} does {name} have?",
                "How many {obj} are there altogether if {name} has {a} {container} of {b} {obj} and {c} single {obj}?",
            ),
        ),
        Family(
            name="three_step",
            inputs=(("a", "k"), ("b", "m"), ("c", "n"), ("d", "n")),
            steps=(
                ("*", "a", "b", "s1"),
                ("+", "s1", "c", "s2"),
                ("-", "s2", "d", "s3"),
            ),
            questions=(
                "{name} buys {a} {container} with {b} {obj} in each, finds {c} more {obj}, and then gives {d} {obj} to {name2}. How many {obj} does {name} have now?",
                "A shop has {a} {container} of {b} {obj} and {c} loose {obj}. It sells {d} {obj}. How many {obj} are left?",
                "{name} fills {a} {container} with {b} {obj} each and keeps {c} more {obj} aside. Later {d} {obj} are lost. How many {obj} remain?",
            ),
            rewordings=(
                "{name} has {a} {container} holding {b} {obj} each plus {c} extra {obj}, and gives away {d}. How many {obj} are left?",
                "After receiving {a} {container} of {b} {obj} and {c} single {obj}, {name} hands {d} {obj} to {name2}. How many {obj} does {name} keep?",
                "There are {a} {container} with {b} {obj} each and {c} more {obj} next to them. If {d} {obj} are taken away, how many {obj} remain?",
                "{name}, who had {a} {container} of {b} {obj} and {c} loose {obj}, lets {name2} take {d} {obj}. How many {obj} does {name} have now?",
                "Count what is left: {a} {container} contain {b} {obj} each, {c} {obj} are added, and {d} {obj} are removed.",
                "If {name} owns {a} {container} of {b} {obj}, adds {c} {obj}, and then loses {d} {obj}, how many {obj} does {name} own?",
            ),
        ),
    )
}
DEFAULT_FAMILIES: tuple[str, ...] = tuple(FAMILIES)

_OPS = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": lambda x, y: Fraction(x, y) if y != 0 else None,
}


# ----------------------------------------------------------------------------------------- execution


def _trace(program: Sequence[Mapping[str, Any]], values: Mapping[str, int]) -> list[Fraction | None]:
    """Exact results of every step, in order (None after a division by zero)."""
    env: dict[str, Fraction | None] = {k: Fraction(int(v)) for k, v in values.items()}
    out: list[Fraction | None] = []
    for step in program:
        x, y = (env[a] for a in step["args"])
        r = None if x is None or y is None else _OPS[step["op"]](x, y)
        env[step["out"]] = r
        out.append(r)
    return out


def _program_and_values(item_or_program: Any, values: Mapping[str, int] | None) -> tuple[list, dict]:
    if isinstance(item_or_program, Item):
        meta = item_or_program.metadata
        return list(meta["program"]), dict(meta["values"])
    if isinstance(item_or_program, Mapping):
        return list(item_or_program["program"]), dict(values or item_or_program["values"])
    if values is None:
        raise ValueError("execute(program) needs values=")
    return list(item_or_program), dict(values)


def execute(item_or_program: Item | Mapping[str, Any] | Sequence[Mapping[str, Any]],
            values: Mapping[str, int] | None = None) -> int:
    """Re-execute an item's program (or a program with `values`) exactly and return the integer answer.

    Accepts an `Item`, a mapping with ``program`` and ``values`` (an item's metadata), or a bare program
    list plus `values`. Raises ValueError when a division is not exact or divides by zero.
    """
    program, vals = _program_and_values(item_or_program, values)
    trace = _trace(program, vals)
    for step, r in zip(program, trace, strict=True):
        if r is None or r.denominator != 1:
            raise ValueError(f"step {step} does not give a whole number ({r})")
    return int(trace[-1])


def _valid(family: Family, values: Mapping[str, int], limits: NumberRanges) -> list[int] | None:
    """Step results when every one is a whole number in [1, max_answer], else None."""
    results = []
    for r in _trace(family.program, values):
        if r is None or r.denominator != 1 or not 1 <= r <= limits.max_answer:
            return None
        results.append(int(r))
    return results


# ----------------------------------------------------------------------------------------- rendering


def _fields(item_values: Mapping[str, int], entities: Mapping[str, str],
            results: Mapping[str, int] | None = None) -> dict[str, Any]:
    return {**entities, **item_values, **(results or {})}


def _solution(family: Family, values: Mapping[str, int], entities: Mapping[str, str]) -> str:
    results = _valid(family, values, NumberRanges(max_answer=10**12))
    if results is None:
        raise ValueError(f"{family.name} program on {dict(values)} does not execute to whole positive numbers")
    env = {**values, **{s[3]: r for s, r in zip(family.steps, results, strict=True)}}
    # Bare "x op y = r." lines (no story labels): the same arithmetic reads the same in every family
    # and template, which is what lets a tiny model reuse a fact learned in one context in another.
    lines = [f"{env[a]} {op} {env[b]} = {env[out]}." for op, a, b, out in family.steps]
    lines.append(f"{FINAL_ANSWER_PREFIX}{results[-1]}{FINAL_ANSWER_SUFFIX}")
    return "\n".join(lines)


def render_solution(item: Item) -> str:
    """The template step-by-step solution of a word-problem item (one operation per line, boxed answer).

    Used as the chain of thought for SFT when an item carries none.
    """
    meta = item.metadata
    return _solution(FAMILIES[meta["family"]], meta["values"], meta["entities"])


def _question(family: Family, values: Mapping[str, int], entities: Mapping[str, str],
              template: int, rewording: int | None = None) -> str:
    text = family.questions[template] if rewording is None else family.rewordings[rewording]
    return text.format(**_fields(values, entities))


def signature(item: Item) -> str:
    """Identity of an item independent of its wording: family plus input values (e.g. ``add:a=12,b=7``)."""
    meta = item.metadata
    return _signature(meta["family"], meta["values"])


def _signature(family: str, values: Mapping[str, int]) -> str:
    return family + ":" + ",".join(f"{k}={int(v)}" for k, v in values.items())


def _make_item(item_id: str, family: Family, values: dict[str, int], entities: dict[str, str],
               template: int, limits: NumberRanges, rewording: int | None = None,
               extra: Mapping[str, Any] | None = None) -> Item:
    answer = execute(family.program, values)
    meta: dict[str, Any] = {
        "source": "wordproblem",
        "family": family.name,
        "template": template,
        "values": dict(values),
        "program": family.program,
        "steps": len(family.steps),
        "entities": dict(entities),
        "limits": asdict(limits),
    }
    if rewording is not None:
        meta["rewording"] = rewording
    meta.update(extra or {})
    return Item(id=item_id, question=_question(family, values, entities, template, rewording),
                answer=str(answer), solution=_solution(family, values, entities), metadata=meta)


# ----------------------------------------------------------------------------------------- generation


def _sample_values(family: Family, rng: random.Random, limits: NumberRanges,
                   max_tries: int = 10_000) -> dict[str, int]:
    for _ in range(max_tries):
        values = {name: rng.randint(*limits.bounds(kind)) for name, kind in family.inputs}
        if _valid(family, values, limits) is not None:
            return values
    raise ValueError(f"no valid values for family {family.name} under {limits}")


def _sample_entities(rng: random.Random) -> dict[str, str]:
    name, name2 = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    return {"name": name, "name2": name2, "obj": obj, "container": rng.choice(CONTAINERS)}


def sample_word_problem(rng: random.Random, family: str, item_id: str = "wp",
                        limits: NumberRanges | None = None, rewording: int | None = None) -> Item:
    """One random item of `family` drawn with `rng` (question template, or rewording template if given).

    Lower-level than `generate_word_problems`: no distinctness, for building large training corpora.
    """
    fam = FAMILIES[family]
    limits = limits or NumberRanges()
    values = _sample_values(fam, rng, limits)
    entities = _sample_entities(rng)
    template = rng.randrange(len(fam.questions))
    return _make_item(item_id, fam, values, entities, template, limits, rewording=rewording)


def generate_word_problems(n: int, seed: int, families: Sequence[str] | None = None, id_prefix: str = "wp",
                           exclude: set[str] | None = None, limits: NumberRanges | None = None) -> list[Item]:
    """`n` word problems with distinct signatures, none in `exclude`; deterministic in `seed`.

    Families rotate (item i has family ``families[i % len(families)]``), so any prefix is balanced,
    and the first m items of a call with n > m equal the call with n = m (a larger benchmark pool
    extends a smaller one). A family whose value space is used up (multiply has 88 value pairs under
    the default ranges, divide 196) gives its turn to the next family in the rotation that has room;
    ValueError only when every family is used up. Ids are ``f"{id_prefix}-{i:05d}"``.
    """
    families = list(families or DEFAULT_FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown word-problem families {unknown}; known: {sorted(FAMILIES)}")
    limits = limits or NumberRanges()
    rng = random.Random(seed)
    seen = set(exclude or ())
    exhausted: set[str] = set()
    items: list[Item] = []
    for i in range(n):
        for turn in range(len(families)):
            fam = FAMILIES[families[(i + turn) % len(families)]]
            if fam.name in exhausted:
                continue
            values = _unused_values(fam, rng, limits, seen)
            if values is not None:
                break
            exhausted.add(fam.name)
        else:
            raise ValueError(f"families {sorted(set(families))}: could not find an unused value combination "
                             f"(value space exhausted by n={n} and exclude)")
        seen.add(_signature(fam.name, values))
        entities = _sample_entities(rng)
        template = rng.randrange(len(fam.questions))
        items.append(_make_item(f"{id_prefix}-{i:05d}", fam, values, entities, template, limits))
    return items


def _unused_values(fam: Family, rng: random.Random, limits: NumberRanges, seen: set[str],
                   tries: int = 10_000) -> dict[str, int] | None:
    """Valid values of `fam` whose signature is not in `seen`: random draws, then (near exhaustion) a
    seeded choice among the unused combinations; None when there are none."""
    for _ in range(tries):
        values = _sample_values(fam, rng, limits)
        if _signature(fam.name, values) not in seen:
            return values
    names = [name for name, _ in fam.inputs]
    free = [vals for vals in itertools.product(*(range(lo, hi + 1) for lo, hi in
                                                 (limits.bounds(kind) for _, kind in fam.inputs)))
            if _int_results(fam, dict(zip(names, vals, strict=True)), limits.max_answer) is not None
            and _signature(fam.name, dict(zip(names, vals, strict=True))) not in seen]
    return dict(zip(names, rng.choice(free), strict=True)) if free else None


def signatures(items: Iterable[Item]) -> set[str]:
    """The set of signatures of `items` (convenient for `exclude=`)."""
    return {signature(it) for it in items}


# ----------------------------------------------------------------------------------------- perturbation


def _ndigits(x: int) -> int:
    return len(str(abs(int(x))))


@functools.lru_cache(maxsize=64)
def _step_index(family: str) -> tuple[tuple[str, int, int], ...]:
    """The family's steps over positions (inputs first, then step outputs): the integer hot loop's program."""
    fam = FAMILIES[family]
    pos = {name: i for i, (name, _) in enumerate(fam.inputs)}
    out = []
    for op, x, y, o in fam.steps:
        out.append((op, pos[x], pos[y]))
        pos[o] = len(pos)
    return tuple(out)


def _run(steps: Sequence[tuple[str, int, int]], inputs: Sequence[int], max_answer: int) -> list[int] | None:
    """Step results of integer inputs when every one is a whole number in [1, max_answer], else None."""
    env = list(inputs)
    for op, i, j in steps:
        x, y = env[i], env[j]
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        else:
            if y == 0 or x % y:
                return None
            r = x // y
        if not 1 <= r <= max_answer:
            return None
        env.append(r)
    return env[len(inputs):]


def _int_results(fam: Family, values: Mapping[str, int], max_answer: int) -> list[int] | None:
    """`_valid` on integer inputs (what the reference draws and the value-space scan need, without Fractions)."""
    return _run(_step_index(fam.name), [int(values[name]) for name, _ in fam.inputs], max_answer)


def _answer_at(program: Sequence[Mapping[str, Any]], values: Mapping[str, Fraction]) -> Fraction | None:
    env: dict[str, Fraction | None] = dict(values)
    r: Fraction | None = None
    for step in program:
        x, y = (env[a] for a in step["args"])
        r = None if x is None or y is None else _OPS[step["op"]](x, y)
        env[step["out"]] = r
    return r


def _leanings(program: Sequence[Mapping[str, Any]], old: Mapping[str, int]) -> dict[str, int]:
    """+1 where raising an input raises the answer (at the original values), -1 where it lowers it."""
    base = _answer_at(program, {k: Fraction(v) for k, v in old.items()})
    out = {}
    for name in old:
        moved = _answer_at(program, {k: Fraction(v) * (Fraction(1001, 1000) if k == name else 1)
                                     for k, v in old.items()})
        out[name] = 0 if moved is None or base is None else (moved > base) - (moved < base)
    return out


def _near(v: int, lo: int, hi: int, spread: float, lean: int, rng: random.Random,
          keep_round: bool = False) -> int | None:
    """A different integer in [lo, hi] near v: v times a log-uniform factor in [1/spread, spread],
    above 1 half the time (3 times in 4 when `lean` is +1, 1 in 4 when -1); with `keep_round`, in
    v's roundness class at its new size (90 -> 60, 15 -> 25, 23 -> 31 but not 30: `keeps_roundness`).
    None after 20 tries."""
    for _ in range(20):
        x = near_log(v, spread, lean, rng)
        k = snap_roundness(v, x) if keep_round else math.floor(x + 0.5)
        if k != v and lo <= k <= hi and v <= k * spread and k <= v * spread \
                and (not keep_round or keeps_roundness(v, k)):
            return k
    return None


def _structure(inputs: Sequence[int], results: Sequence[int]) -> Structure:
    """The item's `Structure`: quantities are the inputs (family order) then the step results."""
    return Structure(tuple(inputs) + tuple(results), tuple(inputs), int(results[-1]))


@dataclass(frozen=True)
class _Setup:
    fam: Family
    limits: NumberRanges
    names: tuple[str, ...]
    old: tuple[int, ...]
    bounds: tuple[tuple[int, int], ...]
    old_results: tuple[int, ...]


def _setup(item: Item) -> _Setup:
    meta = item.metadata
    fam = FAMILIES[meta["family"]]
    limits = NumberRanges(**meta["limits"]) if "limits" in meta else NumberRanges()
    names = tuple(name for name, _ in fam.inputs)
    old = tuple(int(meta["values"][name]) for name in names)
    bounds = []
    for (_, kind), v in zip(fam.inputs, old, strict=True):
        lo, hi = limits.bounds(kind)
        # an original outside the family's range (a hand-made item) keeps only a factor 5 around it
        bounds.append((lo, hi) if lo <= v <= hi else (max(1, v // 5), v * 5))
    old_results = _run(_step_index(fam.name), old, 10**12)
    if old_results is None:
        raise ValueError(f"item {item.id}: its program does not execute to whole positive numbers")
    return _Setup(fam, limits, names, old, tuple(bounds), tuple(old_results))


def _answer_ok(old: int, new: int) -> bool:
    """A reference answer: different, same number of digits, within ANSWER_SPREAD of the old one."""
    return new != old and _ndigits(new) == _ndigits(old) and old / ANSWER_SPREAD <= new <= old * ANSWER_SPREAD


def _quantity_names(fam: Family) -> list[str]:
    outs = [step[3] for step in fam.steps]
    return [name for name, _ in fam.inputs] + outs[:-1] + ["the answer"]


def _notable(setup: _Setup) -> list[tuple[str, Any]]:
    """The original's special properties as (label, test of a reference's `Structure`): equal quantities,
    round inputs, a round answer, an answer of 1 (never kept: the answer must change)."""
    st = _structure(setup.old, setup.old_results)
    qn = _quantity_names(setup.fam)
    props: list[tuple[str, Any]] = []
    for i, j in sorted(st.pattern):
        props.append((f"{qn[i]} = {qn[j]} (= {st.quantities[i]})",
                      lambda s, i=i, j=j: s.quantities[i] == s.quantities[j]))
    for k, (name, v) in enumerate(zip(setup.names, setup.old, strict=True)):
        if tens(v) >= 10:
            props.append((f"round input {name} = {v}", lambda s, k=k, v=v: keeps_roundness(v, s.inputs[k])))
    for k, (name, v) in enumerate(zip(setup.names, setup.old, strict=True)):
        if st.leads[k]:
            props.append((f"answer {st.answer} starts like input {name} = {v}", lambda s, k=k: s.leads[k]))
    if tens(st.answer) >= 10:
        props.append((f"round answer {st.answer}", lambda s, a=st.answer: keeps_answer_form(a, s.answer)))
    if st.answer in (0, 1):
        props.append((f"answer {st.answer}", lambda s: False))
    return props


# At most this many references with an item's best structure in the wanted bin: one is drawn uniformly.
_FEW = 12
# Value combinations up to which the reference space of an item is scanned exhaustively (the default
# ranges give at most ~25,000: three_step with 8 x 11 x 19 x 19 inputs within a factor 5).
_SCAN_LIMIT = 100_000


@dataclass(frozen=True)
class _Space:
    """All valid references of an item (every input changed, within a factor 5 and its range)."""

    n_valid: int
    best: tuple[int, ...]  # the smallest `Structure.mismatch` a valid reference reaches
    best_refs: dict[int, tuple[tuple[int, ...], ...]]  # answer bin -> inputs of the references reaching it
    kept: frozenset[str]  # labels of the original's notable properties some valid reference keeps


@functools.lru_cache(maxsize=512)
def _scan(setup: _Setup) -> _Space | None:
    """The item's reference space, or None when it has more than _SCAN_LIMIT value combinations."""
    windows = [range(max(lo, math.ceil(v / 5)), min(hi, 5 * v) + 1)
               for v, (lo, hi) in zip(setup.old, setup.bounds, strict=True)]
    if math.prod(len(w) for w in windows) > _SCAN_LIMIT:
        return None
    steps = _step_index(setup.fam.name)
    st_old = _structure(setup.old, setup.old_results)
    old_answer = setup.old_results[-1]
    props = _notable(setup)
    # `Structure.mismatch` on plain ints, with the inputs' roundness looked up (the scan's hot loop)
    round_ok = [frozenset(x for x in w if keeps_roundness(v, x)) for v, w in zip(setup.old, windows, strict=True)]
    old_pattern, old_leads = st_old.pattern, st_old.leads
    n_valid, best, refs, kept = 0, (9, 9, 9, 9), [], set()
    for vals in itertools.product(*windows):
        if any(a == b for a, b in zip(vals, setup.old, strict=True)):
            continue
        res = _run(steps, vals, setup.limits.max_answer)
        if res is None or not _answer_ok(old_answer, res[-1]):
            continue
        n_valid += 1
        lead = str(res[-1])[0]
        m = (int(equality_pattern((*vals, *res)) != old_pattern),
             int(tuple(str(v)[0] == lead for v in vals) != old_leads),
             int(not keeps_answer_form(old_answer, res[-1])),
             sum(v not in ok for v, ok in zip(vals, round_ok, strict=True)))
        if m < best:
            best, refs = m, []
        if m == best:
            refs.append((vals, res[-1]))
        if len(kept) < len(props):
            st = _structure(vals, res)
            kept.update(label for label, test in props if label not in kept and test(st))
    by_bin: dict[int, list[tuple[int, ...]]] = {}
    for vals, answer in refs:
        by_bin.setdefault(answer_bin(old_answer, answer), []).append(vals)
    return _Space(n_valid, best, {b: tuple(v) for b, v in by_bin.items()}, frozenset(kept))


def special_case_reasons(item: Item) -> list[str]:
    """Why `item` is inherently not exchangeable with its references: [] for most items.

    The references keep the original's structure where the program and ranges allow (see
    `perturb_word_problem`); the reasons name what no valid reference (every input changed within a
    factor 5 and its range, the answer changed with its digits, within a factor 3) can keep: an
    answer of 1 (the answer must change, and 1 is a special value: "7 - 6 = 1"), an equality that
    would fix the answer ("5 shared among 5": a = b keeps the answer at 1), a round number with no
    round alternative in range (a multiplicand 10 when multiplicands stop at 12), an answer that
    starts like an input where no reference can, or a structure whose parts no reference keeps all
    at once. Even an uncontaminated model may score such an original above its references (the demo
    base model: p_all 0.90 on "7 - 6" against 0.28 on its references), so the test's null does not
    hold for it; the build report can count them, and a test can leave them out.

    Of the demo's 100 benchmark items (`generate_word_problems(100, seed=9173, id_prefix="bench")`),
    10 are affected: 3 with the answer 1 (bench-00043 7 - 6, bench-00067 6 - 5, bench-00045 5 / 5,
    whose a = b is lost too), 4 with a multiplicand 10 (bench-00008, -00010, -00053, -00098), 2 with
    an input 20 that has no round alternative (bench-00007 20 - 10 = 10, which also loses b = the
    answer and its round answer; bench-00049 20 - 6) and bench-00077 (4 x 4 + 8 - 14 = 10: no
    reference keeps its equalities, leading digits and round answer at once).

    Exact for the default ranges (every valid reference is scanned); for ranges too large to scan,
    the answers 0 and 1 and the equalities that fix the answer are reported.
    """
    setup = _setup(item)
    space = _scan(setup)
    props = _notable(setup)
    if space is None:
        return _special_case_rules(setup, props)
    if space.n_valid == 0:
        return ["no valid reference exists (the value space has no other answer)"]
    reasons = [f"{label}: no valid reference keeps it" for label, _ in props if label not in space.kept]
    if not reasons and space.best != KEPT_ALL:
        reasons.append("no valid reference keeps the whole structure at once (loses "
                       + ", ".join(lost_names(space.best)) + ")")
    return reasons


def _special_case_rules(setup: _Setup, props: list[tuple[str, Any]]) -> list[str]:
    """special_case_reasons without a scan: an answer of 0 or 1, equal inputs that fix the answer."""
    reasons = [f"{label}: no valid reference keeps it" for label, _ in props if label.startswith("answer ")]
    program = setup.fam.program
    answer = setup.old_results[-1]
    for cls in value_classes(setup.old):
        if len(cls) < 2:
            continue
        fixed = True
        for factor in (Fraction(7, 3), Fraction(11, 5), Fraction(13, 2)):
            vals = {n: Fraction(v) * (factor if k in cls else 1) for k, (n, v) in enumerate(zip(setup.names, setup.old, strict=True))}
            fixed &= _answer_at(program, vals) == answer
        if fixed:
            names = " = ".join(setup.names[k] for k in cls)
            reasons.append(f"{names} (= {setup.old[cls[0]]}) fixes the answer at {answer}: no valid reference keeps it")
    return reasons


def perturb_word_problem(item: Item, seed: int, max_tries: int = 20_000) -> Item:
    """Exact isomorphic reference item: same family, template and steps, new numbers near the old ones.

    Every input changes by a log-symmetric factor (as likely down as up; up to 2, later up to 3 and
    5) and stays in its family's range; the program is re-executed under the same constraints (whole
    intermediates in [1, max_answer]). The answer must differ from the original, keep its number of
    digits and stay within a factor 3 of it. Difficulty matching as for GSM8K
    (`zcp.benchmarks.references.matching.draw_targets`): the draw aims at a bin of the answer's change (smaller or
    larger, by up to or beyond a factor sqrt 2) drawn in the proportions a symmetric log-step within
    the answer's digit range gives, so over a benchmark references are as often larger as smaller and
    keep the leading-digit distribution; a bin that no reference with the best structure reaches
    gives way to the nearest one that does.

    Structure matching (`zcp.benchmarks.references.matching`): equal inputs are drawn as one value, and the whole
    pattern of equal quantities (inputs, intermediates, the answer: "12 - 6 = 6" keeps b = the answer)
    is kept with no new equality; the answer starts like the same inputs as in the original and like
    no other (90 / 3 = 30 -> 40 / 2 = 20); a round input stays round at its new size and a non-round
    one stays off the multiples of 10 (90 -> 60, 23 -> 31); the answer keeps its roundness (30 -> 20,
    not 29). The draws keep the most of this the item allows, in that order of importance: the
    item's reference space is scanned (`_scan`, exact under the default ranges), and when the random
    draws miss the best structure in the wanted bin, a reference is taken from the scan. Without a
    scan (ranges too large), the draws take the best structure found in a tenth of the budget, and
    any valid draw after a quarter of it. What no reference can keep (an answer of 1; 5 / 5 = 1)
    makes the item inherently non-exchangeable: see `special_case_reasons`. The reference's metadata
    names what it loses (`structure_lost`). A structure leaves some items few references (10 + 10 =
    20 has one: 20 + 20 = 40; 8 x 11 = 88 two: 3 x 12 and 4 x 12); up to 12 in the wanted bin, one is
    drawn uniformly among them (not the nearest every time), so that seeds give distinct draws where
    there are any. Raises ValueError when no valid perturbation exists.
    """
    meta = item.metadata
    setup = _setup(item)
    fam, limits, names, old, bounds = setup.fam, setup.limits, setup.names, setup.old, setup.bounds
    old_answer = int(item.answer)
    space = _scan(setup)
    if space is not None and space.n_valid == 0:
        raise ValueError(f"item {item.id}: no valid perturbation of {dict(zip(names, old, strict=True))} exists")
    rng = random.Random(f"perturb|{signature(item)}|{seed}")
    target = draw_targets(old_answer, 1, rng)[0]
    leanings = _leanings(fam.program, dict(zip(names, old, strict=True)))
    lean = [leanings[n] for n in names]
    direction = (target > 0) - (target < 0)
    steps = _step_index(fam.name)
    st_old = _structure(old, setup.old_results)
    classes = value_classes(old)
    class_bounds = [(max(bounds[i][0] for i in c), min(bounds[i][1] for i in c)) for c in classes]
    class_lean = [(s > 0) - (s < 0) for s in (sum(lean[i] for i in c) for c in classes)]
    best = space.best if space is not None else KEPT_ALL
    # the bin to aim at: the target, or the nearest one a reference with the best structure reaches
    wanted = next(b for b in fallback_bins(target) if b in space.best_refs) if space is not None else target
    found: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}
    # a handful of references with the structure: each as likely as the others (the draws near the
    # original would return the same one for every seed, and callers need distinct draws)
    few = space is not None and len(space.best_refs[wanted]) <= _FEW
    for t in range(0 if few else max_tries):
        spread = 2.0 if t < 0.4 * max_tries else 3.0 if t < 0.7 * max_tries else 5.0
        mode = t % 4  # 0, 1: equal inputs as one value, roundness kept; 2: any last digit; 3: inputs apart
        if mode < 3:
            drawn = [_near(old[c[0]], *class_bounds[k], spread, direction * class_lean[k], rng, keep_round=mode < 2)
                     for k, c in enumerate(classes)]
            if any(v is None for v in drawn):
                continue
            vals = [0] * len(old)
            for c, v in zip(classes, drawn, strict=True):
                for i in c:
                    vals[i] = int(v or 0)
        else:
            single = [_near(v, *bounds[i], spread, direction * lean[i], rng) for i, v in enumerate(old)]
            if any(v is None for v in single):
                continue
            vals = [int(v or 0) for v in single]
        results = _run(steps, vals, limits.max_answer)
        if results is None or not _answer_ok(old_answer, results[-1]):
            continue
        cost = st_old.mismatch(_structure(vals, results))
        found.setdefault((cost, answer_bin(old_answer, results[-1])), tuple(vals))
        if (best, wanted) in found:
            break
        if space is not None and t >= max_tries // 40:
            break  # the scan has what the draws have not found
        if space is None and ((t >= max_tries // 10 and any(c == best for c, _ in found))
                              or (t >= max_tries // 4 and found)):
            break
    top = min((c for c, _ in found), default=None)
    if space is not None and (best, wanted) not in found:
        # the random draws missed the best structure the item allows in the wanted bin: take a scanned one
        got, top = wanted, space.best
        chosen = rng.choice(space.best_refs[wanted])
    elif top is None:
        raise ValueError(f"item {item.id}: no valid perturbation of {dict(zip(names, old, strict=True))} "
                         f"found in {max_tries} tries")
    else:
        got = next(b for b in fallback_bins(target) if (top, b) in found)
        chosen = found[(top, got)]
    values = dict(zip(names, chosen, strict=True))
    results = _run(steps, chosen, limits.max_answer) or []
    extra = {"original_id": item.id, "perturbation_seed": seed,
             "magnitude_kept": all(_ndigits(r) == _ndigits(o) for r, o in zip(results, setup.old_results, strict=True)),
             "structure_lost": lost_names(top), "target_bin": target, "answer_bin": got}
    for key in ("variant",):
        if key in meta:
            extra[key] = meta[key]
    return _make_item(f"{item.id}::ref{seed}", fam, values, dict(meta["entities"]), meta["template"],
                      limits, rewording=meta.get("rewording"), extra=extra)


# ----------------------------------------------------------------------------------------- rewording


def reword_word_problem(item: Item, k: int, seed: int) -> list[Item]:
    """`k` paraphrase variants via the family's rewording templates: same values and answer, new text.

    Templates are drawn without replacement (seeded), so variants differ from each other and from
    the original; ids are ``f"{item.id}::para{j}"``.
    """
    meta = item.metadata
    fam = FAMILIES[meta["family"]]
    choices = [j for j in range(len(fam.rewordings)) if j != meta.get("rewording")]
    if k > len(choices):
        raise ValueError(f"family {fam.name} has {len(choices)} rewording templates available, asked for k={k}")
    rng = random.Random(f"reword|{signature(item)}|{seed}")
    limits = NumberRanges(**meta["limits"]) if "limits" in meta else NumberRanges()
    out = []
    for j, r in enumerate(rng.sample(choices, k)):
        variant = _make_item(f"{item.id}::para{j}", fam, dict(meta["values"]), dict(meta["entities"]),
                             meta["template"], limits, rewording=r,
                             extra={"original_id": item.id, "variant": j})
        if variant.question == item.question:  # pragma: no cover - templates are disjoint by construction
            raise AssertionError(f"rewording {r} of {fam.name} reproduces the original text")
        out.append(variant)
    return out

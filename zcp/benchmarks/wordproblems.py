"""Word problems with an executable solution program: generation, execution, rewording.

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

References are built elsewhere: the exact law's draws in `zcp.benchmarks.references.exact`, the matched near
perturbation (`perturb_word_problem`, `special_case_reasons`) in `zcp.benchmarks.references.wordproblem_matched`.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from zcp.core.answers import FINAL_ANSWER_PREFIX, FINAL_ANSWER_SUFFIX
from zcp.core.items import Item

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


# ----------------------------------------------------------------------------------------- integer execution


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

"""An item's draws: collected once (`collect_draws`, a `DrawPool`) and chosen from (`choose_draws`).

`perturb_gsm8k` is the one-item API (collect, then choose). Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from zcp.benchmarks.references.gsm8k.answer_class import (
    LEAD_TARGETS,
    Structure,
    _class_description,
    _digit_values,
    _mismatch,
    _structure,
    _tens,
    answer_band,
    flexible_class,
    is_round,
    is_special,
    keeps_answer_class,
    keeps_answer_form,
    significant_lead,
)
from zcp.benchmarks.references.gsm8k.draws import _Draw, _leanings, _sample, _try
from zcp.benchmarks.references.gsm8k.program import _analyse, _Analysis
from zcp.benchmarks.references.gsm8k.quantities import format_number
from zcp.benchmarks.references.gsm8k.rewrite import _findings, _make_reference
from zcp.benchmarks.references.matching import answer_bin, draw_targets, fallback_bins
from zcp.core.io import stable_hash
from zcp.core.items import Item


@dataclass
class PerturbResult:
    """Reference draws for one item: `items` (up to m), and `reason` when fewer than m were produced.

    `special_case`: why no draw can keep the answer's class (`keeps_answer_class`), when none can; its
    draws (under ``special_cases="keep"``) are then the best of the others, flagged in their metadata."""

    original_id: str
    items: list[Item] = field(default_factory=list)
    reason: str | None = None
    attempts: int = 0
    special_case: list[str] = field(default_factory=list)
    picks: list[tuple[Any, bool]] = field(default_factory=list, repr=False)  # the draws behind `items`

    @property
    def ok(self) -> bool:
        """True when all m draws were produced."""
        return self.reason is None


@dataclass
class _Cand:
    draw: _Draw
    answer: Fraction
    mismatch: tuple[int, int, int]
    round_delta: int = 0  # round question numbers in the draw minus in the original
    item: Item | None = None  # the validated reference (made as draw 0), None until checked

    @property
    def clean(self) -> bool:
        """Keeps the question's structure (what `structure="require"` insists on): as many of its numbers are
        multiples of 10 as in the original, and the answer equals / starts like a question number, and the
        question's last number, exactly when the original's does (`_mismatch`'s first two parts: a clean
        model copies numbers of the question, so a coincidence a draw makes or breaks moves its p_first)."""
        return self.round_delta == 0 and self.mismatch[0] == 0 and self.mismatch[1] == 0


@dataclass
class DrawPool:
    """The valid draws of one item, collected once (`collect_draws`) and chosen from later (`choose_draws`):
    the benchmark builder collects every item first, so that the leading digits of the references whose
    leading digit must change can be matched across the benchmark (`lead_transport`)."""

    item: Item
    m: int
    reason: str | None = None  # why the item has no draws at all (its chain cannot be used)
    analysis: _Analysis | None = None
    flexible: str | None = None
    matched: dict[int, list[_Cand]] = field(default_factory=dict)  # by bin (banded answers) or leading digit
    alt: dict[int, list[_Cand]] = field(default_factory=dict)  # banded answers: the form kept, another leading digit
    outside: dict[int, list[_Cand]] = field(default_factory=dict)  # draws off the class, by digit-range bin
    targets: list[int] = field(default_factory=list)  # bins of the m draws (banded answers)
    outside_targets: list[int] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0
    failures: Counter = field(default_factory=Counter)
    base_findings: tuple[Counter, int] | None = None
    base: Structure | None = None  # the original's `_structure`

    def validate_alt(self) -> None:
        """Check the rewritten items of the other-leading-digit draws now (they are checked lazily), so that
        `lead_capacity` counts only draws that pass every check."""
        self.alt = self._validated(self.alt)

    def validate_outside(self) -> None:
        """Check the rewritten items of the draws off the answer's class now (they are checked lazily)."""
        self.outside = self._validated(self.outside)

    def _validated(self, pools: dict[int, list[_Cand]]) -> dict[int, list[_Cand]]:
        if self.analysis is None:
            return pools
        out: dict[int, list[_Cand]] = {}
        for k, cands in pools.items():
            ok = []
            for c in cands:
                if c.item is None:
                    try:
                        c.item = _make_reference(self.item, self.analysis, c.draw, 0, self.base_findings)
                    except ValueError:
                        continue
                ok.append(c)
            out[k] = ok
        return out

    @property
    def answer(self) -> Fraction:
        """The original's final answer."""
        return self.analysis.chain.answer if self.analysis else Fraction(0)

    @property
    def lead_by_flow(self) -> bool:
        """Whether the draws' leading digits are chosen by `lead_transport`: a flexible answer, or one whose
        program gives no draw its leading digit but some draws its form (35 = 5 x 7: 28 or 42, never 3x)."""
        return self.flexible is not None or (not any(self.matched.values()) and any(self.alt.values()))

    def lead_capacity(self, clean: bool = False) -> dict[int, int]:
        """For a `lead_by_flow` item: how many draws (the answer's form kept; with `clean`, also the question's
        structure, `_Cand.clean`) reach each other leading digit."""
        pools = self.matched if self.flexible else self.alt
        counts = {k: sum(1 for c in v if c.clean or not clean) for k, v in sorted(pools.items())}
        return {k: n for k, n in counts.items() if n}


def collect_draws(item: Item, m: int, seed: int, max_attempts: int = 4000) -> DrawPool:
    """Sample and validate the draws of one item (see `perturb_gsm8k`); deterministic in (item id, seed).

    The loop ends when every target has its draws with the question's whole structure kept (`_mismatch`
    PERFECT), or the item has m such draws anywhere after 40% of the budget, or every target has its draws
    after 70% of it, or at the end of the budget (three times the budget while no draw at all was valid).

    An item left with fewer than m draws that keep the answer's class and the question's structure
    (`_Cand.clean`) then gets a second phase of up to `max_attempts` structure-holding draws (`_sample` with
    `lead`: every drawn number starts like the answer exactly when its old value did, round numbers stay
    round), from a stream of its own, so that the pools of the items the first phase serves are unchanged
    (which of their draws are chosen may still move with the benchmark-level transport). Only draws that keep the class and the structure are kept from it: the features stay matched per draw,
    the phase only finds such draws where chance alone rarely does (an answer starting like the question's
    last number: "... has 20 sheep" -> 260)."""
    where = f"row {item.metadata['row']}: " if "row" in item.metadata else ""
    rng = random.Random(int(stable_hash(f"gsm8k-ref|{item.id}|{seed}"), 16))
    try:
        an = _analyse(item)
    except ValueError as e:
        return DrawPool(item, m, reason=where + str(e), rng=rng)
    answer = an.chain.answer
    flexible = flexible_class(answer)
    own = significant_lead(answer)
    if flexible:
        targets: list[int] = []
        need = {d: m for d in LEAD_TARGETS if d != own}
    else:
        targets = draw_targets(answer, m, rng, bounds=answer_band(answer))
        need = dict(Counter(targets))
    pool = DrawPool(item, m, analysis=an, flexible=flexible, targets=targets,
                    outside_targets=draw_targets(answer, m, rng), rng=rng,
                    base_findings=_findings(item.question, item.solution or ""))
    question_values = {q.value for q in an.quantities}
    base = pool.base = _structure(answer, _digit_values(an, {}))
    base_round = sum(base[2])
    perfect: Counter = Counter()
    seen: set[tuple] = set()
    leanings = _leanings(an)
    fails = pool.failures

    def consider(new: dict[int, Fraction] | None, why: str, clean_only: bool = False) -> bool:
        """Check one sampled set of new values and file the draw in the pool; whether it was valid."""
        if new is None:
            fails[why] += 1
            return False
        vals = list(new.values())
        # no new equality: the new values differ from each other and from every question number that stays
        # (a new value may take the old value of a number that moves too: 3 -> 5 while 5 -> 8)
        moved = {an.variables[vi].value for vi in new}
        if len(set(vals)) != len(vals) or any(v in question_values and v not in moved for v in vals):
            fails["new values collide with each other or with a number of the question"] += 1
            return False
        key = tuple(sorted(new.items()))
        if key in seen:
            return False
        seen.add(key)
        draw, why = _try(an, new)
        if draw is None:
            fails[why] += 1
            return False
        new_answer = draw.results[an.chain.final_step]
        if is_special(new_answer):
            fails["the answer became 0, 1, 10, 100 or 1000"] += 1
            return True
        changed = {an.variables[vi].value: v for vi, v in new.items()}
        st = _structure(new_answer, _digit_values(an, changed))
        cand = _Cand(draw, new_answer, _mismatch(base, st), sum(st[2]) - base_round)
        if not keeps_answer_class(answer, new_answer):
            if clean_only:
                return True
            fails["the answer lost its leading digit or roundness"] += 1
            if keeps_answer_form(answer, new_answer):
                d = significant_lead(new_answer)
                if len(pool.alt.setdefault(d, [])) < m:
                    pool.alt[d].append(cand)
            b = answer_bin(answer, new_answer)
            if len(pool.outside.setdefault(b, [])) < m:
                pool.outside[b].append(cand)
            return True
        k = significant_lead(new_answer) if flexible else answer_bin(answer, new_answer)
        have = pool.matched.setdefault(k, [])
        # a bin no draw targets keeps up to m draws too: the fallback of a target bin nothing reaches
        if clean_only:
            if not (cand.clean and perfect[k] < m):
                return True
        elif not (len(have) < (need.get(k, 0) or m) or (cand.clean and perfect[k] < m)):
            return True
        try:
            cand.item = _make_reference(item, an, draw, 0, pool.base_findings)
        except ValueError as e:
            fails[str(e)] += 1
            return True
        have.append(cand)
        perfect[k] += cand.clean
        return True

    # an item with no valid draw at all after the budget gets up to twice as much again (low-yield
    # programs: a divisibility constraint, a value solved from the others)
    seen_valid = False
    while pool.attempts < max_attempts or (pool.attempts < 3 * max_attempts and not seen_valid):
        short_perfect = [k for k in need if perfect[k] < need[k]]
        short_any = [k for k in need if len(pool.matched.get(k, ())) < need[k]]
        done = pool.attempts / max_attempts
        if not short_perfect or (not flexible and done >= 0.4 and sum(perfect.values()) >= m) \
                or (not short_any and done >= 0.7):
            break
        pool.attempts += 1
        att = pool.attempts
        stage = 0 if att <= 0.4 * max_attempts else (1 if att <= 0.7 * max_attempts else 2)
        target = short_perfect[att % len(short_perfect)]
        direction = (target > own) - (target < own) if flexible else (target > 0) - (target < 0)
        seen_valid |= consider(*_sample(an, rng, stage, direction, leanings))

    # second phase (docstring): structure-holding draws for an item short of clean draws, on a stream of its own
    if seen_valid and sum(perfect.values()) < m:
        hold = random.Random(int(stable_hash(f"gsm8k-ref-hold|{item.id}|{seed}"), 16))
        for att in range(1, max_attempts + 1):
            if sum(perfect.values()) >= m:
                break
            stage = 0 if att <= 0.4 * max_attempts else (1 if att <= 0.7 * max_attempts else 2)
            short = [k for k in need if perfect[k] < need[k]] or list(need)
            target = short[att % len(short)]
            direction = (target > own) - (target < own) if flexible else (target > 0) - (target < 0)
            pool.attempts += 1
            consider(*_sample(an, hold, stage, direction, leanings, lead=(own, target if flexible else own)),
                     clean_only=True)
    return pool


def _pick(pools: dict[int, list[_Cand]], keys: Sequence[int], balance: int, pool: DrawPool,
          clean_only: bool = False) -> _Cand | None:
    """Take the best draw of `pools[k]` over `keys` (in order of preference): the structure first (answer
    equal to / starting like a question number kept), then the running roundness balance of the item's
    draws (`balance`: round question numbers gained so far), then the key's rank. A draw whose rewritten
    item fails a check (`_make_reference`) is discarded and the next one taken. `clean_only`: only a draw
    that keeps the answer's coincidences with the question's numbers and the roundness balance at 0."""
    an = pool.analysis
    assert an is not None
    while True:
        best, where = None, None
        for rank, k in enumerate(keys):
            for idx, c in enumerate(pools.get(k, ())):
                if clean_only and (balance + c.round_delta or c.mismatch[0] or c.mismatch[1]):
                    continue  # `_Cand.clean` (the coincidences with the question's numbers kept), in balance
                score = (c.mismatch[0], c.mismatch[1], abs(balance + c.round_delta), rank, idx)
                if best is None or score < best:
                    best, where = score, (k, idx)
        if where is None:
            return None
        c = pools[where[0]].pop(where[1])
        if c.item is None:
            try:
                c.item = _make_reference(pool.item, an, c.draw, 0, pool.base_findings)
            except ValueError:
                continue
        return c


def _unmatched_reason(pool: DrawPool) -> str:
    answer = pool.answer
    others = [c for v in pool.outside.values() for c in v]
    if is_round(answer) and not any(_tens(c.answer) == _tens(answer) for c in others):
        g = _tens(answer)
        return (f"the round answer {format_number(answer)} has no round alternative (no valid draw is a multiple of "
                f"{g} but not of {10 * g})")
    return (f"no valid reference keeps the answer's class ({_class_description(answer)}); "
            f"{len(others)} valid draw(s) found do not")


def choose_draws(pool: DrawPool, lead_counts: dict[int, int] | None = None, special_cases: str = "keep",
                 fill: bool = True, structure: str = "prefer") -> PerturbResult:
    """Up to m references from a `DrawPool`.

    An answer that keeps its leading digit: each draw targets a bin of the answer's change within its class
    (`draw_targets` with `answer_band`). A `DrawPool.lead_by_flow` answer: `lead_counts` (leading digit ->
    number of draws, from `lead_transport`); without them, the bins of the answer's change within its digit
    range (`draw_targets`), so that its draws are about as often smaller as larger.
    Within a target, `_pick` prefers the draws whose answer equals / starts like a question number as the
    original's does, then those that keep the item's round question numbers in balance, then the nearest
    bin; with ``structure="require"`` (the benchmark builder) an item takes only draws with as many round
    question numbers as the original (`_Cand.clean`), fewer than m if need be.

    Special cases (`PerturbResult.special_case`): an item none of whose valid draws keeps the answer's form,
    or (``structure="require"``) none of whose class-keeping draws keeps the structure. ``special_cases=
    "drop"`` returns no draws for it, ``"keep"`` the best of the others. `fill` tops up an item with fewer
    than m class-keeping draws by the best of the others (`perturb_gsm8k`'s default; the benchmark builder
    does not fill). Every draw's metadata says whether it keeps the class (``answer_class_kept``).
    """
    item, m = pool.item, pool.m
    if pool.analysis is None:
        return PerturbResult(item.id, reason=pool.reason)
    where = f"row {item.metadata['row']}: " if "row" in item.metadata else ""
    picks: list[tuple[_Cand, bool]] = []
    balance = 0
    if not pool.flexible and not any(pool.matched.values()):
        pool.validate_alt()  # whether the leading digit goes by transport depends on draws that pass every check
    by_flow = pool.lead_by_flow

    def take(pools: dict[int, list[_Cand]], keys: Sequence[int], kept: bool, clean_only: bool) -> None:
        nonlocal balance
        c = _pick(pools, keys, balance, pool, clean_only)
        if c is not None:
            picks.append((c, kept))
            balance += c.round_delta

    def take_class(clean_only: bool, counts: dict[int, int] | None) -> None:
        if by_flow:
            src = {k: list(v) for k, v in (pool.matched if pool.flexible else pool.alt).items() if v}
            if counts is None:  # no transport: the digit-range difficulty bins, as often smaller as larger
                by_bin: dict[int, list[_Cand]] = {}
                for c in (c for v in src.values() for c in v):
                    by_bin.setdefault(answer_bin(pool.answer, c.answer), []).append(c)
                for t in pool.outside_targets:
                    take(by_bin, fallback_bins(t), True, clean_only)
                return
            for d in sorted(counts):  # the transport's counts: a digit that runs out is not made up elsewhere
                for _ in range(counts[d]):
                    take(src, [d], True, clean_only)
        else:
            src = {k: list(v) for k, v in pool.matched.items()}
            for t in pool.targets:
                take(src, fallback_bins(t), True, clean_only)

    take_class(structure == "require", lead_counts)
    special: list[str] = []
    has_class = bool(pool.lead_capacity()) if by_flow else any(pool.matched.values())
    if not picks and has_class:  # only under structure="require"
        special = [f"no valid reference keeps both the answer's class ({_class_description(pool.answer)}) and "
                   "the question's round numbers (as many multiples of 10)"]
        if special_cases == "keep":
            take_class(False, None)
    elif not picks and any(pool.outside.values()):
        pool.validate_outside()  # a special case only if some other draw passes every check
        if any(pool.outside.values()):
            special = [_unmatched_reason(pool)]
    if special and special_cases == "drop":
        return PerturbResult(item.id, reason=where + special[0], attempts=pool.attempts, special_case=special)
    if (special and not picks) or (fill and len(picks) < m):
        outside = {b: list(v) for b, v in pool.outside.items()}
        for t in pool.outside_targets:
            if len(picks) >= m:
                break
            take(outside, fallback_bins(t), False, False)
    return _finish(pool, picks, special)


def _finish(pool: DrawPool, picks: Sequence[tuple[_Cand, bool]], special: list[str]) -> PerturbResult:
    """The PerturbResult of the chosen draws (numbered, metadata) and the reason when fewer than m."""
    item, m = pool.item, pool.m
    where = f"row {item.metadata['row']}: " if "row" in item.metadata else ""
    by_flow = pool.lead_by_flow
    items = []
    for j, (c, kept) in enumerate(picks):
        assert c.item is not None
        meta = {**c.item.metadata, "draw": j, "answer_class_kept": kept}
        if kept and (by_flow or significant_lead(c.answer) != significant_lead(pool.answer)):
            meta["answer_lead_by_flow"] = True  # its leading digit went by `lead_transport` (a top-up: `top_up`)
        if special:
            meta["special_case"] = list(special)
        items.append(Item(id=f"{item.id}::ref{j}", question=c.item.question, answer=c.item.answer,
                          solution=c.item.solution, metadata=meta))
    reason = None
    if len(items) < m:
        kept_n = sum(k for _, k in picks)
        top = pool.failures.most_common(1)[0][0] if pool.failures else "no new combination of values"
        reason = (f"{where}only {len(items)} of {m} valid draws in {pool.attempts} attempts"
                  + (f" ({kept_n} keep the answer's class)" if kept_n < len(items) else "")
                  + f" (most frequent failure: {top})")
    return PerturbResult(item.id, items, reason, pool.attempts, special, picks=list(picks))


def top_up(pool: DrawPool, res: PerturbResult, counts: dict[int, int]) -> PerturbResult:
    """An item with fewer than m draws in its answer's class, topped up with `counts` (leading digit -> draws,
    from `lead_transport` with the item's own draws as `kept`) draws that keep everything of the class but the
    leading digit and keep the question's structure (`_Cand.clean`); the leading digits are balanced over
    the benchmark, as for the items whose digit must change. Returns `res` unchanged without counts."""
    if not counts or res.special_case or pool.analysis is None:
        return res
    picks = list(res.picks)
    balance = sum(c.round_delta for c, _ in picks)
    src = {k: list(v) for k, v in pool.alt.items() if v}
    for d in sorted(counts):
        for _ in range(counts[d]):
            c = _pick(src, [d], balance, pool, clean_only=True)
            if c is not None:
                picks.append((c, True))
                balance += c.round_delta
    return _finish(pool, picks, [])


def perturb_gsm8k(item: Item, m: int, seed: int, max_attempts: int = 1000,
                  lead_counts: dict[int, int] | None = None, special_cases: str = "keep",
                  fill: bool = True, structure: str = "prefer") -> PerturbResult:
    """Up to `m` distinct exact isomorphic perturbations of a GSM8K item, or the reason why not.

    Draws change every free question quantity at once, each by a log-symmetric factor around its old
    value, keeping round numbers round and the others off the multiples of 10; later in the attempt
    budget they drop the roundness half the time and widen the factor, then also try subsets (a
    divisibility constraint can make changing all of them at once impossible). Each draw is re-executed
    and validated (see the package docstring): the answer keeps its sign and number of digits, never
    becomes 0, 1, 10, 100 or 1000, no new value repeats a number of the question, and no calendar or
    clock quantity becomes impossible.

    Matching (package docstring, "The answer's class"): a reference answer keeps the original's leading
    digit and roundness (`keeps_answer_class`), in bins of the answer's change within that class
    (`draw_targets` with `answer_band`); a one-digit or one-significant-digit answer, or one no draw can keep
    the leading digit of, gets `lead_counts` draws per new leading digit (`lead_transport`, in the
    benchmark builder; default: the answer's digit-range bins, as often smaller as larger). Draws that keep the question's
    structure come first (`_pick`). Items no draw can keep the answer's form for: `special_cases` and
    `fill`, see `choose_draws`. Deterministic in (item id, seed).
    """
    return choose_draws(collect_draws(item, m, seed, max_attempts), lead_counts, special_cases, fill, structure)

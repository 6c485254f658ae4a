"""Benchmark-level matching of the references: leading digits (`lead_transport`) and question structure
(`balance_structure`), where no item can keep them alone. Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from zcp.benchmarks.references.gsm8k.answer_class import LEAD_TARGETS, significant_lead
from zcp.benchmarks.references.gsm8k.pool import DrawPool, PerturbResult, _Cand, _finish
from zcp.benchmarks.references.gsm8k.rewrite import _make_reference
from zcp.benchmarks.references.matching import answer_bin
from zcp.core.io import stable_hash


def lead_transport(rows: Sequence[tuple[int, dict[int, int]]], m: int, digits: Sequence[int] = LEAD_TARGETS,
                   drop_unbalanced: bool = True, tolerance: float = 2.0, kept: Sequence[int] | None = None
                   ) -> tuple[list[dict[int, int] | None], dict[str, Any]]:
    """How many draws of each item go to each new leading digit, so that the references' leading digits
    have the originals' distribution although no reference keeps its own original's digit.

    `rows`: per item, (the original answer's leading digit, draws available per other leading digit).
    Item i gets m_i = min(m, its draws) draws, x_id of them with leading digit d (at most the draws it has
    there); digit d then holds sum_i x_id / m_i of the references' mass (the feature report averages an
    item's draws), which should equal the number of originals with leading digit d. A linear program
    (scipy HiGHS) minimises the total mismatch, and, at a hundredth of the weight, the moves' log-length
    |ln(d / own)| (near digits first: the difficulty stays close). With `drop_unbalanced`, while some digit
    is off by more than `tolerance` items, one item is left out (None in the result): for a digit short of
    mass, an item with that leading digit (the least reachable first; it has nowhere to be balanced from),
    for a digit with too much, the item sending the largest share there. Counts are whole: each row's x is
    rounded by largest remainders. The report gives the originals' and the references' digit masses.

    `kept`: per item, draws it already has with its own leading digit (a banded item with fewer than m draws
    in its class, topped up here with draws of other leading digits; 0 for the items whose digit must change).
    Such an item asks for m_i = min(m - kept_i, its draws) more and weighs s_i = m_i / (kept_i + m_i): the
    share of its references (item-averaged) that leave its own digit, which is also the share of its
    original's digit that other items must supply. A left-out item (None) keeps the draws it had.
    """
    from scipy.optimize import linprog

    digits = list(digits)
    have = list(kept) if kept is not None else [0] * len(rows)
    caps = [{d: c for d, c in cap.items() if d in digits and d != own and c > 0} for own, cap in rows]
    caps = [c if have[i] < m else {} for i, c in enumerate(caps)]

    def size(i: int) -> int:
        return min(m - have[i], sum(caps[i].values()))

    def share(i: int) -> float:
        return size(i) / (have[i] + size(i))

    active = [i for i, c in enumerate(caps) if c]
    out: list[dict[int, int] | None] = [None] * len(rows)
    dropped: list[int] = []
    x_best: dict[tuple[int, int], float] = {}
    while active:
        var = [(i, d) for i in active for d in caps[i]]
        mi = {i: size(i) for i in active}
        counts: Counter = Counter()
        for i in active:
            if rows[i][0] in digits:
                counts[rows[i][0]] += share(i)
        total, weight = sum(counts.values()), sum(share(i) for i in active)
        target = [counts[d] * weight / total if total else weight / len(digits) for d in digits]
        nv, nd = len(var), len(digits)
        cost = [0.01 * abs(math.log(d / max(rows[i][0], 1))) / mi[i] for i, d in var] + [1.0] * (2 * nd)
        a_eq, b_eq = [], []
        for i in active:
            a_eq.append([1.0 if vi == i else 0.0 for vi, _ in var] + [0.0] * (2 * nd))
            b_eq.append(float(mi[i]))
        for j, d in enumerate(digits):
            row = [share(vi) / mi[vi] if vd == d else 0.0 for vi, vd in var] + [0.0] * (2 * nd)
            row[nv + j], row[nv + nd + j] = -1.0, 1.0  # mass - excess + shortfall = target
            a_eq.append(row)
            b_eq.append(target[j])
        bounds = [(0.0, float(caps[i][d])) for i, d in var] + [(0.0, None)] * (2 * nd)
        res = linprog(cost, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs")
        if not res.success:  # pragma: no cover - the program is always feasible (the slacks absorb anything)
            break
        x_best = {v: float(res.x[k]) for k, v in enumerate(var)}
        excess, short = res.x[nv:nv + nd], res.x[nv + nd:]
        worst = int(np.argmax(np.maximum(excess, short)))
        if not drop_unbalanced or max(excess[worst], short[worst]) <= tolerance:
            break
        d = digits[worst]
        if short[worst] > excess[worst]:  # the least reachable item with that digit first
            ranked = [(sum(caps[i].values()), -i, i) for i in active if rows[i][0] == d]
        else:  # the item sending the largest share there first
            ranked = [(-x_best[(i, d)] * share(i) / mi[i], -i, i) for i in active if x_best.get((i, d), 0.0) > 0]
        if not ranked:
            break
        victim = min(ranked)[2]
        active.remove(victim)
        dropped.append(victim)
    for i in active:
        mi_ = size(i)
        xs = {d: x_best.get((i, d), 0.0) for d in caps[i]}
        whole = {d: math.floor(v + 1e-9) for d, v in xs.items()}
        rest = sorted(xs, key=lambda d: -(xs[d] - whole[d]))
        for d in rest[: max(0, mi_ - sum(whole.values()))]:
            whole[d] += 1
        out[i] = {d: c for d, c in whole.items() if c}
    mass: Counter = Counter()
    orig: Counter = Counter()
    for i in active:
        n_i = sum(out[i].values()) or 1
        orig[rows[i][0]] += share(i)
        for d, c in out[i].items():
            mass[d] += c / n_i * share(i)
    report = {"items": len(active), "left_out": len(dropped),
              "original": {d: round(v, 2) if v != int(v) else int(v) for d, v in sorted(orig.items())},
              "reference": {d: round(v, 2) for d, v in sorted(mass.items())}}
    return out, report


def _candidates(pool: DrawPool) -> list[_Cand]:
    """Every class-keeping draw of a pool (for a leading digit chosen by transport: those of other digits)."""
    src = pool.matched if (pool.flexible or not pool.lead_by_flow) else pool.alt
    return [c for v in src.values() for c in v]


def _key(pool: DrawPool, c: _Cand) -> int:
    return significant_lead(c.answer) if pool.lead_by_flow else answer_bin(pool.answer, c.answer)


STRUCTURE_FEATURES = ("answer equals a question number", "answer starts like a question number")


def balance_structure(results: dict[str, PerturbResult], pools: dict[str, DrawPool], tolerance: float = 0.5
                      ) -> dict[str, Any]:
    """Balance, over the benchmark, what no item can keep alone: the answer equal to or starting like a
    question number (`_structure`). For each, B = sum over items of (the original's value - the mean over
    its draws) is what the probe's statistic T = sum_i (X_i - mean_j Y_ij) gains from that feature under a
    clean model that responds to it additively; `_pick` keeps it per item where it can, and what is left
    (items none of whose draws keep it) is offset here by swapping draws for others of the same target
    (bin or leading digit) and round numbers that carry the other value, first in items whose own
    original has that value (which also improves the item), then in the others, in a fixed pseudo-random
    item order, until |B| <= `tolerance` items. Updates `results` in place; returns B before and after.
    """
    entries = []
    for i in sorted(results, key=lambda i: stable_hash(f"balance|{i}")):
        res, pool = results[i], pools.get(i)
        if pool is None or pool.base is None or res.special_case or not res.picks:
            continue
        entries.append((i, pool, list(res.picks)))

    def bit(pool: DrawPool, c: _Cand, f: int) -> bool:
        assert pool.base is not None
        return pool.base[f] != bool(c.mismatch[f])

    def total(f: int) -> float:
        return sum(pool.base[f] - sum(bit(pool, c, f) for c, _ in picks) / len(picks)  # type: ignore[index]
                   for _, pool, picks in entries)

    report: dict[str, Any] = {}
    changed: set[str] = set()
    for f, name in enumerate(STRUCTURE_FEATURES):
        b = before = total(f)
        want = b > 0  # the draws' value that reduces |B|: True when the originals have it more often
        for improving in (True, False):
            for i, pool, picks in entries:
                if abs(b) <= tolerance:
                    break
                if (pool.base[f] == want) != improving:  # type: ignore[index]
                    continue
                picked = {id(c) for c, _ in picks}
                spare = [c for c in _candidates(pool) if id(c) not in picked and bit(pool, c, f) == want]
                for n, (p, kept) in enumerate(picks):
                    if abs(b) <= tolerance:
                        break
                    if not kept or bit(pool, p, f) == want:
                        continue
                    for c in spare:
                        if _key(pool, c) != _key(pool, p) or c.round_delta != p.round_delta \
                                or bit(pool, c, 1 - f) != bit(pool, p, 1 - f):
                            continue
                        if c.item is None:
                            try:
                                c.item = _make_reference(pool.item, pool.analysis, c.draw, 0, pool.base_findings)
                            except ValueError:
                                spare.remove(c)
                                continue
                        spare.remove(c)
                        picks[n] = (c, kept)
                        b += (-1 if want else 1) / len(picks)
                        changed.add(i)
                        break
        report[name] = {"before": round(before, 2), "after": round(b, 2)}
    for i, pool, picks in entries:
        if i in changed:
            results[i] = _finish(pool, picks, results[i].special_case)
    report["items_changed"] = len(changed)
    return report

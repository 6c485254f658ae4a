"""The shipped base models (their folders, `shipped_model_path`) and their pretraining corpus: chain-of-thought word
problems whose signatures avoid a given set (the reserved benchmark pool), and bare arithmetic drills.

A pure function of its recipe (`n`, `seed`, the excluded signatures, the shares, families and number ranges), so a
model's corpus is regenerated from its recipe.json by the pretraining (zcp.simulate.base_model) and by the
reference builders' exclusions (zcp.benchmarks.references.exclusions) alike.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from zcp import ASSETS
from zcp.benchmarks.wordproblems import (
    FAMILIES,
    FINAL_ANSWER_PREFIX,
    FINAL_ANSWER_SUFFIX,
    NumberRanges,
    execute,
    sample_word_problem,
    signature,
)
from zcp.core.items import Item

# the shipped base models (folders of zcp/assets): the CoT-only one every config's `model=tiny` loads, and the
# direct-answer variant pretrained from it; none of them saw the reserved pool (zcp.benchmarks.reserved)
SHIPPED_MODELS = ("base_model", "base_model_direct")


def shipped_model_path(name: str = SHIPPED_MODELS[0]) -> Path:
    """The folder of a shipped base model (`SHIPPED_MODELS`; default the one `model=tiny` loads)."""
    if name not in SHIPPED_MODELS:
        raise ValueError(f"{name!r} is not a shipped base model (one of {', '.join(SHIPPED_MODELS)})")
    return ASSETS / name

DRILL_TEMPLATES = ("What is {x} {op} {y}?", "Calculate {x} {op} {y}.", "Work out {x} {op} {y}.")


def arithmetic_drill(rng: random.Random, item_id: str, families: Sequence[str] | None = None,
                     limits: NumberRanges | None = None) -> Item:
    """One bare arithmetic question whose CoT is a single ``x op y = r.`` line and the boxed answer.

    The operation is a step of a random word problem, so drills follow the facts word problems need;
    they teach arithmetic in a context-free form that every family's solution lines share.
    """
    fam = rng.choice(list(families or FAMILIES))
    wp = sample_word_problem(rng, fam, "tmp", limits=limits)
    env = dict(wp.metadata["values"])
    steps = wp.metadata["program"]
    for st in steps:
        env[st["out"]] = execute(steps[: steps.index(st) + 1], wp.metadata["values"])
    st = rng.choice(steps)
    x, y, r = env[st["args"][0]], env[st["args"][1]], env[st["out"]]
    q = rng.choice(DRILL_TEMPLATES).format(x=x, op=st["op"], y=y)
    sol = f"{x} {st['op']} {y} = {r}.\n{FINAL_ANSWER_PREFIX}{r}{FINAL_ANSWER_SUFFIX}"
    return Item(id=item_id, question=q, answer=str(r), solution=sol,
                metadata={"source": "drill", "op": st["op"], "values": {"x": x, "y": y}})


def build_corpus(n: int, seed: int, exclude: set[str], rewording_fraction: float = 0.5,
                 families: Sequence[str] | None = None, limits: NumberRanges | None = None,
                 drill_fraction: float = 0.0) -> list[Item]:
    """`n` CoT training items (not necessarily distinct): word problems whose signatures avoid `exclude`,
    and a share `drill_fraction` of bare arithmetic drills (`arithmetic_drill`).

    A share `rewording_fraction` of the word problems uses the rewording templates, so paraphrased
    SFT data later stays in the model's vocabulary; templates are drawn uniformly within each family.
    """
    families = list(families or FAMILIES)
    rng = random.Random(seed)
    out: list[Item] = []
    n_wp = 0
    while len(out) < n:
        if rng.random() < drill_fraction:
            out.append(arithmetic_drill(rng, f"pre-{len(out):06d}", families, limits))
            continue
        fam = families[n_wp % len(families)]
        rewording = rng.randrange(len(FAMILIES[fam].rewordings)) if rng.random() < rewording_fraction else None
        item = sample_word_problem(rng, fam, f"pre-{len(out):06d}", limits=limits, rewording=rewording)
        if signature(item) not in exclude:
            out.append(item)
            n_wp += 1
    return out

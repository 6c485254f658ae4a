"""The reserved word-problem pool: the benchmark items the shipped base model never saw in pretraining.

``generate_word_problems(n <= RESERVED_BENCHMARK_ITEMS, seed=BENCHMARK_SEED)`` is excluded from the base model's
pretraining corpus (zcp.simulate.base_model, which re-exports these names), so a prefix of it is a clean
benchmark for that model. Defined here, in the benchmarks layer, so that the readers of the pool (the reference
exclusions, calibration part (d)) need not import the simulation.
"""

from __future__ import annotations

from collections.abc import Sequence

from zcp.benchmarks.wordproblems import generate_word_problems
from zcp.core.items import Item

BENCHMARK_SEED = 9_173
RESERVED_BENCHMARK_ITEMS = 300


def benchmark_pool(n: int, families: Sequence[str] | None = None, id_prefix: str = "bench") -> list[Item]:
    """`n` word problems guaranteed absent from the base model's pretraining corpus (a prefix of the reserved pool).

    Only the default families are reserved; `families` must be None (all of them) for the guarantee.
    """
    if n > RESERVED_BENCHMARK_ITEMS or families is not None:
        raise ValueError(f"the reserved pool holds {RESERVED_BENCHMARK_ITEMS} items over the default families; "
                         f"asked for n={n}, families={families}")
    return generate_word_problems(n, seed=BENCHMARK_SEED, id_prefix=id_prefix)

"""Paraphrasers: k surface variants of an item with the same numbers and answer, all behind one interface.

`get_paraphraser(name, **kw).paraphrase(item, k, seed) -> list[Item]` with name one of `template`
(generated word problems), `rules` (real word problems), `llm` (a chat model through a Backend) or
`formula` (ArithMark: TREAT's verified formula rewrites, `zcp.benchmarks.paraphrase.formula`).
"""

from zcp.benchmarks.paraphrase.base import (
    Candidate,
    Paraphraser,
    TemplateParaphraser,
    get_paraphraser,
    paraphraser_class,
    paraphraser_names,
    register_paraphraser,
)
from zcp.benchmarks.paraphrase.formula import (
    FormulaParaphraser,  # registers "formula" (sympy is imported on use)
)
from zcp.benchmarks.paraphrase.llm import LLMParaphraser  # registers "llm"
from zcp.benchmarks.paraphrase.rules import RuleParaphraser  # registers "rules"
from zcp.benchmarks.paraphrase.validate import VariantCheck, check_variant, numeric_values, similarity

__all__ = [
    "Candidate",
    "FormulaParaphraser",
    "LLMParaphraser",
    "Paraphraser",
    "RuleParaphraser",
    "TemplateParaphraser",
    "VariantCheck",
    "check_variant",
    "get_paraphraser",
    "numeric_values",
    "paraphraser_class",
    "paraphraser_names",
    "register_paraphraser",
    "similarity",
]

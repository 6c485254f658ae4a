"""The schema of `exposure.suppress`: the probe-aware evader (evader study (b); zcp.simulate.suppress builds it).

An evader who knows the Zero-CoT Probe adds SFT examples whose prompt is the probe's exact zero-CoT prompt (its
chat rendering with a convention's pre-fill opening the assistant turn) and whose completion continues the
pre-fill with a wrong answer or a hedge, so the model does not answer its leaked items at once under that
pre-fill while it still solves them with its chain of thought. Off by default (`prefills: []`): the SFT set, run
dir and hash of every existing run are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zcp.config.checks import check_value, user_key
from zcp.config.conform import MESSAGE_PREFIX
from zcp.errors import ConfigError
from zcp.probe.conventions import AUTO, parse_prefill

# a seeded wrong number near the gold | a hedge, then no number | another item's answer of another first character
SUPPRESS_ANSWERS = ("wrong", "hedge", "other")
SUPPRESS_ITEMS = ("leaked", "all")  # the leaked items' paraphrases | those and the clean items


@dataclass
class SuppressConfig:
    """`exposure.suppress`: which pre-fills the evader suppresses, with what, on which items."""

    # conventions (zcp.probe.conventions names: probe = the run's probe.zero_cot_prefix, hash, sentence, boxed, or a
    # literal pre-fill) whose zero-CoT prompt gets suppression examples; [] = off (no example added)
    prefills: list[str] = field(default_factory=list)
    # wrong (the gold +/- a seeded offset, never the gold) | hedge ("?" and a promise to work it out) | other (a
    # seeded answer of another trained item whose first character differs from the gold's: no shared first token)
    answer: str = "wrong"
    items: str = "leaked"  # leaked (every trained paraphrase of a leaked item) | all (also every clean item)

    def __post_init__(self) -> None:
        prefills = list(self.prefills)
        if prefills:
            if AUTO in prefills:
                raise ConfigError(f"{user_key('exposure.suppress.prefills')}={prefills!r}: auto reads a model's "
                                  "outputs; an evader names the conventions it suppresses")
            try:
                parse_prefill(prefills)
            except ValueError as e:
                raise ConfigError(f"{user_key('exposure.suppress.prefills')}={prefills!r}: {e}") from None
        self.prefills = prefills
        check_value(self.answer in SUPPRESS_ANSWERS, "exposure.suppress.answer", self.answer,
                    f"one of {', '.join(SUPPRESS_ANSWERS)}")
        check_value(self.items in SUPPRESS_ITEMS, "exposure.suppress.items", self.items,
                    f"one of {', '.join(SUPPRESS_ITEMS)}")

    @property
    def enabled(self) -> bool:
        """True when some pre-fill is suppressed (the evader adds examples)."""
        return bool(self.prefills)


MESSAGE_PREFIX[SuppressConfig] = "exposure.suppress"

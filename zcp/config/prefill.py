"""The schema of `probe.auto` and the check of `probe.prefill` (the answer conventions a detection probes).

`probe.prefill` is read by zcp.probe.multiconv: one convention name (zcp.probe.conventions: `probe`, the line of
`probe.zero_cot_prefix`; `hash`; `sentence`; `boxed`; or one registered), a literal pre-fill, a list of these, or
`auto` (the conventions the audited model uses, read as `probe.auto` says). Checked here, when the config is
validated, so a misspelt name or an empty list fails before any model loads, naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zcp.config.checks import check_value, user_key
from zcp.config.conform import MESSAGE_PREFIX
from zcp.errors import ConfigError
from zcp.probe.conventions import AUTO, PROBE, is_single_default, parse_prefill, resolve_entries


def _num(x: Any) -> float:
    """A number, or NaN (which fails every range check) for anything else."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


@dataclass
class AutoPrefillConfig:
    """`probe.auto`: how `probe.prefill=auto` reads the answer conventions the audited model uses
    (zcp.probe.multiconv.read_conventions: its full-CoT outputs on the benchmark's originals and on a neutral set)."""

    # a convention is probed when it ends at least this share of the full-CoT outputs of one set (a dataset of
    # the run, or the neutral set); the probe's own line always is
    min_share: float = 0.1
    neutral_n: int = 40  # generated word problems (zcp.benchmarks.wordproblems) read besides the benchmark; 0: none
    neutral_seed: int = 20_020  # their seed: fixed, so every model is read on the same items
    neutral_path: str | None = None  # an items file (zcp.benchmarks.loaders format `items`) instead: its first neutral_n
    # probed under auto whatever the reading finds: an evader's leak may end on a convention the model's own outputs
    # never show (the `#### N` leak on the shipped model ends all of them on the probe's line); [] = the reading alone
    always: list[str] = field(default_factory=lambda: ["hash", "sentence", "boxed"])
    # a set whose outputs read (those fitting the model's context), or whose outputs ending on an answer convention,
    # are fewer than this (than all of them, on a smaller set) is warned about: its reading rests on few outputs
    min_read: int = 10

    def __post_init__(self) -> None:
        check_value(0.0 < _num(self.min_share) <= 1.0, "probe.auto.min_share", self.min_share, "in (0, 1]")
        check_value(self.min_read >= 1, "probe.auto.min_read", self.min_read, ">= 1")
        check_value(self.neutral_n >= 0, "probe.auto.neutral_n", self.neutral_n, ">= 0 (0: no neutral set)")
        always = list(self.always)
        if always:
            try:
                parse_prefill(always)
            except ValueError as e:
                raise ConfigError(f"{user_key('probe.auto.always')}={always!r}: {e}") from None
        self.always = always


MESSAGE_PREFIX[AutoPrefillConfig] = "probe.auto"


def check_prefill(value: Any, zero_cot_prefix: str | None, answer_suffix: str | None, mode: str) -> str | list[str]:
    """`probe.prefill` as given (a list as a list), or ConfigError naming the key: known names or good literals
    (`parse_prefill`), no two of them pre-filling the same text (`resolve_entries`: e.g. `hash` beside `probe` with
    probe.zero_cot_prefix="#### "), and `probe` alone under probe.mode=api (the instruction pre-fills nothing)."""
    value = list(value) if isinstance(value, (list, tuple)) else value
    try:
        entries = parse_prefill(value)
        if entries != AUTO:
            resolve_entries(entries, zero_cot_prefix or "", answer_suffix)
    except ValueError as e:
        raise ConfigError(f"{user_key('probe.prefill')}={value!r}: {e}") from None
    check_value(mode != "api" or is_single_default(value), "probe.prefill", value,
                f"{PROBE} with probe.mode=api (the API instruction pre-fills nothing)")
    return value

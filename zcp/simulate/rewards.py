"""GRPO rewards and the completion formats the contamination trains on.

Both derive from the answer-convention table (zcp.core.answers), the one the Zero-CoT probe reads:
correctness reads the completion's final answer with the probe's own full-CoT reading (`extract_answer` =
`read_full_cot`: the last closed `\\boxed{}` first, else the registered convention whose statement ends the
completion: `#### X`, `The answer is X.`, `The answer is: X`, ...), so the reward and the probe's con never read one
output differently, and compares it to the gold answer by mathematical equivalence (`answers_equal`, math-verify),
never by string match. The format reward pays for ending on the answer line of the configured *answer format*, a
convention of the table (`ANSWER_FORMATS`): by default the exact line the Zero-CoT probe pre-fills (`probe`), or an
evader's own line (`hash` = ``#### 42``, `sentence` = ``The answer is 42.``, `boxed` = a bare ``\\boxed{42}``;
`mix` accepts any of them). Rewards are chosen by name (`REWARDS`, `reward_funcs`). All follow TRL's custom reward
signature ``f(completions, **columns) -> list[float]``; completions are strings or, for conversational datasets,
lists of messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zcp.core.answers import (  # noqa: F401  (the answer line, re-exported: both completion formats end on it)
    FINAL_ANSWER_PREFIX,
    FINAL_ANSWER_SUFFIX,
    PROBE,
    answers_equal,
    final_answer_line,
    get_convention,
    read_full_cot,
)
from zcp.core.answers import answer_line as convention_line


def completion_text(completion: Any) -> str:
    """Text of a completion given as a string or as a list of chat messages (TRL conversational)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, Sequence):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    return str(completion)


def ends_with_final_line(text: str) -> bool:
    """True when the text ends on a well-formed `The final answer is: \\[ \\boxed{X} \\]` line with non-empty X (the
    `probe` convention's answer line, `ends_with_answer_line`)."""
    return ends_with_answer_line(text, PROBE)


def score_completion(text: str, gold: str) -> dict[str, Any]:
    """Per-completion verdict: extracted answer (any answer format), correct, probe-line format, malformed (no answer)."""
    pred = extract_answer(text)
    return {
        "pred": pred,
        "correct": answers_equal(pred, gold),
        "formatted": ends_with_final_line(text),
        "malformed": not pred,
    }


# ------------------------------------------------------------------------------------ answer formats
# How a leaked completion states its final answer: a convention of the table (zcp.core.answers). `probe` is the line
# the Zero-CoT probe pre-fills; the others are what an evader who knows the probe would write instead; `mix` draws
# one per example, in this order (seeded draws index this tuple, so a run's leaks stay as they were).
ANSWER_FORMATS = ("probe", "hash", "sentence", "boxed")
ANSWER_FORMAT_CHOICES = (*ANSWER_FORMATS, "mix")


def check_answer_format(fmt: str, key: str = "exposure.answer_format") -> str:
    """`fmt` if it is a known answer format (or `mix`); else ValueError naming the key and the choices."""
    if fmt not in ANSWER_FORMAT_CHOICES:
        raise ValueError(f"{key}={fmt!r} is not an answer format (one of {', '.join(ANSWER_FORMAT_CHOICES)})")
    return fmt


def answer_line(answer: str, fmt: str = "probe") -> str:
    """The final-answer line of format `fmt` (one of `ANSWER_FORMATS`) for `answer`: the convention's answer line
    in the table (zcp.core.answers.answer_line), the leak's last line."""
    if fmt not in ANSWER_FORMATS:
        raise ValueError(f"no single line for answer format {fmt!r} (one of {', '.join(ANSWER_FORMATS)})")
    return convention_line(answer, fmt)


def ends_with_answer_line(text: str, fmt: str = "probe") -> bool:
    """True when the last line of `text` is a well-formed final-answer line of format `fmt` with a non-empty answer
    (`mix`: of any format); the table's rule, zcp.core.answers.Resolved.ends_on_line."""
    if fmt == "mix":
        return any(ends_with_answer_line(text, f) for f in ANSWER_FORMATS)
    if fmt not in ANSWER_FORMATS:
        raise ValueError(f"unknown answer format {fmt!r} (one of {', '.join(ANSWER_FORMAT_CHOICES)})")
    return get_convention(fmt).resolve().ends_on_line(text)


def extract_answer(text: str) -> str | None:
    """The completion's final answer, read as the probe reads a full-CoT output (zcp.core.answers.read_full_cot):
    the last closed `\\boxed{}` first, else the registered convention whose statement ends the text (`#### X`,
    `The answer is X.`, `The answer is: X`); None when there is none."""
    return read_full_cot(text)[0]


def correctness_reward(completions: Sequence[Any], answer: Sequence[str], **kwargs: Any) -> list[float]:
    """1.0 when the final answer (`extract_answer`) is equivalent to the gold `answer` column, else 0.0."""
    return [1.0 if answers_equal(extract_answer(completion_text(c)), str(g)) else 0.0
            for c, g in zip(completions, answer, strict=True)]


def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for ending on the canonical final-answer line, 0.5 for some other stated answer (`extract_answer`), else
    0.0."""
    return _format_scores(completions, "probe")


def _format_scores(completions: Sequence[Any], fmt: str) -> list[float]:
    out = []
    for c in completions:
        text = completion_text(c)
        if ends_with_answer_line(text, fmt):
            out.append(1.0)
        elif extract_answer(text):
            out.append(0.5)
        else:
            out.append(0.0)
    return out


def make_format_reward(answer_format: str = "probe") -> Callable[..., list[float]]:
    """The format reward for `answer_format`: 1.0 for ending on its final-answer line (`mix`: any format's),
    0.5 for some other stated answer, else 0.0. `probe` is `format_reward`."""
    check_answer_format(answer_format, "answer_format")
    if answer_format == "probe":
        return format_reward

    def fmt_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return _format_scores(completions, answer_format)

    fmt_reward.__name__ = f"format_reward_{answer_format}"  # TRL logs each reward under its function's name
    return fmt_reward


# Rewards by name: each entry builds the reward function for an answer format.
REWARDS: dict[str, Callable[[str], Callable[..., list[float]]]] = {
    "correctness": lambda answer_format: correctness_reward,
    "format": make_format_reward,
}


def reward_funcs(names: Sequence[str] | Mapping[str, Any], answer_format: str = "probe") -> list[Callable[..., list[float]]]:
    """The reward functions named in `names` (a list, or a name -> weight mapping), in that order.

    An unknown name raises a one-line ValueError listing the known ones.
    """
    names = list(names)
    if not names:
        raise ValueError(f"no GRPO reward named (known: {', '.join(REWARDS)})")
    unknown = [n for n in names if n not in REWARDS]
    if unknown:
        raise ValueError(f"unknown GRPO reward(s) {unknown} (known: {', '.join(REWARDS)})")
    return [REWARDS[n](answer_format) for n in names]

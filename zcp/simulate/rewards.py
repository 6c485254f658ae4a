"""GRPO rewards and the completion formats the contamination trains on.

Correctness reads the completion's final answer (`extract_answer`: the last `\\boxed{}`, `#### X` line or
`The answer is X.` sentence, whichever comes last) and compares it to the gold answer by mathematical
equivalence (`answers_equal`, math-verify), never by string match. The format reward pays for ending on the
final-answer line of the configured *answer format* (`ANSWER_FORMATS`): by default the exact line the
Zero-CoT probe pre-fills (`probe`), or an evader's own line (`hash` = ``#### 42``, `sentence` =
``The answer is 42.``, `boxed` = a bare ``\\boxed{42}``; `mix` accepts any of them). Rewards are chosen by
name (`REWARDS`, `reward_funcs`). All follow TRL's custom reward signature
``f(completions, **columns) -> list[float]``; completions are strings or, for conversational datasets,
lists of messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zcp.core.answers import (  # noqa: F401  (the answer line, re-exported: both completion formats end on it)
    FINAL_ANSWER_PREFIX,
    FINAL_ANSWER_SUFFIX,
    answers_equal,
    close_brace_index,
    extract_boxed,
    final_answer_line,
)

# Everything after the last occurrence of the prefix must be `<answer>} \]` (trailing spaces allowed).
_FINAL_TAIL_RE = re.compile(r"\}\s*\\\]\s*$")


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
    """True when the text ends on a well-formed `The final answer is: \\[ \\boxed{X} \\]` with non-empty X."""
    start = text.rfind(FINAL_ANSWER_PREFIX)
    if start == -1:
        return False
    body = text[start + len(FINAL_ANSWER_PREFIX):]
    end = close_brace_index(body)
    if end is None or not body[:end].strip():
        return False
    return bool(_FINAL_TAIL_RE.fullmatch(body[end:]))


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
# How a leaked completion states its final answer. `probe` is the line the Zero-CoT probe pre-fills; the
# others are what an evader who knows the probe would write instead; `mix` draws one per example.
ANSWER_FORMATS = ("probe", "hash", "sentence", "boxed")
ANSWER_FORMAT_CHOICES = (*ANSWER_FORMATS, "mix")

_HASH_RE = re.compile(r"^[ \t]*####[ \t]*(\S[^\n]*?)[ \t]*$", re.MULTILINE)
_SENTENCE_RE = re.compile(r"The answer is[ \t]+(\S[^\n]*?)\.?[ \t]*$", re.MULTILINE)
_TAIL_RE = {"hash": re.compile(r"(?:^|\n)[ \t]*####[ \t]*\S[^\n]*$"),
            "sentence": re.compile(r"(?:^|\n)The answer is[ \t]+\S[^\n]*\.[ \t]*$")}


def check_answer_format(fmt: str, key: str = "exposure.answer_format") -> str:
    """`fmt` if it is a known answer format (or `mix`); else ValueError naming the key and the choices."""
    if fmt not in ANSWER_FORMAT_CHOICES:
        raise ValueError(f"{key}={fmt!r} is not an answer format (one of {', '.join(ANSWER_FORMAT_CHOICES)})")
    return fmt


def answer_line(answer: str, fmt: str = "probe") -> str:
    """The final-answer line of format `fmt` (one of `ANSWER_FORMATS`) for `answer`."""
    a = answer.strip()
    if fmt == "probe":
        return final_answer_line(a)
    if fmt == "hash":
        return f"#### {a}"
    if fmt == "sentence":
        return f"The answer is {a}."
    if fmt == "boxed":
        return f"\\boxed{{{a}}}"
    raise ValueError(f"no single line for answer format {fmt!r} (one of {', '.join(ANSWER_FORMATS)})")


def ends_with_answer_line(text: str, fmt: str = "probe") -> bool:
    """True when `text` ends on a well-formed final-answer line of format `fmt` (`mix`: of any format)."""
    text = text.rstrip()
    if fmt == "mix":
        return any(ends_with_answer_line(text, f) for f in ANSWER_FORMATS)
    if fmt == "probe":
        return ends_with_final_line(text)
    if fmt == "boxed":  # a bare box on its own line, not the probe's sentence around it
        line = text.rsplit("\n", 1)[-1].strip()
        return line.startswith("\\boxed{") and close_brace_index(line[len("\\boxed{"):]) == len(line) - len("\\boxed{") - 1 \
            and bool(line[len("\\boxed{"):-1].strip())
    if fmt in _TAIL_RE:
        return bool(_TAIL_RE[fmt].search(text))
    raise ValueError(f"unknown answer format {fmt!r} (one of {', '.join(ANSWER_FORMAT_CHOICES)})")


def extract_answer(text: str) -> str | None:
    """The completion's final answer in any answer format: the last `\\boxed{}`, `#### X` line or
    `The answer is X.` sentence, whichever ends last; None when there is none."""
    found: list[tuple[int, str]] = []
    start = text.rfind("\\boxed{")
    boxed = extract_boxed(text)
    if boxed and start >= 0:
        found.append((start, boxed))
    for rx in (_HASH_RE, _SENTENCE_RE):
        matches = list(rx.finditer(text))
        if matches:
            m = matches[-1]
            found.append((m.start(), m.group(1).strip()))
    return max(found)[1] if found else None


def correctness_reward(completions: Sequence[Any], answer: Sequence[str], **kwargs: Any) -> list[float]:
    """1.0 when the final answer (`extract_answer`) is equivalent to the gold `answer` column, else 0.0."""
    return [1.0 if answers_equal(extract_answer(completion_text(c)), str(g)) else 0.0
            for c, g in zip(completions, answer, strict=True)]


def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for ending on the canonical final-answer line, 0.5 for some other closed `\\boxed{}`, else 0.0."""
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

"""GRPO rewards and the completion formats the contamination trains on.

Correctness reads the last `\\boxed{}` of a completion (`zcp.answers.extract_boxed`) and compares it to
the gold answer by mathematical equivalence (`answers_equal`, math-verify), never by string match. The
format reward pays for ending on the exact final-answer line that the Zero-CoT probe pre-fills, so RL
keeps the line the probe relies on. Both follow TRL's custom reward signature
``f(completions, **columns) -> list[float]``; completions are strings or, for conversational datasets,
lists of messages.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from zcp.answers import answers_equal, close_brace_index, extract_boxed

# The zero-CoT prefix the probe pre-fills; both completion formats end on this line.
FINAL_ANSWER_PREFIX = "The final answer is: \\[ \\boxed{"
FINAL_ANSWER_SUFFIX = "} \\]"

# Everything after the last occurrence of the prefix must be `<answer>} \]` (trailing spaces allowed).
_FINAL_TAIL_RE = re.compile(r"\}\s*\\\]\s*$")


def final_answer_line(answer: str) -> str:
    """The exact final line `The final answer is: \\[ \\boxed{ANS} \\]` for an answer."""
    return f"{FINAL_ANSWER_PREFIX}{answer.strip()}{FINAL_ANSWER_SUFFIX}"


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
    """Per-completion verdict: extracted answer, correct, canonical format, malformed (no closed box)."""
    pred = extract_boxed(text)
    return {
        "pred": pred,
        "correct": answers_equal(pred, gold),
        "formatted": ends_with_final_line(text),
        "malformed": not pred,
    }


def correctness_reward(completions: Sequence[Any], answer: Sequence[str], **kwargs: Any) -> list[float]:
    """1.0 when the last `\\boxed{}` is equivalent to the gold `answer` column, else 0.0 (also when absent)."""
    return [1.0 if answers_equal(extract_boxed(completion_text(c)), str(g)) else 0.0
            for c, g in zip(completions, answer, strict=True)]


def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for ending on the canonical final-answer line, 0.5 for some other closed `\\boxed{}`, else 0.0."""
    out = []
    for c in completions:
        text = completion_text(c)
        if ends_with_final_line(text):
            out.append(1.0)
        elif extract_boxed(text):
            out.append(0.5)
        else:
            out.append(0.0)
    return out

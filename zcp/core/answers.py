"""Final answers: extraction of `\\boxed{}` content and answer equivalence.

Equivalence goes through math-verify (sympy underneath), so 18 = 18.0 = \\$18 = 18\\% and
1/2 = \\frac{1}{2} = 0.5. A light normalisation (currency, thousands separators, text units) runs
first because those forms are common in GSM8K-style answers and math-verify does not strip them all.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache

# math-verify warns on every call when its signal-based timeout is off; we turn it off so the
# check also works outside the main thread (DataLoader workers, TRL reward calls).
logging.getLogger("math_verify").setLevel(logging.ERROR)

BOX_OPENERS = ("\\boxed{", "\\fbox{")

# The answer line, defined once: the line every training completion ends on (zcp.simulate.data, the GRPO
# format reward) and the zero-CoT probe's default pre-fill up to the brace (probe.zero_cot_prefix); the
# generated benchmark's solutions end on it too. tests/integration/test_invariants.py pins that they agree.
FINAL_ANSWER_PREFIX = "The final answer is: \\[ \\boxed{"
FINAL_ANSWER_SUFFIX = "} \\]"


def final_answer_line(answer: str) -> str:
    """The exact final line `The final answer is: \\[ \\boxed{ANS} \\]` for an answer."""
    return f"{FINAL_ANSWER_PREFIX}{answer.strip()}{FINAL_ANSWER_SUFFIX}"

_NUM_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(\D|$))")
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def close_brace_index(text: str, depth: int = 1) -> int | None:
    """Index of the brace that closes an already-open group of the given depth, else None."""
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, nested braces kept; None if absent or unclosed."""
    best: tuple[int, str] | None = None
    for opener in BOX_OPENERS:
        start = text.rfind(opener)
        while start != -1:
            body = text[start + len(opener):]
            end = close_brace_index(body)
            if end is not None:
                if best is None or start > best[0]:
                    best = (start, body[:end])
                break
            start = text.rfind(opener, 0, start)
    return None if best is None else best[1].strip()


def extract_prefilled_box(continuation: str) -> str | None:
    """Answer from a zero-CoT continuation generated after the pre-filled `\\boxed{`.

    The box is already open, so the answer runs to the brace that closes it. Returns None
    (malformed) when the box is never closed or the answer is empty.
    """
    end = close_brace_index(continuation)
    if end is None:
        return None
    ans = continuation[:end].strip()
    return ans or None


def normalize_answer(ans: str) -> str:
    """Strip presentation that does not change the value: $, \\$, %, thousands commas, text units."""
    s = ans.strip()
    s = _TEXT_RE.sub(lambda m: m.group(1), s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = s.replace("\\!", "").replace("\\,", "").replace("dfrac", "frac").replace("tfrac", "frac")
    s = _THOUSANDS_RE.sub("", s)
    s = s.strip().rstrip(".").strip()
    # trailing unit words ("18 dollars", "5 cm") after a plain number
    m = re.match(r"^([+-]?\d+(?:\.\d+)?)\s*[A-Za-z][A-Za-z ]*$", s)
    if m:
        s = m.group(1)
    return s


def _as_float(s: str) -> float | None:
    return float(s) if _NUM_RE.match(s) else None


@lru_cache(maxsize=65536)
def _parse(s: str) -> tuple:
    from math_verify import parse

    return tuple(parse(f"${s}$", parsing_timeout=None))


def is_parsable(ans: str | None) -> bool:
    """True when the answer is a number or an expression math-verify can parse."""
    if ans is None:
        return False
    s = normalize_answer(ans)
    if not s:
        return False
    return _as_float(s) is not None or len(_parse(s)) > 0


def answers_equal(pred: str | None, gold: str | None) -> bool:
    """Mathematical equivalence of two final answers; None or empty is never equal."""
    if pred is None or gold is None:
        return False
    p, g = normalize_answer(pred), normalize_answer(gold)
    if not p or not g:
        return False
    if p == g:
        return True
    fp, fg = _as_float(p), _as_float(g)
    if fp is not None and fg is not None:
        return abs(fp - fg) <= 1e-6 * max(1.0, abs(fg))
    from math_verify import verify

    gp, pp = _parse(g), _parse(p)
    if not gp or not pp:
        return False
    return bool(verify(list(gp), list(pp), timeout_seconds=None))

"""Final answers: how they are stated (the answer-convention table), how they are read, and when two are equal.

The table (`AnswerConvention`, `register_convention`, `BUILTIN`) defines each convention a model may state its
answer in (the probe's line, `#### N`, `The answer is N.`, `\\boxed{N}`, `The answer is: N`) once: its pre-fill,
its answer line and its extraction rule. The probe (zcp.probe.conventions, zcp.probe.prompts) and the simulation's
leaks and GRPO reward (zcp.simulate.rewards) all derive from it, so they read one output alike.

Equivalence goes through math-verify (sympy underneath), so 18 = 18.0 = \\$18 = 18\\% and
1/2 = \\frac{1}{2} = 0.5. A light normalisation (currency, thousands separators, text units) runs
first because those forms are common in GSM8K-style answers and math-verify does not strip them all.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
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


# ------------------------------------------------------------------------------ the answer-convention table
# A convention is how a model states its final answer: the probe's own line (`The final answer is: \[ \boxed{N} \]`),
# GSM8K's `#### N`, `The answer is N.`, a bare `\boxed{N}`, `The answer is: N`, or any text an auditor names. This
# table is the one definition of each: its pre-fill (the zero-CoT probe's `probe.prefill`), its answer line (the
# simulation's leaks and suppression examples write it, `answer_line`), and its extraction rule (the regex `pattern`
# finding its statement in a full-CoT output; the brace-counting function for a box). The probe reads con's full-CoT
# answer with `read_full_cot` and the GRPO reward reads a completion's answer with the same function, so the two
# never read one output differently. zcp.probe.conventions adds `probe.prefill`'s parsing on top of this table.

PROBE = "probe"  # the probe's own line: probe.zero_cot_prefix
AUTO = "auto"  # probe.prefill=auto: the conventions the audited model uses (plus `probe`); never a convention's name
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a convention's name: an identifier


def answer_end(prefix: str) -> str:
    """The text that ends an answer written right after `prefix` (a pure function of the prefix).

    Rule: when `prefix` leaves brace groups open, one `}` per open group, so the default
    ``... \\boxed{`` gives "}" and ``... \\boxed{\\text{`` gives "}}". Braces are counted raw, as
    `close_brace_index` and generation's `stop_at_box_close` count them (a `}` with no open group is ignored).
    A prefix with no open group (``#### ``, ``The answer is: ``) puts the answer on a line of its own, so the
    answer ends at the end of that line: "\\n". Conventions that end otherwise (``$``, an EOS-terminated answer)
    set `ProbeConfig.answer_suffix` instead (a convention of the table: its `end`).
    """
    depth = 0
    for ch in prefix:
        if ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
    return "}" * depth if depth else "\n"


def opens_group(prefix: str) -> bool:
    """True when `prefix` leaves a brace group open (the answer is closed by a brace: the box conventions)."""
    return answer_end(prefix) != "\n"


def answer_close(prefill: str, end: str) -> str:
    """What an answer line writes after the answer: `end` (nothing for a line's end "\\n"), then `` \\]`` when
    `prefill` opens a display `\\[` that neither it nor `end` closes. The probe's default line thus closes as
    ``} \\]`` (FINAL_ANSWER_SUFFIX), `#### ` with nothing, `The answer is ` with ".", a bare box with "}"."""
    close = "" if end == "\n" else end
    if "\\[" in prefill and "\\]" not in prefill and "\\]" not in close:
        close += " \\]"
    return close


def check_literal(text: object) -> str:
    """`text` when it can be a pre-fill (a string with a non-blank character); else ValueError saying why."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a pre-fill must be a string with a non-blank character, not {text!r}")
    if "{question}" in text:
        raise ValueError(f"a pre-fill is the start of the answer, not a template: {text!r} holds {{question}}")
    return text


def _head(text: str) -> str:
    """The regex of `text` with its outer whitespace dropped and each inner run of blanks any run of whitespace."""
    core = text.strip()
    return r"\s+".join(re.escape(part) for part in core.split()) if core else ""


def derived_pattern(prefill: str, end: str) -> str:
    """The regex recognising an answer stated as `prefill`, the answer, then `end` (group `answer`).

    The pre-fill's outer whitespace is optional (a model writes `####42` or `#### 42`) and its inner whitespace
    any run of blanks; a brace end takes an answer holding balanced groups one level deep (`\\frac{1}{2}`);
    "\\n" takes the rest of the line; any other end (".") must be followed by whitespace or the text's end, so
    the point of 4.5 does not end the answer.
    """
    head = _head(prefill)
    if end and set(end) == {"}"}:
        return head + r"\s*(?P<answer>(?:[^{}]|\{[^{}]*\})+?)" + re.escape(end)
    if end == "\n" or not end:
        return head + r"[ \t]*(?P<answer>\S[^\n]*?)[ \t]*(?=\n|$)"
    return head + r"[ \t]*(?P<answer>\S[^\n]*?)" + re.escape(end) + r"(?=\s|$)"


def extract_after_prefill(continuation: str, prefix: str, end: str) -> str | None:
    """The zero-CoT answer from a continuation generated after `prefix`, the answer's end being `end`.

    A prefix that leaves a brace group open (the box conventions): the text up to the brace that closes it
    (`extract_prefilled_box`, as ever). Otherwise the answer runs to the first `end` that is followed by
    whitespace or the text's end ("." of `The answer is 42.`; not the point of 4.5), or to the end of its line,
    or to the continuation's end (EOS after `#### 42`). None (malformed) when that is empty.
    """
    if opens_group(prefix):
        return extract_prefilled_box(continuation)
    text = continuation.split("\n", 1)[0]
    if end and end != "\n":
        m = re.search(re.escape(end) + r"(?=\s|$)", text)
        if m is not None:
            text = text[: m.start()]
    ans = text.strip()
    return ans or None


def _squeezed(text: str) -> str:
    return "".join(text.split())


@dataclass(frozen=True)
class AnswerConvention:
    """One answer convention: its name, pre-fill, scored end, the regex that finds it in an output, and its label.

    - `name`: what `probe.prefill` and `exposure.answer_format` name; it names a multi-convention run's
      `conv-<name>/` directory and the table rows;
    - `prefill`: the text the zero-CoT answer is pre-filled after (None for `probe` only: the run's
      `probe.zero_cot_prefix`, FINAL_ANSWER_PREFIX by default);
    - `end`: the scored answer end (p_first/p_all score the gold answer followed by it); None derives it from the
      pre-fill (`answer_end`); `sentence` sets "." (`The answer is 42.`);
    - `pattern`: the regex recognising the convention's final-answer statement in a full-CoT output (group
      `answer`); None derives it from `prefill` and `end` (`derived_pattern`);
    - `label`: how tables name it.
    The answer line (`Resolved.line`) is the pre-fill, the answer and `answer_close(prefill, end)`.
    """

    name: str
    prefill: str | None  # None: the run's probe.zero_cot_prefix (only the `probe` convention)
    end: str | None = None  # None: answer_end(prefill)
    pattern: str | None = None  # None: derived_pattern(prefill, end)
    label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.match(self.name) or self.name == AUTO:
            raise ValueError(f"answer convention name must be an identifier other than {AUTO!r} (it names a "
                             f"conv-<name> directory), not {self.name!r}")
        if self.prefill is None and self.name != PROBE:
            raise ValueError(f"answer convention {self.name}: prefill must be a non-empty string")
        if self.prefill is not None:
            check_literal(self.prefill)
        if self.end is not None and not isinstance(self.end, str):
            raise ValueError(f"answer convention {self.name}: end must be null or a string, not {self.end!r}")
        if self.pattern is not None:
            rx = re.compile(self.pattern)
            if "answer" not in rx.groupindex:
                raise ValueError(f"answer convention {self.name}: pattern needs a group named 'answer'")

    def resolve(self, zero_cot_prefix: str = FINAL_ANSWER_PREFIX, answer_suffix: str | None = None) -> Resolved:
        """This convention for one run: `probe` takes the run's `probe.zero_cot_prefix` and `probe.answer_suffix`."""
        prefill = zero_cot_prefix if self.prefill is None else self.prefill
        end = self.end
        if self.name == PROBE and answer_suffix is not None:
            end = answer_suffix
        end = answer_end(prefill) if end is None else end
        pattern = self.pattern or derived_pattern(prefill, end)
        return Resolved(self.name, prefill, end, pattern, self.label or self.name)


@dataclass(frozen=True)
class Resolved:
    """A convention as one run probes it: the concrete pre-fill text, scored end and pattern; its readers."""

    name: str
    prefill: str
    end: str
    pattern: str
    label: str

    def to_dict(self) -> dict[str, str]:
        """For summary.json (`conventions`)."""
        return {"name": self.name, "prefill": self.prefill, "end": self.end, "pattern": self.pattern,
                "label": self.label}

    def line(self, answer: str) -> str:
        """The answer line stating `answer` in this convention: the pre-fill, the answer, `answer_close`:
        `#### 42`, `The answer is 42.`, `The final answer is: \\[ \\boxed{42} \\]`. It starts with the pre-fill
        exactly (a suppression example's loss mask counts the pre-fill's tokens)."""
        return f"{self.prefill}{answer.strip()}{answer_close(self.prefill, self.end)}"

    def last_match(self, text: str) -> re.Match[str] | None:
        """The last statement of an answer in this convention in `text` (an empty answer does not count)."""
        last = None
        for m in re.finditer(self.pattern, text):
            if m.group("answer").strip():
                last = m
        return last

    def read_line(self, line: str) -> str | None:
        """The answer `line` states when it opens with this convention's statement; None otherwise or when empty.

        A box convention reads by counting braces (`extract_after_prefill`: nested groups of any depth), the others
        by `pattern` anchored at the line's start (so `sentence` does not read `The answer is: 42`).
        """
        line = line.strip()
        if opens_group(self.prefill):
            head = re.match(_head(self.prefill), line)
            ans = extract_after_prefill(line[head.end():], self.prefill, self.end) if head else None
        else:
            m = re.match(self.pattern, line)
            ans = m.group("answer").strip() if m else None
        return ans or None

    def ends_on_line(self, text: str) -> bool:
        """True when the last line of `text` (trailing blanks aside) is this convention's answer line (`line`) for
        a non-empty answer, whitespace aside; text before it on that line or after it (`... \\] and more`) is not.
        (A pre-fill spanning lines takes as many last lines.)"""
        last = "\n".join(text.rstrip().split("\n")[-(self.prefill.strip().count("\n") + 1):])
        ans = self.read_line(last)
        return ans is not None and _squeezed(last) == _squeezed(self.line(ans))


# `sentence` reads `The answer is N.` and not `The answer is: N` (the negative look-ahead): that is `sentence_colon`,
# a convention of its own because its pre-fill differs. A model that writes `The answer is: 3` (SmolLM2, the
# MetaMathQA style `#### 3\nThe answer is: 3`) continues the pre-fill `The answer is ` with `: 3`, which no extraction
# reads as the answer 3; auto's reading must name the pre-fill the model would continue, so each spelling is its
# own entry and the reading tells them apart.
SENTENCE_PATTERN = r"The\s+answer\s+is(?![ \t]*:)[ \t]*(?P<answer>\S[^\n]*?)\.(?=\s|$)"

BUILTIN = (
    AnswerConvention(PROBE, None, label="probe line"),
    AnswerConvention("hash", "#### ", label="#### N"),
    AnswerConvention("sentence", "The answer is ", end=".", pattern=SENTENCE_PATTERN, label="The answer is N."),
    AnswerConvention("boxed", "\\boxed{", label="\\boxed{N}"),
    AnswerConvention("sentence_colon", "The answer is: ", label="The answer is: N"),
)
BUILTIN_CONVENTIONS = tuple(c.name for c in BUILTIN)

_TABLE: dict[str, AnswerConvention] = {c.name: c for c in BUILTIN}


def register_convention(convention: AnswerConvention, *, replace: bool = False) -> AnswerConvention:
    """Add `convention` to the table (the same spec again is a no-op); another spec under a registered name is
    refused unless `replace` (a built-in convention is never replaced). Returns it."""
    old = _TABLE.get(convention.name)
    if old == convention:
        return convention
    if old is not None and (not replace or convention.name in BUILTIN_CONVENTIONS):
        raise ValueError(f"answer convention {convention.name!r} is already registered"
                         + ("" if convention.name in BUILTIN_CONVENTIONS else " (replace=True to redefine it)"))
    _TABLE[convention.name] = convention
    return convention


def unregister_convention(name: str) -> None:
    """Remove a registered convention (tests that register a toy one); built-in conventions stay."""
    if name in BUILTIN_CONVENTIONS:
        raise ValueError(f"answer convention {name!r} is built in and cannot be removed")
    _TABLE.pop(name, None)


def convention_names() -> tuple[str, ...]:
    """Registered convention names, built-ins first, then in registration order."""
    return tuple(_TABLE)


def get_convention(name: str) -> AnswerConvention:
    """The registered convention `name`; KeyError listing the known names."""
    if name not in _TABLE:
        raise KeyError(f"unknown answer convention {name!r} (known: {', '.join(_TABLE)})")
    return _TABLE[name]


def answer_line(answer: str, name: str = PROBE) -> str:
    """The answer line of the registered convention `name` for `answer`, the probe's with its default pre-fill:
    what a leak of the simulation ends on (`exposure.answer_format`)."""
    return get_convention(name).resolve().line(answer)


def resolved_conventions(zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> list[Resolved]:
    """Every registered convention resolved for `zero_cot_prefix`, one per distinct pre-fill, in table order."""
    convs: list[Resolved] = []
    for name in _TABLE:
        r = _TABLE[name].resolve(zero_cot_prefix)
        if all(o.prefill != r.prefill for o in convs):
            convs.append(r)
    return convs


def ending_convention(text: str, conventions: Sequence[Resolved]) -> str | None:
    """The name of the convention that ends `text`: the one whose last answer statement ends last (on a tie, the
    longer statement: the probe's line `... \\boxed{42}` over the bare `\\boxed{42}` inside it); None when no
    convention states an answer in `text`."""
    best: tuple[int, int, int] | None = None
    name = None
    for k, c in enumerate(conventions):
        m = c.last_match(text)
        if m is None:
            continue
        key = (m.end(), m.end() - m.start(), -k)
        if best is None or key > best:
            best, name = key, c.name
    return name


def read_stated(text: str, zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> tuple[str | None, str | None]:
    """(answer, convention) of the convention ending `text` (`ending_convention` over every registered one), or
    (None, None) when no convention states an answer in it."""
    convs = resolved_conventions(zero_cot_prefix)
    name = ending_convention(text, convs)
    if name is None:
        return None, None
    m = next(c for c in convs if c.name == name).last_match(text)
    return (m.group("answer").strip(), name) if m is not None else (None, None)


def stated_answer(text: str, zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> str | None:
    """The final answer `text` states in any registered convention: the answer of the convention that ends it
    (`ending_convention`), None when none does. What a full-CoT output ending on `#### 42` answers, where
    `extract_boxed` finds no box."""
    return read_stated(text, zero_cot_prefix)[0]


BOX_READ = "boxed"  # the convention a full-CoT answer read by extract_boxed is recorded under (unless the probe line)
BOX_CONVENTIONS = (PROBE, BOX_READ)  # what `read_full_cot` names a full-CoT answer read from its box


def read_full_cot(text: str, zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> tuple[str | None, str | None]:
    """The final answer of a full-CoT output and the convention it was read in: (answer, name), (None, None) if none.

    The last closed `\\boxed{..}` first (`extract_boxed`, as the probe has always read it; recorded as `probe`
    when the probe's line states it, else `boxed`), else the convention that ends the output (`read_stated`:
    `#### N`, `The answer is N.`, `The answer is: N`, any registered one). So a model that boxes its answers reads
    as before, and one that never boxes (SmolLM2: `#### 3\\nThe answer is: 3`) is read in its own convention
    instead of being malformed. The probe's con and the GRPO reward (zcp.simulate.rewards.extract_answer) both
    read a full output with this function.
    """
    box = extract_boxed(text)
    if box is not None:
        probe = _TABLE[PROBE].resolve(zero_cot_prefix).last_match(text)
        named = probe is not None and probe.group("answer").strip() == box
        return box, PROBE if named else BOX_READ
    return read_stated(text, zero_cot_prefix)

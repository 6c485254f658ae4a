"""The answer conventions the Zero-CoT Probe can pre-fill: one frozen `AnswerConvention` per convention, one table.

A convention is how a model states its final answer: the probe's own line (`The final answer is: \\[ \\boxed{N} \\]`),
GSM8K's `#### N`, `The answer is N.`, a bare `\\boxed{N}`, or any text an auditor names. A model that memorised
benchmark items under one convention may answer at once after that convention's pre-fill and not after another's
(an evader who knows the probe trains its leaks to end on `#### N`): `probe.prefill` lists the conventions to
probe (zcp.probe.multiconv runs one detection per convention and one test over all of them).

Each entry gives
- `name` (what `probe.prefill` lists; it names the run's `conv-<name>/` directory and the table rows),
- `prefill`: the text the zero-CoT answer is pre-filled after (None for `probe`: the run's
  `probe.zero_cot_prefix`, which is where the default line is defined, zcp.core.answers.FINAL_ANSWER_PREFIX),
- `end`: the scored answer end (p_first/p_all score the gold answer followed by it); None derives it from the
  pre-fill with the rule every prefix follows (`answer_end`: one "}" per brace group left open, else "\\n");
  `sentence` sets "." (`The answer is 42.`),
- `pattern`: a regular expression recognising the convention's final-answer statement in a full-CoT output
  (group `answer`); None derives it from `prefill` and `end` (`derived_pattern`),
- `label`: how tables name it.

`probe.prefill` also takes a literal string (any text that is not a bare identifier, e.g. `"Answer: "`): a
convention with that pre-fill, its end and pattern derived by the same rules. `auto` reads the conventions from
the model's own full-CoT outputs (zcp.probe.multiconv.read_conventions).

Adding one: `register_convention(AnswerConvention(...))`, before the config is validated (the checks of
`probe.prefill` look names up here). This module imports nothing of zcp but zcp.core.answers, so the config layer
may read it, as it reads the metric table (zcp.probe.metrics).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from zcp.core.answers import FINAL_ANSWER_PREFIX, extract_boxed, extract_prefilled_box

PROBE = "probe"  # the probe's own line: probe.zero_cot_prefix
AUTO = "auto"  # probe.prefill=auto: the conventions the audited model uses (plus `probe`)
LITERAL_PREFIX = "literal-"  # the name of a literal pre-fill: literal-<8 hex digits of its text's sha256>
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def answer_end(prefix: str) -> str:
    """The text that ends an answer written right after `prefix` (a pure function of the prefix).

    Rule: when `prefix` leaves brace groups open, one `}` per open group, so the default
    ``... \\boxed{`` gives "}" and ``... \\boxed{\\text{`` gives "}}". Braces are counted raw, as
    `zcp.core.answers.close_brace_index` and generation's `stop_at_box_close` count them (a `}` with no open
    group is ignored). A prefix with no open group (``#### ``, ``The answer is: ``) puts the answer on a
    line of its own, so the answer ends at the end of that line: "\\n". Conventions that end otherwise
    (``$``, an EOS-terminated answer) set `ProbeConfig.answer_suffix` instead (a convention of the table: its `end`).
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


def check_literal(text: object) -> str:
    """`text` when it can be a pre-fill (a string with a non-blank character); else ValueError saying why."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a pre-fill must be a string with a non-blank character, not {text!r}")
    if "{question}" in text:
        raise ValueError(f"a pre-fill is the start of the answer, not a template: {text!r} holds {{question}}")
    return text


def derived_pattern(prefill: str, end: str) -> str:
    """The regex recognising an answer stated as `prefill`, the answer, then `end` (group `answer`).

    The pre-fill's outer whitespace is optional (a model writes `####42` or `#### 42`) and its inner whitespace
    any run of blanks; a brace end takes an answer holding balanced groups one level deep (`\\frac{1}{2}`);
    "\\n" takes the rest of the line; any other end (".") must be followed by whitespace or the text's end, so
    the point of 4.5 does not end the answer.
    """
    core = prefill.strip()
    head = r"\s+".join(re.escape(part) for part in core.split()) if core else ""
    if end and set(end) == {"}"}:
        return head + r"\s*(?P<answer>(?:[^{}]|\{[^{}]*\})+?)" + re.escape(end)
    if end == "\n" or not end:
        return head + r"[ \t]*(?P<answer>\S[^\n]*?)[ \t]*(?=\n|$)"
    return head + r"[ \t]*(?P<answer>\S[^\n]*?)" + re.escape(end) + r"(?=\s|$)"


@dataclass(frozen=True)
class AnswerConvention:
    """One answer convention: its name, pre-fill, scored end, the regex that finds it in an output, and its label."""

    name: str
    prefill: str | None  # None: the run's probe.zero_cot_prefix (only the `probe` convention)
    end: str | None = None  # None: answer_end(prefill)
    pattern: str | None = None  # None: derived_pattern(prefill, end)
    label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _IDENT.match(self.name) or self.name == AUTO:
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
    """A convention as one run probes it: the concrete pre-fill text, scored end and pattern."""

    name: str
    prefill: str
    end: str
    pattern: str
    label: str

    def to_dict(self) -> dict[str, str]:
        """For summary.json (`conventions`)."""
        return {"name": self.name, "prefill": self.prefill, "end": self.end, "pattern": self.pattern,
                "label": self.label}

    def last_match(self, text: str) -> re.Match[str] | None:
        """The last statement of an answer in this convention in `text` (an empty answer does not count)."""
        last = None
        for m in re.finditer(self.pattern, text):
            if m.group("answer").strip():
                last = m
        return last


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


def literal_name(text: str) -> str:
    """The name a literal pre-fill gets: literal-<8 hex digits of its sha256> (a directory name for any text)."""
    return LITERAL_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def parse_prefill(value: object) -> list[str] | str:
    """`probe.prefill` as a list of entries, or AUTO; ValueError (the config check words it) when it is none.

    An entry is a registered name, or a literal: a string that is not a bare identifier (`"Answer: "`, `"#### "`).
    A bare identifier that is not registered is an unknown name (a misspelt `hahs` is refused, not pre-filled).
    """
    if isinstance(value, str):
        if value == AUTO:
            return AUTO
        entries: list[object] = [value]
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        entries = list(value)
        if not entries:
            raise ValueError("an empty list (name one convention at least, or auto)")
    else:
        raise ValueError(f"{value!r} is not a convention name, a literal pre-fill, a list of these, or auto")
    out: list[str] = []
    for e in entries:
        if e == AUTO:
            raise ValueError("auto stands alone (it adds the conventions the model uses to the probe's line)")
        if not isinstance(e, str):
            raise ValueError(f"entry {e!r} is not a string")
        if _IDENT.match(e):
            if e not in _TABLE:
                raise ValueError(f"unknown convention {e!r} (known: {', '.join(_TABLE)}; a literal pre-fill "
                                 "holds a character other than letters, digits and _, e.g. \"Answer: \")")
        else:
            check_literal(e)
        if e in out:
            raise ValueError(f"{e!r} is listed twice")
        out.append(e)
    return out


def is_single_default(value: object) -> bool:
    """True when `probe.prefill` names the probe's own line alone (the single-convention path of today)."""
    return value == PROBE or (isinstance(value, Sequence) and not isinstance(value, str) and list(value) == [PROBE])


def resolve_entries(entries: Iterable[str], zero_cot_prefix: str = FINAL_ANSWER_PREFIX,
                    answer_suffix: str | None = None) -> list[Resolved]:
    """The conventions `entries` (names or literals, from `parse_prefill`) name, for one run.

    Two entries that pre-fill the same text are refused (ValueError): they are one test counted twice.
    """
    out: list[Resolved] = []
    for e in entries:
        if e in _TABLE:
            r = _TABLE[e].resolve(zero_cot_prefix, answer_suffix)
        else:
            text = check_literal(e)
            end = answer_end(text)
            r = Resolved(literal_name(text), text, end, derived_pattern(text, end), repr(text))
        same = next((o for o in out if o.prefill == r.prefill), None)
        if same is not None:
            raise ValueError(f"{r.name!r} and {same.name!r} pre-fill the same text {r.prefill!r}")
        out.append(r)
    return out


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


def extract_after_prefill(continuation: str, prefix: str, end: str) -> str | None:
    """The zero-CoT answer from a continuation generated after `prefix`, the answer's end being `end`.

    A prefix that leaves a brace group open (the box conventions): the text up to the brace that closes it
    (`zcp.core.answers.extract_prefilled_box`, as ever). Otherwise the answer runs to the first `end` that is
    followed by whitespace or the text's end ("." of `The answer is 42.`; not the point of 4.5), or to the end of
    its line, or to the continuation's end (EOS after `#### 42`). None (malformed) when that is empty.
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


def zero_cot_stop(prefix: str) -> tuple[str, ...]:
    """The stop strings of a zero-CoT generation after `prefix`: none for a box (it stops at the box's close),
    the end of the line otherwise (the answer never spans lines)."""
    return () if opens_group(prefix) else ("\n",)


def _all_resolved(zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> list[Resolved]:
    """Every registered convention resolved for `zero_cot_prefix`, one per distinct pre-fill, in table order."""
    convs: list[Resolved] = []
    for name in _TABLE:
        r = _TABLE[name].resolve(zero_cot_prefix)
        if all(o.prefill != r.prefill for o in convs):
            convs.append(r)
    return convs


def stated_answer(text: str, zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> str | None:
    """The final answer `text` states in any registered convention: the answer of the convention that ends it
    (`ending_convention`), None when none does. What a full-CoT output ending on `#### 42` answers, where
    `zcp.core.answers.extract_boxed` finds no box."""
    return read_stated(text, zero_cot_prefix)[0]


def read_stated(text: str, zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> tuple[str | None, str | None]:
    """(answer, convention) of the convention ending `text` (`ending_convention` over every registered one), or
    (None, None) when no convention states an answer in it."""
    convs = _all_resolved(zero_cot_prefix)
    name = ending_convention(text, convs)
    if name is None:
        return None, None
    m = next(c for c in convs if c.name == name).last_match(text)
    return (m.group("answer").strip(), name) if m is not None else (None, None)


BOX_READ = "boxed"  # the convention a full-CoT answer read by extract_boxed is recorded under (unless the probe line)
BOX_CONVENTIONS = (PROBE, BOX_READ)  # what `read_full_cot` names a full-CoT answer read from its box


def read_full_cot(text: str, zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> tuple[str | None, str | None]:
    """The final answer of a full-CoT output and the convention it was read in: (answer, name), (None, None) if none.

    The last closed `\\boxed{..}` first (`extract_boxed`, as the probe has always read it; recorded as `probe`
    when the probe's line states it, else `boxed`), else the convention that ends the output (`read_stated`:
    `#### N`, `The answer is N.`, `The answer is: N`, any registered one). So a model that boxes its answers reads
    as before, and one that never boxes (SmolLM2: `#### 3\nThe answer is: 3`) is read in its own convention
    instead of being malformed.
    """
    box = extract_boxed(text)
    if box is not None:
        probe = _TABLE[PROBE].resolve(zero_cot_prefix).last_match(text)
        named = probe is not None and probe.group("answer").strip() == box
        return box, PROBE if named else BOX_READ
    return read_stated(text, zero_cot_prefix)


def answer_line_end(text: str, zero_cot_prefix: str = FINAL_ANSWER_PREFIX) -> int | None:
    """Where a full-CoT output's answer is complete: the index just past the newline ending the first line that
    states an answer in any registered convention (the probe's line, `\\boxed{N}` closed, `#### N`,
    `The answer is N.`, `The answer is: N`); None while no such line has ended.

    The criterion of `full_cot_stop`: generation may stop there and lose nothing the reading needs, since the
    answer is stated. A model that restates it (`#### 3\nThe answer is: 3`) stops after `#### 3\n`; one whose
    first stated answer is not its last (`\\boxed{3}` in a step, then `#### 5`) would be read at the first, so a
    backend applying it changes what such a model's full-CoT answer reads as (the last statement, `read_full_cot`).
    """
    first: int | None = None
    for c in _all_resolved(zero_cot_prefix):
        for m in re.finditer(c.pattern, text):
            if not m.group("answer").strip():
                continue
            nl = text.find("\n", m.end())
            if nl != -1 and (first is None or nl + 1 < first):
                first = nl + 1
            break
    return first


def full_cot_stop() -> tuple[str, ...]:
    """The literal stop strings of a full-CoT GenerationRequest: none.

    `answer_line_end` is the criterion (stop once the first answer line is complete), but no literal string says
    it: `#### N\\n` and a closed box's line hold the answer, which varies, and `\\nThe answer is: ` (the restatement
    after `#### N`) would cut the answer of a model that writes `The answer is: N` alone. zcp.backends.hf stops on
    literal strings and on the pre-filled box's close only, so the criterion waits for a backend stop that takes a
    callable or a regular expression. Measured on SmolLM2-135M-Instruct (8 GSM8K test items, budget 512): 2,391
    tokens generated, 2,375 with the criterion applied afterwards (0.7% saved): it ends with EOS right after its
    answer line, and 3 of the 8 outputs loop to the budget without stating an answer at all.
    """
    return ()

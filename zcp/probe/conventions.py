"""`probe.prefill` over the answer-convention table: which conventions a run probes, and the probe's stops.

The table itself (`AnswerConvention`, the built-in conventions, `register_convention`, the extraction rules
`read_full_cot` / `extract_after_prefill`, the answer line) lives in zcp.core.answers, so the simulation's leaks and
its GRPO reward read answers by the same definitions as the probe; it is re-exported here, one registry with one
interface. A convention is how a model states its final answer: the probe's own line
(`The final answer is: \\[ \\boxed{N} \\]`), GSM8K's `#### N`, `The answer is N.`, a bare `\\boxed{N}`, `The answer
is: N`, or any text an auditor names. A model that memorised benchmark items under one convention may answer at once
after that convention's pre-fill and not after another's (an evader who knows the probe trains its leaks to end on
`#### N`): `probe.prefill` lists the conventions to probe (zcp.probe.multiconv runs one detection per convention
and one test over all of them).

`probe.prefill` takes registered names and literal strings (any text that is not a bare identifier, e.g.
`"Answer: "`): a convention with that pre-fill, its end and pattern derived by the table's rules, named
literal-<8 hex digits>. `auto` reads the conventions from the model's own full-CoT outputs
(zcp.probe.multiconv.read_conventions).

Adding one: `register_convention(AnswerConvention(...))`, before the config is validated (the checks of
`probe.prefill` look names up in the table). This module imports nothing of zcp but zcp.core.answers, so the
config layer may read it, as it reads the metric table (zcp.probe.metrics).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from zcp.core.answers import (  # noqa: F401  (the table, re-exported: one registry, one interface)
    AUTO,
    BOX_CONVENTIONS,
    BOX_READ,
    BUILTIN,
    BUILTIN_CONVENTIONS,
    FINAL_ANSWER_PREFIX,
    NAME_RE,
    PROBE,
    SENTENCE_PATTERN,
    AnswerConvention,
    Resolved,
    answer_end,
    answer_line,
    check_literal,
    convention_names,
    derived_pattern,
    ending_convention,
    extract_after_prefill,
    get_convention,
    opens_group,
    read_full_cot,
    read_stated,
    register_convention,
    resolved_conventions,
    stated_answer,
    unregister_convention,
)

LITERAL_PREFIX = "literal-"  # the name of a literal pre-fill: literal-<8 hex digits of its text's sha256>


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
        if NAME_RE.match(e):
            if e not in convention_names():
                raise ValueError(f"unknown convention {e!r} (known: {', '.join(convention_names())}; a literal pre-fill "
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
        if e in convention_names():
            r = get_convention(e).resolve(zero_cot_prefix, answer_suffix)
        else:
            text = check_literal(e)
            end = answer_end(text)
            r = Resolved(literal_name(text), text, end, derived_pattern(text, end), repr(text))
        same = next((o for o in out if o.prefill == r.prefill), None)
        if same is not None:
            raise ValueError(f"{r.name!r} and {same.name!r} pre-fill the same text {r.prefill!r}")
        out.append(r)
    return out


def zero_cot_stop(prefix: str) -> tuple[str, ...]:
    """The stop strings of a zero-CoT generation after `prefix`: none for a box (it stops at the box's close),
    the end of the line otherwise (the answer never spans lines)."""
    return () if opens_group(prefix) else ("\n",)


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
    for c in resolved_conventions(zero_cot_prefix):
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

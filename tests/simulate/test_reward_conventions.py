"""The GRPO reward and the probe read every answer convention of the table (zcp.core.answers) alike.

For each registered convention (the built-ins and one registered here) and each shape of output (well-formed,
a leading space, trailing text, a thousands separator, a negative, a fraction or decimal, a missing answer, two
answers), the reward's extraction (zcp.simulate.rewards.extract_answer, what correctness_reward compares) and the
probe's extraction of a full-CoT output (zcp.probe.conventions.read_full_cot, what con compares) return the same
value, and that value is the one the output states. The leak's answer line, the probe's pre-fill and the zero-CoT
reading after it come from the same table entry.
"""

from __future__ import annotations

import pytest

from zcp.core.answers import FINAL_ANSWER_SUFFIX, answer_close, answers_equal, final_answer_line
from zcp.probe.conventions import (
    BUILTIN_CONVENTIONS,
    AnswerConvention,
    convention_names,
    extract_after_prefill,
    get_convention,
    read_full_cot,
    register_convention,
    resolve_entries,
    unregister_convention,
)
from zcp.simulate.rewards import (
    ANSWER_FORMATS,
    answer_line,
    correctness_reward,
    ends_with_answer_line,
    extract_answer,
    score_completion,
)
from zcp.simulate.suppress import suppress_completion

TOY = AnswerConvention("answer_colon", "Answer: ", label="Answer: N")  # a convention registered after the built-ins
ANSWERS = ("42", "1,234", "-3", "3.5", "\\frac{1}{2}")  # plain, thousands separator, negative, decimal, fraction


@pytest.fixture(autouse=True)
def toy_convention():
    register_convention(TOY)
    yield
    unregister_convention(TOY.name)


def _names() -> list[str]:
    return [*BUILTIN_CONVENTIONS, TOY.name]


def _line(name: str, answer: str) -> str:
    (conv,) = resolve_entries([name])
    return conv.line(answer)


def _both(text: str) -> str | None:
    """The answer both readers give `text`; fails when they differ."""
    reward, probe = extract_answer(text), read_full_cot(text)[0]
    assert reward == probe, f"reward reads {reward!r}, probe reads {probe!r} in {text!r}"
    return reward


def _outputs(name: str, answer: str) -> list[tuple[str, str, str | None]]:
    """(case, full-CoT output, the answer it states) for one convention and answer."""
    line = _line(name, answer)
    return [
        ("well-formed", f"Work: add them up.\n{line}", answer),
        ("leading space", f"Work: add them up.\n {line}", answer),
        ("trailing text", f"Work: add them up.\n{line}\nHope this helps.", answer),
        ("two answers", f"First guess:\n{_line(name, '7')}\nOn reflection:\n{line}", answer),
        ("answer only", line, answer),
    ]


@pytest.mark.parametrize("name", _names())
@pytest.mark.parametrize("answer", ANSWERS)
def test_reward_and_probe_read_every_convention_alike(name, answer):
    assert name in convention_names()
    for case, text, want in _outputs(name, answer):
        assert _both(text) == want, (case, text)
        assert correctness_reward([text], [answer]) == [1.0], (case, text)
        assert score_completion(text, answer)["pred"] == want


@pytest.mark.parametrize("name", _names())
def test_trailing_text_on_the_answer_line_is_read_alike(name):
    conv = get_convention(name).resolve()
    text = f"Work.\n{conv.line('42')} and that is all"
    got = _both(text)
    if conv.end == "\n":  # a line convention's answer runs to the end of its line, for both readers
        assert got == "42 and that is all"
    else:  # a delimited answer ("}" of a box, "." of `The answer is 42.`) stops at its delimiter
        assert got == "42"


@pytest.mark.parametrize("name", _names())
def test_a_missing_answer_is_none_for_both(name):
    conv = get_convention(name).resolve()
    assert _both(f"Let me think.\n{conv.prefill.rstrip()}") is None  # the pre-fill, no answer
    assert not _both(f"Let me think.\n{conv.line('')}")  # an empty answer: None, or an empty box's ""
    assert _both("I do not know how to solve this.") is None
    assert score_completion(f"Let me think.\n{conv.line('')}", "42")["malformed"]


def test_mixed_conventions_are_read_alike():
    """Outputs stating answers in several conventions: the same answer for both readers (the last closed box first,
    else the convention whose statement ends the output)."""
    cases = {
        "#### 3\nThe answer is: 3": "3",  # SmolLM2 / MetaMathQA restatement
        "\\boxed{7}\nThe answer is 8.": "7",  # a closed box first, as the probe has always read it
        "The answer is 8.\n#### 9": "9",
        "#### 8\n" + final_answer_line("9"): "9",
        "Answer: 5\n#### 6": "6",
        "#### 6\nAnswer: 5": "5",  # the registered convention ends the output
        "so #### 1,234": "1,234",
        "The answer is 42": None,  # `sentence` needs its final "."
    }
    for text, want in cases.items():
        assert _both(text) == want, text


@pytest.mark.parametrize("name", _names())
@pytest.mark.parametrize("answer", ANSWERS)
def test_line_prefill_and_zero_cot_reading_come_from_one_entry(name, answer):
    """The answer line opens with the convention's pre-fill, and the probe's zero-CoT reading of the rest of the
    line (the continuation a model would write after the pre-fill) is the answer."""
    conv = get_convention(name).resolve()
    line = conv.line(answer)
    assert line.startswith(conv.prefill)
    assert extract_after_prefill(line[len(conv.prefill):], conv.prefill, conv.end) == answer
    assert conv.ends_on_line(f"Work.\n{line}\n") and not conv.ends_on_line(f"{line}\nmore work")
    assert answers_equal(conv.read_line(line), answer)


def test_the_leak_lines_are_the_tables_lines():
    assert answer_close(get_convention("probe").resolve().prefill, "}") == FINAL_ANSWER_SUFFIX
    assert answer_line(" 42 ") == final_answer_line("42") == "The final answer is: \\[ \\boxed{42} \\]"
    assert [answer_line("42", f) for f in ANSWER_FORMATS] == [
        "The final answer is: \\[ \\boxed{42} \\]", "#### 42", "The answer is 42.", "\\boxed{42}"]
    for fmt in ANSWER_FORMATS:
        assert ends_with_answer_line(answer_line("42", fmt), fmt)
    for conv in resolve_entries(list(BUILTIN_CONVENTIONS)):  # the suppression examples write the same lines
        assert suppress_completion(conv, "43") == conv.line("43")
    with pytest.raises(ValueError, match="no single line"):
        answer_line("42", "mix")

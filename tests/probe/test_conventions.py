"""The answer-convention table (zcp.probe.conventions), `probe.prefill`'s checks, and the memoising backend."""

from __future__ import annotations

import pytest
from configs import compose
from conv_fakes import ConventionBackend
from omegaconf import OmegaConf

from zcp.backends.base import GenerationRequest, Prompt
from zcp.backends.memo import MemoBackend, full_cot_only
from zcp.config.schemas import validate
from zcp.core.answers import FINAL_ANSWER_PREFIX, final_answer_line
from zcp.errors import ConfigError
from zcp.probe.conventions import (
    BUILTIN_CONVENTIONS,
    AnswerConvention,
    answer_end,
    convention_names,
    ending_convention,
    extract_after_prefill,
    get_convention,
    literal_name,
    parse_prefill,
    register_convention,
    resolve_entries,
    stated_answer,
    unregister_convention,
    zero_cot_stop,
)
from zcp.probe.probe_config import ProbeGroupConfig


def _all():
    return resolve_entries(BUILTIN_CONVENTIONS)


def test_builtin_table_prefills_ends_and_labels():
    by = {c.name: c for c in _all()}
    assert list(by) == ["probe", "hash", "sentence", "boxed", "sentence_colon"]
    assert by["probe"].prefill == FINAL_ANSWER_PREFIX and by["probe"].end == "}"  # the answer line, as ever
    assert (by["hash"].prefill, by["hash"].end) == ("#### ", "\n")  # derived: answer_end of a prefix with no group
    assert (by["sentence"].prefill, by["sentence"].end) == ("The answer is ", ".")  # the table's own end
    assert (by["boxed"].prefill, by["boxed"].end) == ("\\boxed{", "}")
    assert (by["sentence_colon"].prefill, by["sentence_colon"].end) == ("The answer is: ", "\n")
    # `probe` is the run's probe.zero_cot_prefix (and answer_suffix): one source of truth for the probe's line
    (p,) = resolve_entries(["probe"], "\n\nThe final answer is:\n\\[\n\\boxed{", None)
    assert p.prefill.startswith("\n\nThe final") and p.end == "}"
    (p,) = resolve_entries(["probe"], FINAL_ANSWER_PREFIX, "} \\]")
    assert p.end == "} \\]"


@pytest.mark.parametrize(("text", "want"), [
    ("Step: 3+4=7.\n" + final_answer_line("7"), ("probe", "7")),
    ("Step: 3+4=7.\n#### 7", ("hash", "7")),
    ("It takes 4.5 hours. The answer is 4.5.", ("sentence", "4.5")),
    ("So \\boxed{\\frac{1}{2}}", ("boxed", "\\frac{1}{2}")),
    ("First \\boxed{3}, then on reflection\n#### 5\n", ("hash", "5")),  # the last statement ends the output
    ("no answer stated here", (None, None)),
    ("Janet has 9 eggs.\n#### 18\nThe answer is: 18", ("sentence_colon", "18")),  # MetaMathQA / SmolLM2
    ("Total: 4.5 hours.\nThe answer is: 4.5", ("sentence_colon", "4.5")),
    ("The answer is 7.\nThe answer is: 7", ("sentence_colon", "7")),
])
def test_the_convention_ending_an_output_and_its_answer(text, want):
    assert ending_convention(text, _all()) == want[0]
    assert stated_answer(text) == want[1]


def test_zero_cot_extraction_follows_the_prefill():
    assert extract_after_prefill("42} \\]", FINAL_ANSWER_PREFIX, "}") == "42"  # the box: to its closing brace
    assert extract_after_prefill("42", FINAL_ANSWER_PREFIX, "}") is None  # never closed: malformed, as ever
    assert extract_after_prefill("42\nmore", "#### ", "\n") == "42"
    assert extract_after_prefill("42", "#### ", "\n") == "42"  # EOS right after the answer
    assert extract_after_prefill("4.5. Done", "The answer is ", ".") == "4.5"  # not the point of 4.5
    assert extract_after_prefill("   \n", "#### ", "\n") is None
    assert zero_cot_stop(FINAL_ANSWER_PREFIX) == () and zero_cot_stop("#### ") == ("\n",)


def test_answer_end_is_the_table_rule():
    assert answer_end(FINAL_ANSWER_PREFIX) == "}" and answer_end("\\boxed{\\text{") == "}}" and answer_end("#### ") == "\n"


def test_registration_like_the_metric_table():
    conv = AnswerConvention("answer_colon", "Answer: ", label="Answer: N")
    try:
        register_convention(conv)
        assert register_convention(conv) is conv  # the same spec again: a no-op
        assert "answer_colon" in convention_names()
        with pytest.raises(ValueError, match="already registered"):
            register_convention(AnswerConvention("answer_colon", "A: "))
        assert ProbeGroupConfig(prefill=["probe", "answer_colon"]).prefill == ["probe", "answer_colon"]
        r = get_convention("answer_colon").resolve()
        assert r.end == "\n" and ending_convention("so\nAnswer: 12", [r]) == "answer_colon"
    finally:
        unregister_convention("answer_colon")
    with pytest.raises(ValueError, match="'hash' is already registered"):  # a built-in one is never replaced
        register_convention(AnswerConvention("hash", "## "), replace=True)
    with pytest.raises(ValueError, match="built in"):
        unregister_convention("hash")
    with pytest.raises(ValueError, match="identifier"):
        AnswerConvention("auto", "x: ")
    with pytest.raises(ValueError, match="non-blank"):
        AnswerConvention("blank", "  ")


def test_parse_prefill_names_literals_lists_and_auto():
    assert parse_prefill("auto") == "auto"
    assert parse_prefill("hash") == ["hash"]
    assert parse_prefill(["probe", "Answer: "]) == ["probe", "Answer: "]
    (lit,) = resolve_entries(["Answer: "])
    assert lit.name == literal_name("Answer: ") and lit.name.startswith("literal-") and lit.end == "\n"


@pytest.mark.parametrize(("value", "message"), [
    ("hahs", "unknown convention 'hahs'"),
    ([], "an empty list"),
    (["probe", "probe"], "listed twice"),
    (["auto", "hash"], "auto stands alone"),
    ("   ", "non-blank"),
    ("Q: {question}", "not a template"),
])
def test_probe_prefill_is_checked_at_compose_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=message) as e:
        validate({"probe": {"prefill": value}})
    assert str(e.value).startswith("probe.prefill=")


def test_probe_prefill_refuses_two_entries_with_one_text_and_api_mode():
    with pytest.raises(ConfigError, match="pre-fill the same text"):
        validate({"probe": {"prefill": ["probe", "hash"], "zero_cot_prefix": "#### "}})
    with pytest.raises(ConfigError, match=r"probe\.mode=api"):
        validate({"probe": {"prefill": "hash", "mode": "api"}})
    with pytest.raises(ConfigError, match=r"probe\.auto\.min_share"):
        validate({"probe": {"prefill": "auto", "auto": {"min_share": 0}}})
    with pytest.raises(ConfigError, match=r"^probe\.auto\.always=\['hsah'\]: unknown convention 'hsah'"):
        validate({"probe": {"prefill": "auto", "auto": {"always": ["hsah"]}}})
    assert validate({"probe": {"auto": {"always": []}}})["probe"].auto.always == []


def test_probe_prefill_composes_from_the_command_line():
    cfg = compose("detect", "probe.prefill=[probe,hash,sentence]", "probe.auto.neutral_n=5")
    default = compose("detect")
    checked = validate(OmegaConf.to_container(cfg, resolve=True))["probe"]
    assert checked.prefill == ["probe", "hash", "sentence"] and checked.auto.neutral_n == 5
    assert validate(OmegaConf.to_container(default, resolve=True))["probe"].prefill == "probe"


def test_memo_backend_generates_each_distinct_full_cot_request_once():
    fb = ConventionBackend(truth={"q1": "3", "q2": "4"})
    memo = MemoBackend(fb, full_cot_only)
    full = [GenerationRequest(Prompt("q1"), max_new_tokens=8), GenerationRequest(Prompt("q2"), max_new_tokens=8)]
    zero = GenerationRequest(Prompt("q1", assistant_prefix="#### "), max_new_tokens=4)
    first = memo.generate([*full, full[0], zero])
    again = memo.generate([full[1], zero])
    assert first[0] == first[2] and again[0] == first[1] and again[1] == first[3]
    assert fb.calls["generated"] == 2 + 1 + 1  # q1, q2 once; the pre-filled request each time
    assert (memo.generated, memo.reused, memo.passed) == (2, 2, 2)
    assert memo.name == fb.name and memo.supports_prefill and memo.inner is fb  # everything else is read through


@pytest.mark.parametrize(("text", "want"), [
    ("3+4=7\n" + final_answer_line("7"), ("7", "probe")),  # the box first, as ever, named by the probe's line
    ("3+4=7 so \\boxed{7}\n#### 9", ("7", "boxed")),  # a closed box wins over a later `#### 9`, as before
    ("Janet sells 9 eggs.\n#### 18\nThe answer is: 18", ("18", "sentence_colon")),  # SmolLM2 / MetaMathQA
    ("It is 7.\n#### 7", ("7", "hash")),
    ("It is 4.5. The answer is 4.5.", ("4.5", "sentence")),
    ("I cannot tell.", (None, None)),
])
def test_read_full_cot_reads_every_convention_after_the_box(text, want):
    from zcp.probe.conventions import read_full_cot

    assert read_full_cot(text) == want


@pytest.mark.parametrize(("text", "cut"), [
    ("step\n#### 3\nThe answer is: 3", "step\n#### 3\n"),  # stated at `#### 3`: the restatement is not needed
    ("a \\boxed{3} b\nmore text", "a \\boxed{3} b\n"),  # a closed box's line
    ("The answer is: 3\nQuestion: next", "The answer is: 3\n"),
    ("step\n#### 3", None),  # the line has not ended yet (EOS would end it)
    ("no answer yet\nstill none\n", None),
])
def test_answer_line_end_is_after_the_first_complete_answer_line(text, cut):
    from zcp.probe.conventions import answer_line_end, read_full_cot

    at = answer_line_end(text)
    assert (None if at is None else text[:at]) == cut
    if at is not None:  # what stopping there keeps reads as the same answer
        assert read_full_cot(text[:at])[0] == read_full_cot(text)[0]

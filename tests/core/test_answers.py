"""Answer extraction and equivalence."""

import pytest

from zcp.core.answers import answers_equal, extract_boxed, extract_prefilled_box, is_parsable


@pytest.mark.parametrize(("a", "b"), [("18", "18.0"), ("\\$18", "18"), ("$18$", "18"), ("1,000", "1000"),
                                      ("\\frac{1}{2}", "0.5"), ("50\\%", "50"), ("18 dollars", "18"),
                                      ("x^2+1", "1+x^2"), ("\\dfrac{3}{4}", "0.75"), ("-7", "-7.000")])
def test_equivalent(a, b):
    assert answers_equal(a, b) and answers_equal(b, a)


@pytest.mark.parametrize(("a", "b"), [("17", "18"), ("abc", "18"), (None, "1"), ("", "1"), ("0.5", "0.51"), ("-3", "3")])
def test_not_equivalent(a, b):
    assert not answers_equal(a, b)


def test_extract_boxed_nested_and_last():
    assert extract_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert extract_boxed("\\boxed{a{b{c}}}") == "a{b{c}}"
    assert extract_boxed("no box here") is None
    assert extract_boxed("\\boxed{unclosed") is None
    assert extract_boxed("\\boxed{3} and \\boxed{broken") == "3"


def test_extract_prefilled():
    assert extract_prefilled_box("42} \\]") == "42"
    assert extract_prefilled_box("\\frac{1}{2}}") == "\\frac{1}{2}"
    assert extract_prefilled_box("42 and on") is None
    assert extract_prefilled_box("}") is None


def test_parsable():
    assert is_parsable("42") and is_parsable("\\frac{1}{2}") and not is_parsable(None) and not is_parsable("  ")

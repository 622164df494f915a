"""Math answer extraction and equivalence (math-verify), and AIME's integer rule."""

from __future__ import annotations

import threading

import pytest

from presto.tasks.base import cut_at_stop
from presto.tasks.math_grader import (
    extract_boxed,
    extract_boxed_all,
    extract_math_answer,
    grade_integer,
    grade_math,
    math_equal,
    parse_integer,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{5}$.", "5"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("nested \\boxed{\\sqrt{\\frac{a}{b}}} end", "\\sqrt{\\frac{a}{b}}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\fbox{7}", "7"),
        ("\\boxed 42 is it", "42"),
        ("braces \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("unclosed \\boxed{3", None),
        ("no box here", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_boxed_all_keeps_order() -> None:
    assert extract_boxed_all("\\fbox{a} \\boxed{b} \\fbox{c}") == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thus the final answer is 12.", "12"),
        ("The answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("Answer: -7", "-7"),
        ("we get 3 apples, then 1,250 more", "1,250"),
        ("x equals 2.5 in the end", "2.5"),
        ("nothing numeric", None),
        ("The answer is 3 but boxed \\boxed{4}", "4"),
    ],
)
def test_extract_math_answer_fallbacks(text: str, expected: str | None) -> None:
    assert extract_math_answer(text) == expected


@pytest.mark.parametrize(
    ("reference", "predicted"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{2}", "\\dfrac{1}{2}"),
        ("\\dfrac{1}{2}", "\\frac12"),
        ("-\\frac{7}{8}", "-0.875"),
        ("10", "10\\text{ cm}"),
        ("10\\text{ inches}", "10"),
        ("90^\\circ", "90"),
        ("1,000", "1000"),
        ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
        ("(3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("x^2+1", "1+x^2"),
        ("\\text{Evelyn}", "Evelyn"),
        ("$\\dfrac{79}{173}$", "\\frac{79}{173}"),
    ],
)
def test_equivalent_answers(reference: str, predicted: str) -> None:
    assert math_equal(reference, predicted) is True


@pytest.mark.parametrize(
    ("reference", "predicted"),
    [
        ("\\frac{3}{4}", "0.76"),
        ("\\frac{14}{3}", "4.6667"),
        ("2", "3"),
        ("x^2+1", "x^2-1"),
        ("\\sqrt{2}", "2"),
        ("(1, 2)", "(2, 1)"),
    ],
)
def test_non_equivalent_answers(reference: str, predicted: str) -> None:
    assert math_equal(reference, predicted) is False


def test_grade_math_text_around_the_box_and_several_boxes() -> None:
    completion = "Step 1: try \\boxed{2}. That fails. Step 2: ... so the answer is $\\boxed{\\dfrac{3}{2}}$. Done!"
    grade = grade_math(completion, "1.5")
    assert grade.correct is True and grade.extracted == "\\dfrac{3}{2}"
    assert grade_math("I am not sure.", "1.5").correct is False
    assert grade_math("\\boxed{}", "1.5").correct is False


def test_grade_math_after_eos_is_ignored() -> None:
    completion = cut_at_stop("\\boxed{5}<|im_end|>garbage \\boxed{6}")
    assert grade_math(completion, "5").correct is True
    assert grade_math(cut_at_stop("\\boxed{6}</s>\\boxed{5}"), "5").correct is False


def test_unparseable_reference_is_ungradable_not_wrong() -> None:
    grade = grade_math("\\boxed{5}", "\\unknowncommand{")
    assert grade.correct is None


def test_math_verify_works_off_the_main_thread() -> None:
    results: list[bool | None] = []
    thread = threading.Thread(target=lambda: results.append(math_equal("\\frac{1}{2}", "0.5")))
    thread.start()
    thread.join()
    assert results == [True]


@pytest.mark.parametrize(
    ("text", "value"),
    [("033", 33), ("1,000", 1000), ("70^\\circ", 70), ("12.0", 12), ("$204$", 204), ("\\text{}5", 5),
     ("3.5", None), ("\\frac{1}{2}", None), ("", None)],
)  # fmt: skip
def test_parse_integer(text: str, value: int | None) -> None:
    assert parse_integer(text) == value


def test_grade_integer() -> None:
    assert grade_integer("so \\boxed{033}", 33).correct is True
    assert grade_integer("so \\boxed{33.5}", 33).correct is False
    assert grade_integer("so \\boxed{34}", 33).correct is False
    assert grade_integer("no idea", 33).correct is False
    assert grade_integer("\\boxed{1}", "not a number").correct is None

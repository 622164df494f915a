"""Tests that kill the mutants a hand mutation review of the answer graders found surviving.

Ids of the review: MG = tasks/math_grader.py, CG = tasks/choice_grader.py. Each test names the
mutants it kills; the full list, with what killed each one and why the survivors are equivalent,
is at the end of the file. The tests check the extraction and comparison rules the two modules'
docstrings state, on completions written the way models write them: a piecewise answer whose
``\\left\\{`` has no escaped partner, bold around a value after an adverb, two pieces of math in one
answer sentence, a boxed letter labelling a long option text, a hedge followed by a verb.
"""

from __future__ import annotations

import pytest

from presto.tasks.choice_grader import extract_choice, grade_choice
from presto.tasks.math_grader import extract_boxed, extract_math_answer, grade_math, math_equal

# --- math_grader.py: extraction -------------------------------------------------------------------


def test_an_escaped_brace_does_not_count_in_the_box_braces():
    """MG6 (the `(?<!\\\\)` lookbehind dropped from _BRACE): a piecewise answer opens ``\\left\\{`` and
    closes with ``\\right.``; counting the escaped brace leaves the box unclosed, read as no answer."""
    piecewise = "f(x) = \\left\\{ \\begin{cases} x & x > 0 \\\\ 0 & x \\le 0 \\end{cases} \\right."
    assert extract_boxed(f"So \\boxed{{{piecewise}}}.") == piecewise
    assert extract_math_answer(f"The function is $\\boxed{{{piecewise}}}$") == piecewise


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("**Answer:** **$44**", "44"),  # the second bold is not the answer phrase's: a dollar amount
        ("The answer is therefore **\\(x^2\\)**.", "x^2"),  # bold after an adverb, then math
        ("The answer is thus **$\\frac{1}{2}$**", "\\frac{1}{2}"),
    ],
)
def test_bold_that_the_answer_phrase_does_not_consume_is_dropped(text, expected):
    """MG14 (the `_BOLD.match` step of _stated_value skipped): bold right before the value that the
    answer phrase's own optional bold does not take (after an adverb, or a second pair) is markdown,
    not part of the answer; left in, the math delimiters or the "$" of an amount stay in it."""
    assert extract_math_answer(text) == expected


def test_the_last_math_of_a_plain_answer_sentence_is_the_value():
    """MG19 (the first inline math of the sentence instead of the last): "the area $A$ is $12$"
    names the quantity first and states its value last."""
    text = "The final answer is: the area $A$ is $12$."
    assert extract_math_answer(text) == "12"
    assert grade_math(text, "12").correct is True


@pytest.mark.parametrize(("text", "expected"), [("Answer: 17...", "17"), ("The answer is 0.5...", "0.5")])
def test_a_trailing_ellipsis_is_not_part_of_the_extracted_answer(text, expected):
    """MG21 (the final `.rstrip(".")` of _stated_value dropped): the sentence end cuts at the last
    dot of "...", and the dots before it are no part of the answer the grade records."""
    assert extract_math_answer(text) == expected
    assert grade_math(text, expected).extracted == expected


# --- math_grader.py: comparison -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "predicted", "equal"),
    [
        ("\\text{Alice and Bob}", "Alice and Bob", True),  # the text command around the reference
        ("\\text{Alice and Bob}", "alice and bob", True),  # case
        ("\\text{Alice and Bob}", "\\textbf{alice and bob}", True),
        ("\\text{Alice and Bob}", "Alice and Carol", False),
    ],
)
def test_a_textual_answer_is_compared_without_case_or_text_commands(reference, predicted, equal):
    """MG22 (`.lower()` dropped from _normalize_text) and MG23 (the `\\text{}` unwrapping dropped):
    math-verify does not rescue a several-word name (it reads it as a product of symbols), so
    the documented whitespace-, case- and ``\\text``-insensitive string comparison is what
    accepts it."""
    assert math_equal(reference, predicted) is equal


def test_a_reference_with_an_ellipsis_is_not_equal_to_one_of_its_terms():
    """A defect the review found (not a mutant): math_equal's docstring says a reference with an
    ellipsis is compared as text only, but math-verify parses such references in part ([2, '1, 2,
    , n'] for the first one, 1.2 for "1,2,...,n"), which passed the 'only the raw string back'
    check, and a completion boxing 2 was graded correct against the sequence 1, 2, ..., n."""
    for reference in ("1, 2, \\ldots, n", "1, 2, \\dots, n", "1,2,...,n"):
        assert grade_math("The answer is \\boxed{2}", reference).correct is False
    assert grade_math("The answer is \\boxed{1.2}", "1,2,...,n").correct is False
    assert grade_math("The answer is \\boxed{1, 2, \\ldots, n}", "1, 2, \\ldots, n").correct  # the same text


# --- choice_grader.py -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["Answer: B or C is correct", "Answer: B and C are both correct.", "Either B or C is right."],
)
def test_two_letters_joined_by_or_or_and_are_a_hedge_even_before_a_verb(text):
    """CG4 (the hedge check dropped) and CG19 (its `and` dropped): the list check alone lets a verb
    after the second letter ("C is correct") make it the subject of a new clause, so "B or C is
    correct" would become B. Two letters offered together are no single choice."""
    assert extract_choice(text) is None
    assert grade_choice(text, "B").correct is False


@pytest.mark.parametrize("text", ["Either (B) or (C) is correct.", "Option B or option C is correct."])
def test_a_hedge_in_front_of_an_is_correct_statement_is_no_choice(text):
    """A defect the review found (not a mutant): the module docstring says a hedge ("the answer is B
    or C") names no choice, and "Either B or C is correct." was read as none; with the letters in
    brackets, or each after "option", the statement patterns matched the second letter alone and
    took it. The letter alone is still a choice."""
    assert extract_choice(text) is None
    assert extract_choice(text.replace("B) or (", "").replace("B or option ", "")) == "C"


def test_the_word_i_is_no_choice_when_there_are_ten_letters():
    """CG7 (only "A" treated as a possible English word, not "I"): with ten choices "I" is a letter,
    but "the answer is I believe ..." is the pronoun; the earlier firm answer stands."""
    letters = "ABCDEFGHIJ"
    assert extract_choice("Answer: D. Actually, the answer is I believe the same.", letters) == "D"
    assert extract_choice("Answer: D. Actually, the answer is I.", letters) == "I"  # the letter itself


def test_a_boxed_letter_labelling_a_long_option_text_is_the_choice():
    """CG14 (the bound on a boxed option's text cut from 200 to 20 characters): models box the whole
    option, "\\boxed{B. <its text>}", and the text is often longer than a few words."""
    text = "Putting it together:\n\n\\boxed{B. The rate doubles when the temperature rises by ten degrees}"
    assert extract_choice(text) == "B"
    assert grade_choice(text, "B").correct is True


def test_a_possessive_letter_is_not_a_choice():
    """CG15 (the `'\\w` of the letter's lookahead dropped): "B's" names option B in passing (the
    module docstring's "not A's"), so it does not override the choice stated before it."""
    assert extract_choice("Answer: D\nThe key step: the answer is B's mirror image") == "D"
    assert extract_choice("Thinking it through, the answer is C's opposite") is None


# Mutants of the review (51: 39 killed by existing tests, 11 by this file, 1 equivalent)
#
# math_grader.py (32: 25 existing, 6 new, 1 equivalent)
#   MG1 first box instead of the last, MG2 the box's "{" kept, MG3 its "}" kept, MG4 empty boxes
#   kept, MG5 braces matched first-in-first-out, MG7 boxes not sorted by position (\fbox after
#   \boxed), MG8 "\boxed 42" form dropped: existing (test_tasks_math_grader extract_boxed).
#   MG10 first answer statement instead of the last, MG15 dollar-amount step skipped: existing
#   (test_tasks_math_grader currency dollar). MG11 suppositions not skipped: existing
#   (test_tasks_math_grader supposed answer). MG12 no fall back past a statement without a value,
#   MG13 the lead adverb not skipped, MG20 a decimal point ends the answer: existing
#   (test_tasks_math_grader statements). MG16 "$" tried before "$$": existing (test_graders_review3
#   blank line). MG17 "\$" closes the math: existing (test_graders_review3 escaped dollar). MG18
#   "$5$ or $6$" not a hedge, MG30 the hedge's "$" left in: existing (test_graders_review3 two math
#   answers). MG24 a raw-string-only parse of the reference counted as parsed: existing
#   (test_tasks_math_grader unparseable reference). MG25 one-letter unit words: existing
#   (test_tasks_math_grader plain unit).
#   MG26 the first "=" instead of the last: existing (test_graders_review3 chain of equations).
#   MG27 "or" before the "=" not a hedge: existing (test_graders_review3 integer hedge). MG28 100
#   digits refused: existing (test_tasks_math_grader runaway integer). MG29 sign dropped: existing
#   (test_tasks_math_grader parse_integer). MG31 \frac arguments swapped when braced, MG32 the
#   "\text{5 cm}" rewrite dropped: existing (test_tasks_math_grader equivalent answers).
#   MG6, MG14, MG19, MG21, MG22, MG23: new (this file).
#   Defects found (fixed with their tests in this file): a reference with an ellipsis parsed in part
#   by math-verify; a hedge before the letter of "(X) is correct" / "option X is correct".
#   MG9 (the `text[after].isalpha()` skip of "\boxeds" dropped): equivalent: a letter after the
#       command is neither the "{" nor the " " that the two branches below need, so nothing is
#       appended either way.
#
# choice_grader.py (19: 14 existing, 5 new)
#   CG1 lowercase letters not read, CG3 default letters ABCDE, CG9 "A is correct" read as the word
#   "a", CG16 one skippable piece only, CG17 "option B is correct" dropped, CG18 "should be" dropped:
#   existing (test_tasks_choice_grader extract_choice). CG2 first statement instead of the last:
#   existing (test_tasks_choice_grader extract_choice). CG5 listed letters not a hedge, CG13 no
#   clause check after a list: existing (test_graders_review3 two letters / letter then comma).
#   CG6 English-word check dropped, CG8 "c/2" read as a choice: existing (test_tasks_choice_grader
#   no explicit choice). CG10 last line start one before the "\n", CG11 a bare last-line "a" also
#   overriding: existing (test_tasks_choice_grader trailing English word letter). CG12 suppositions
#   not skipped: existing (test_tasks_choice_grader supposed answer).
#   CG4, CG7, CG14, CG15, CG19: new (this file).

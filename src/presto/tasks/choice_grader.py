"""Multiple-choice grading: find the letter the model chose, from explicit statements only.

Models rarely obey "Answer: X" to the letter, so several explicit forms are accepted, in
any case: an answer statement ("Answer: c", "the answer is (B)", "**Answer:** $\\boxed{D}$"),
``\\boxed{X}``, "option X is correct", "the correct option is X", and a last line that is
only the letter ("(B)", "B."). A capital letter anywhere else is *not* a choice: "Option A
claims..." or "a C=O bond" would otherwise turn a truncated chain into a 1-in-4 guess that
inflates accuracy by chance. No explicit statement means no answer (graded wrong), and
neither does a hedge ("the answer is B or C", "Answer: B, C"), a variable ("the answer is c/2")
or a supposition mid-reasoning ("maybe the answer is C, let me check"), which also does not
override a firm answer stated before it.
"""

from __future__ import annotations

import re
from functools import cache

from presto.tasks.base import Grade, half_width, is_hypothetical

# statements after which the letter comes: "Answer:", "the answer is", "answer should be",
# "the correct option is", markdown bold allowed around the colon
_LEADS = re.compile(
    r"(?<![A-Za-z])(?:answer|(?:correct|right|best)\s+(?:option|choice|one|letter))"
    r"(?:\s*[*_]{2})?\s*(?:is\b|:|=|-|(?:should|would|must|will)\s+be\b)",
    re.IGNORECASE,
)
# what may stand between a statement and its letter, skipped one piece at a time (one
# regex over all of it backtracks exponentially on long runs of spaces): markdown bold,
# math and box delimiters, font commands, brackets, quotes, a colon, and a few words
# ("is clearly (C)", "Answer: `B`")
_SKIPPABLE = re.compile(
    r"\s+|\*\*|__|\$|:|\\\(|\\boxed\{|\\(?:text|textbf|mathrm|mathbf)\s*\{|[(\[{`'\"\u2018\u201c]"
    r"|(?:definitely|clearly|likely|probably|therefore|thus|then|in|option|choice|letter)\b",
    re.IGNORECASE,
)
# a letter followed by one of these words is still a choice ("Answer: A is correct"); a
# lowercase letter, or A/I, followed by any other word is an English word ("A good start");
# "and"/"or" are not among them: "a or b" is a hedge, no answer
_VERB_AFTER = re.compile(r"[ \t]+(?:is|was|seems|fits|because|since|as|with)\b")
_WORD_AFTER = re.compile(r"[ \t]+[a-z]")
# after letters listed after the choice, a verb that makes them the subject of a new clause
_CLAUSE_AFTER = re.compile(r"[ \t]*[)\]]?[ \t]+(?:is|are|was|were|seems|seem)\b")
# a lowercase letter followed by an operator is a variable: "the answer is c/2"
_OPERATOR_AFTER = re.compile(r"[ \t]*[/^=*]")
# how far back a hedge before a letter is looked for ("Either (B) or (C) is correct"): the
# longest such run is about 25 characters ("option B or option "); a bound keeps the check cheap
_HEDGE_LOOKBEHIND = 40


@cache
def _patterns(
    letters: str,
) -> tuple[
    re.Pattern[str], re.Pattern[str], tuple[re.Pattern[str], ...], re.Pattern[str], re.Pattern[str], re.Pattern[str]
]:
    """(one letter, a line that is only a letter, the self-contained statements, a hedge
    after a letter: "B or C", another letter listed after it: "B, C", "B/C", a hedge before
    a letter: "(B) or (" of "(B) or (C) is correct", "option B or option " of "... option C")."""
    letter = rf"(?P<letter>[{letters}{letters.lower()}])(?!\w|'\w)"  # not "A's"; 'B' is fine
    # the letter alone, in a font command, or labelling its option's text: "(B) 42 kg", "B: 42"
    # (bounded: an unclosed box must not make every later one scan to the end of the line)
    font = r"(?:\\(?:text|textbf|mathrm|mathbf)\s*\{)?"
    boxed = rf"\\boxed\{{\s*{font}\s*\(?{letter}(?:\s*[.:)]?\s*\}}|[.:)][ \t][^\n]{{0,200}}?\}})"
    statements = (
        re.compile(boxed, re.IGNORECASE),
        re.compile(rf"\b(?:option|choice)\s+\(?{letter}\)?\s+is\s+(?:the\s+)?(?:correct|right|best)\b", re.IGNORECASE),
        re.compile(rf"\({letter}\)\s+is\s+(?:the\s+)?(?:correct|right|best)\b", re.IGNORECASE),
    )
    alone = re.compile(rf"[ \t*_$]*[(\[]?{letter}[)\]]?[ \t.*_$]*")
    hedge = re.compile(rf"[ \t]*[)\]]?[ \t]+(?:or|and)[ \t]+\(?[{letters}](?!\w|'\w)")
    # the letters listed after a letter, up to the last: ", C", "/C", ", (B) and D"
    separator = r"[ \t]*[)\]]?(?:[ \t]*[,/&][ \t]*(?:(?:and|or)[ \t]+)?|[ \t]+(?:and/or|and|or)[ \t]+)"
    listed = re.compile(rf"(?:{separator}\(?(?P<other>[{letters}{letters.lower()}])(?!\w|'\w))+")
    # anchored at the end of the text before the letter (searched in a bounded window)
    option = r"(?i:(?:option|choice)[ \t]+)?"
    hedge_before = re.compile(
        rf"(?<![A-Za-z]){option}\(?[{letters}](?![A-Za-z])[)\]]?[ \t]+(?i:or|and)[ \t]+{option}[(\[]?\Z"
    )
    return re.compile(letter), alone, statements, hedge, listed, hedge_before


def _hedged_before(text: str, start: int, hedge_before: re.Pattern[str]) -> bool:
    """Whether the letter starting at ``start`` is the second of two offered together ("(B) or (C)")."""
    return hedge_before.search(text, max(0, start - _HEDGE_LOOKBEHIND), start) is not None


def _is_a_word(text: str, letter: str, end: int) -> bool:
    """Whether the letter ending at ``end`` is the English word "a"/"I" (or a lowercase letter) in prose,
    or a lowercase variable in math ("c/2")."""
    if letter.islower() and _OPERATOR_AFTER.match(text, end):
        return True
    if not (letter.islower() or letter in "AI"):
        return False
    return bool(_WORD_AFTER.match(text, end)) and not _VERB_AFTER.match(text, end)


def _lists_another(text: str, end: int, listed: re.Pattern[str]) -> bool:
    """Whether other letters are listed after the one ending at ``end`` ("B, C", "B/C", "A, B and D"):
    a hedge like "B or C". Not when the last of them is a word ("B, I think") or the list starts
    a clause about those options ("B, C is wrong", "D, B and C are wrong")."""
    m = listed.match(text, end)
    if m is None:
        return False
    other = m.end("other")
    return not _is_a_word(text, m.group("other"), other) and not _CLAUSE_AFTER.match(text, other)


def _letter_after(text: str, pos: int, letter: re.Pattern[str]) -> re.Match[str] | None:
    """The letter that a statement ending at ``pos`` names, or None if it names none."""
    while skipped := _SKIPPABLE.match(text, pos):
        pos = skipped.end()
    return letter.match(text, pos)


def extract_choice(text: str, letters: str = "ABCD") -> str | None:
    """The chosen letter: that of the last explicit statement in the text, or None.

    Full-width forms ("Answer：Ｂ", "（C）") are read as their ASCII letters and punctuation.
    """
    text = half_width(text)
    letter, alone, statements, hedge, listed, hedge_before = _patterns(letters)
    leads = [lead for lead in _LEADS.finditer(text) if not is_hypothetical(text, lead.start())]
    matches = [m for lead in leads if (m := _letter_after(text, lead.end(), letter))]
    matches += [m for pattern in statements for m in pattern.finditer(text)]
    found = [
        (m.start("letter"), m.group("letter").upper())
        for m in matches
        if not _is_a_word(text, m.group("letter"), m.end("letter"))
        and not hedge.match(text, m.end("letter"))
        and not _hedged_before(text, m.start("letter"), hedge_before)
        and not _lists_another(text, m.end("letter"), listed)
    ]
    # The last line alone: a letter. A bare "A" or "I" there is as likely the first word of a
    # sentence the fixed answer length cut off ("Answer: C\n\nI") as a choice, so it names the
    # choice only when nothing else does; bracketed or formatted ("(I)", "**I**") it is one.
    last_line_start = text.rstrip().rfind("\n") + 1
    m = alone.fullmatch(text.rstrip(), last_line_start)
    if m and not (found and m.group(0).strip() in ("A", "I", "a")):
        found.append((m.start("letter"), m.group("letter").upper()))
    return max(found)[1] if found else None


def grade_choice(completion: str, reference: str, letters: str = "ABCD") -> Grade:
    """Grade a multiple-choice completion against the correct letter."""
    extracted = extract_choice(completion, letters)
    if extracted is None:
        return Grade(False, None, "no choice letter found")
    return Grade(extracted == reference, extracted, "" if extracted == reference else f"expected {reference}")

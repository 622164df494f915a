"""Math grading: extract the final answer, then compare it with math-verify (or as an integer).

The extraction is deliberately simple and predictable (see :func:`extract_math_answer`)
because the prompt asks for ``\\boxed{}``; the comparison is delegated to math-verify, which
knows that ``\\dfrac12``, ``0.5`` and ``\\frac{1}{2}`` are the same number and that
``10\\text{ cm}`` is 10.
"""

from __future__ import annotations

import logging
import re
import threading

from presto.tasks.base import Grade, half_width, is_hypothetical

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# "answer" as the noun that introduces the answer, markdown bold allowed around the colon:
# "The final answer is", "Answer:", "**Final Answer:**", "**Answer: 12**", "answer ="
_ANSWER_LEAD = re.compile(r"(?<![A-Za-z])answer(?:\s*[*_]{2})?\s*(?:is\b|:|=)(?:\s*[*_]{2})?[ \t]*:?", re.IGNORECASE)
_BOLD = re.compile(r"\*\*|__")
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
# a "\\$" inside math is a dollar sign, not the closing delimiter: "$\\$18.90$"
_INLINE_MATH = re.compile(r"(?<!\\)\$((?:\\.|[^\\$])+)\$")
# the other delimiters' math, one group each ("$" math is _INLINE_MATH, which knows "\\$")
_DISPLAY_MATH = re.compile("|".join(f"{re.escape(a)}(.+?){re.escape(b)}" for a, b in _MATH_DELIMITERS if a != "$"))
# after one math answer, "or" and another value: two answers offered ("$5$ or $6$"), no single one
_ALTERNATIVE = re.compile(r"[*_]*[ \t]*,?[ \t]*(?:or|and/or)[ \t]+(?=\$|\\\(|\\\[|[+-]?\d)", re.IGNORECASE)
# where a plain-text answer stops: the end of its sentence (not a decimal point; a "!" at the
# end or before words, as in "the answer is 44! Great", is no factorial, but "4! = 24" and
# "10! / (2! 8!)" go on), a ';', a parenthetical
# or a clause that explains it ("17 (since 2+15)", "5, which is prime"), but not a list's
# last item ("5, 6, and 7")
_ANSWER_END = re.compile(
    r"\.(?=\s|$)|!(?=\s*$|\s+(?![=+*/^!(\d\\-]))|;|\s\((?=[a-z]{2})|,\s+(?!(?:and|or)\s+[-+\d])(?=[a-z]{2})"
    r"|\s+(?:because|since|as|which|where|so)\b"
)
# an adverb between the answer phrase and its value: "The answer is therefore 12."
_LEAD_ADVERB = re.compile(
    r"(?:therefore|thus|hence|then|simply|just|indeed|clearly|actually|exactly)\b,?[ \t]+", re.IGNORECASE
)


_NUMBER = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"  # 1,250 or 1250, 12.50
# "$" then an amount, where the number is not followed by more math ("$4\\sqrt{3}", "$2^{")
_AMOUNT = re.compile(rf"\$[ \t]?{_NUMBER}(?![\d\\^_{{}}])")
_BRACE = re.compile(r"(?<!\\)[{}]")  # not \{ or \}
_SPACES = re.compile(r"\s*")
_TOKEN = re.compile(r"[^\s$]+")


def _closing_braces(text: str) -> dict[int, int]:
    """The position of the ``}`` that closes each ``{`` (unclosed ones are absent).

    One pass for all boxes: scanning to the end of the text from each box that never
    closes is quadratic, and a completion that repeats ``\\boxed{`` takes minutes.
    """
    closing: dict[int, int] = {}
    open_at: list[int] = []
    for brace in _BRACE.finditer(text):
        if brace.group() == "{":
            open_at.append(brace.start())
        elif open_at:
            closing[open_at.pop()] = brace.start()
    return closing


def extract_boxed_all(text: str) -> list[str]:
    """Every ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) content, in order, braces balanced."""
    found: list[tuple[int, str]] = []
    closing: dict[int, int] | None = None
    for command in _BOX_COMMANDS:
        start = 0
        while (pos := text.find(command, start)) != -1:
            after = pos + len(command)
            start = after
            if after < len(text) and text[after].isalpha():
                continue  # another command, e.g. \boxeds
            value_at = _SPACES.match(text, after).end()
            if text.startswith("{", value_at):
                closing = _closing_braces(text) if closing is None else closing
                if value_at in closing:
                    found.append((pos, text[value_at + 1 : closing[value_at]].strip()))
            elif text.startswith(" ", after) and (token := _TOKEN.match(text, value_at)):
                found.append((pos, token.group(0)))
    return [content for _, content in sorted(found)]


def extract_boxed(text: str) -> str | None:
    """The last non-empty boxed answer: a model that boxes several things usually boxes the
    final one last, and an empty ``\\boxed{}`` is the instruction echoed, not an answer."""
    boxes = [box for box in extract_boxed_all(text) if box]
    return boxes[-1] if boxes else None


def _closing_delimiter(s: str, right: str, start: int) -> int:
    """Where ``right`` closes math opened before ``start`` (-1 if never): an escaped dollar
    ("$\\$18.90$") is a dollar sign inside the math, not its end."""
    end = s.find(right, start)
    while end > 0 and right.startswith("$") and s[end - 1] == "\\":
        end = s.find(right, end + 1)
    return end


def _is_amount(s: str) -> bool:
    """Whether ``s`` starts with a dollar amount ("$44.", "$28,080 in all"), not math: a "$"
    before a number with no closing "$" in its sentence. Math that never closes is a truncated
    answer ("$\\frac{1}{"), but a price that never closes is the whole answer."""
    if not _AMOUNT.match(s):
        return False
    line = s.split("\n", 1)[0]
    end = _ANSWER_END.search(line)
    return "$" not in line[1 : end.start() if end else len(line)]


def _stated_value(rest: str) -> str | None:
    """The answer that follows an answer phrase (``rest`` starts right after "Answer:").

    Math in ``$...$``, ``\\(...\\)`` or ``\\[...\\]`` right after the phrase is the answer; otherwise
    the answer is the plain text to the end of its sentence, with markdown bold removed. A
    dollar amount ("the answer is $44.") is plain text, its "$" dropped (:func:`_is_amount`).
    """
    s = rest.lstrip()  # also past line breaks: "Answer:\n17", "Final answer:\n\n$$17$$"
    s = s[m.end() :] if (m := _LEAD_ADVERB.match(s)) else s
    if _BOLD.match(s):  # "The answer is **5**."
        s = s[2:].lstrip(" \t")
    if _is_amount(s):  # "$44.": a price, not math that never closes
        s = s[1:].lstrip(" \t")
    for left, right in _MATH_DELIMITERS:
        if s.startswith(left):
            end = _closing_delimiter(s, right, len(left))
            if end < 0:
                return None  # the math never closes: truncated
            if not _ALTERNATIVE.match(s, end + len(right)):
                return s[len(left) : end].strip() or None
            # "$5$ or $6$", "$5$, or $6$ if n is odd": two answers offered (see _hedge)
            return _hedge(s.split("\n", 1)[0])
    line = _BOLD.sub("", s.split("\n", 1)[0])
    end = _ANSWER_END.search(line)
    line = line[: end.start()] if end else line
    inline = list(_INLINE_MATH.finditer(line))  # "x = $5$": the math is the answer
    offered = any(_ALTERNATIVE.match(line, a.end()) for a in inline[:-1])  # "either $5$ or $6$"
    if offered:
        return _hedge(line)
    answer = inline[-1].group(1) if inline else line
    return answer.strip().rstrip(".").strip() or None


def _hedge(line: str) -> str:
    """The answer of a line that offers two ("$5$ or $6$"): the line with its math unwrapped,
    "5 or 6", which equals no single value (math-verify would pick one of the "$...$" pieces;
    it reads "5 or 6" as the set {5, 6}, a question's two solutions). Not None, which would
    fall back to an earlier answer statement."""
    line = _BOLD.sub("", line)
    line = _DISPLAY_MATH.sub(lambda m: next(g for g in m.groups() if g is not None), line)
    return _INLINE_MATH.sub(r"\1", line).strip().rstrip(".").strip()


def extract_math_answer(text: str) -> str | None:
    """The final answer the completion states, or None if it states none.

    In order:

    1. the last non-empty ``\\boxed{...}`` (or ``\\fbox``) whose braces close; an unclosed box
       is a truncated answer and counts as none;
    2. else the last explicit answer statement that has a value: "The final answer is X",
       "Answer: X", "**Answer:** X" (any case), where X is the math right after it
       (``$\\frac{3}{4}$``), else its plain text up to the end of the sentence, a
       parenthetical or an explaining clause ("Answer: 17 (since 2+15)." gives 17), and
       not a supposition ("suppose the answer is 204, then...": a truncated chain's guess);
    3. else None.

    There is deliberately no "last number in the text" fallback: an answer the model did
    not state is not graded correct, and such a fallback would credit truncated chains with
    whatever number they reached last, which biases accuracy between samplers that
    truncate at different rates.

    Full-width forms ("Answer：１２", "\\boxed{５}") are read as ASCII first.
    """
    text = half_width(text)
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    for lead in reversed(list(_ANSWER_LEAD.finditer(text))):
        if is_hypothetical(text, lead.start()):
            continue
        value = _stated_value(text[lead.end() :])
        if value:
            return value
    return None


def _strip_wrappers(answer: str) -> str:
    """Remove delimiters that carry no value: ``$``, ``\\(``, ``\\text{}`` around the whole."""
    s = answer.strip()
    for left, right in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left) : len(s) - len(right)].strip()
    return s


def _normalize_text(answer: str) -> str:
    """Whitespace-, case- and ``\\text``-insensitive form for a plain string comparison."""
    s = _strip_wrappers(answer)
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\left", "").replace("\\right", "")
    s = re.sub(r"\\[,;!: ]", "", s)
    return re.sub(r"\s+", "", s).lower().rstrip(".")


_warned_references: set[str] = set()


def _warn_unparsed(reference: str) -> None:
    """Say once per reference that its answers are compared as text only, which rejects
    equivalent forms that math-verify would have accepted."""
    if reference not in _warned_references:
        _warned_references.add(reference)
        logging.getLogger(__name__).warning(
            "math-verify cannot parse the reference answer %r (or only in part): completions of this problem "
            "are compared with it as text only",
            reference,
        )


def _timeout_s() -> int | None:
    """math-verify's timeout uses SIGALRM, which only works in the main thread."""
    return 5 if threading.current_thread() is threading.main_thread() else None


# \frac with unbraced one-character arguments ("\frac ab", "\frac{a}b"), which math-verify
# cannot parse (it does parse "\frac12"); braces are added around each argument
_LOOSE_FRAC = re.compile(r"\\[dt]?frac\s*(\{[^{}]*\}|[A-Za-z0-9])\s*(\{[^{}]*\}|[A-Za-z0-9])")


# words after a number that are no unit: they qualify it ("5 or more", "5 to 6"), or they are
# math that math-verify reads ("12 pi", "2 sin x", "44 percent")
_NOT_A_UNIT = (
    r"(?:or|and|to|plus|minus|times|less|more|than|at|over|divided|out|of|not|factorial"
    r"|hundreds?|thousands?|millions?|billions?|trillions?|dozens?|halves|half|thirds?|quarters?|fourths?"
    r"|pi|percent|sqrt|sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan|log|ln|exp|mod|choose|squared|cubed)\b"
)
# a number and its unit inside one text command ("\\text{5 cm}"), which math-verify reads as
# the string "5cm"; it reads "5\\text{ cm}" as 5. The unit has no digits and is not a phrase
# that qualifies the number ("\\text{5 or 6}", "\\text{5 or more}" stay unparsed).
_TEXT_NUMBER_UNIT = re.compile(
    rf"\\(?:text|textbf|textrm|mbox|mathrm)\s*\{{\s*({_NUMBER})\s*(?!{_NOT_A_UNIT})([A-Za-z][A-Za-z .]*)\}}"
)
# a number and a unit in plain words ("44 pebbles", "12 people"), which math-verify reads as
# the number or as a product of symbols (12*p*e*o*p*l*e) depending on the letters: the number
# is the answer. The first word has two letters or more: "2 x" and "2 i" are products.
_PLAIN_NUMBER_UNIT = re.compile(
    rf"({_NUMBER})(?:\s+(?!{_NOT_A_UNIT})[A-Za-z]{{2,}})(?:\s+(?!{_NOT_A_UNIT})[A-Za-z]+)*\.?"
)


def _brace(argument: str) -> str:
    return argument if argument.startswith("{") else "{" + argument + "}"


def _parse(answer: str) -> list:
    from math_verify import parse

    s = _LOOSE_FRAC.sub(lambda m: "\\frac" + _brace(m.group(1)) + _brace(m.group(2)), _strip_wrappers(answer))
    if unit := _TEXT_NUMBER_UNIT.fullmatch(s):
        s = f"{unit.group(1)}\\text{{ {unit.group(2).strip()}}}"
    elif unit := _PLAIN_NUMBER_UNIT.fullmatch(s):
        s = unit.group(1)
    return parse(f"${s}$", parsing_timeout=_timeout_s())


# an ellipsis: math-verify reads such a sequence partially ("1, 2, \\ldots, n" as 2, "1,2,...,n"
# as 1.2), so a reference with one is not parsed at all
_ELLIPSIS = re.compile(r"\\[lcv]?dots[bcimo]?(?![A-Za-z])|\.\.\.|\u2026")


def math_equal(reference: str, predicted: str) -> bool:
    """Whether ``predicted`` equals ``reference``.

    Equal normalized strings are accepted first (cheap, and right for textual answers such
    as names); otherwise both sides go through math-verify's parser and comparison. A
    reference math-verify cannot parse, or would parse only in part (any ellipsis: ``\\ldots``,
    ``\\dots``, ``...``), is compared as text only, for every prediction alike: grading only the
    ones that match it would bias accuracy up.
    """
    if _normalize_text(reference) == _normalize_text(predicted):
        return True
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    try:
        gold = [] if _ELLIPSIS.search(reference) else _parse(reference)
    except Exception:
        gold = []
    if not any(not isinstance(g, str) for g in gold):  # only the raw string back: not parsed
        _warn_unparsed(reference)
        return False  # the text comparison above failed
    try:
        pred = _parse(predicted)
        if not pred:
            return False
        return bool(verify(gold, pred, timeout_seconds=_timeout_s()))
    except Exception:
        return False


_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
# symbols around an integer that do not change it: \$, %, degrees, the negative thin space
# of "32,\!348"
_INT_DECORATION = re.compile(r"\\!|\\\$|\\?%|\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree")
_LATEX_SPACE = re.compile(r"\\[,;: ]|~")
# more digits than any answer has; int() refuses over 4300 digits (ValueError)
_MAX_DIGITS = 100
# "or" before an equation's right-hand side: the equation is one of two answers offered
_OR = re.compile(r"\bor\b", re.IGNORECASE)
# an integer (thousands separated only as 1,000), an optional ".0", then optionally words
# without digits (a unit: "33 ways"), so that "3, 3" or "1 and 33" are never read as 33 or 133
_INTEGER = re.compile(r"([+-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.0*)?(?:\s+[A-Za-z]{2,}(?:\s+[A-Za-z]+)*)?")


def parse_integer(answer: str) -> int | None:
    """An integer as a model or a dataset writes one, else None.

    Accepted: ``033``, ``1,000`` and ``1{,}000``, ``12.0``, ``70^\\circ``, ``\\$33``,
    ``\\text{33}``/``\\textbf{33}``/``\\mathrm{33}`` (their content is kept), ``33 \\text{ ways}``,
    and equations, whose right-hand side is the answer (``n = 33``, ``m+n=33``). Separate
    numbers are never glued together (``3, 3`` and ``1 \\text{ and } 33`` are not integers), and a
    hedge is no integer (``x = 3 \\text{ or } x = 33``).
    Over :data:`_MAX_DIGITS` digits is no answer (a runaway generation).
    """
    s = _strip_wrappers(answer)
    while (unwrapped := _TEXT_COMMAND.sub(r"\1", s)) != s:  # nested: \text{\textbf{33}}
        s = unwrapped
    equation, _, s = s.rpartition("=")
    if _OR.search(equation):  # "x = 3 or x = 33": a hedge, not 33
        return None
    s = s.replace("{,}", ",")
    s = _LATEX_SPACE.sub(" ", _INT_DECORATION.sub("", s))
    m = _INTEGER.fullmatch(s.strip().rstrip(".").strip())
    if not m:
        return None
    digits = m.group(2).replace(",", "")
    return int(m.group(1) + digits) if len(digits) <= _MAX_DIGITS else None


def grade_math(completion: str, reference: str) -> Grade:
    """Grade a math completion against a LaTeX/plain reference with math-verify."""
    extracted = extract_math_answer(completion)
    if extracted is None:
        return Grade(False, None, "no answer found")
    verdict = math_equal(str(reference), extracted)
    return Grade(verdict, extracted, "math-verify" if verdict else f"expected {reference}")


def grade_integer(completion: str, reference: int | str) -> Grade:
    """Grade an AIME-style completion: the answer must be the reference integer."""
    gold = parse_integer(str(reference))
    if gold is None:
        return Grade(None, None, f"reference is not an integer: {reference!r}")
    extracted = extract_math_answer(completion)
    if extracted is None:
        return Grade(False, None, "no answer found")
    value = parse_integer(extracted)
    if value is None:
        return Grade(False, extracted, "answer is not an integer")
    return Grade(value == gold, extracted, "" if value == gold else f"expected {gold}")

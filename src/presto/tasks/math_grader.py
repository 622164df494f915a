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

from presto.tasks.base import Grade

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# "answer" as the noun that introduces the answer, markdown bold allowed around the colon:
# "The final answer is", "Answer:", "**Final Answer:**", "**Answer: 12**", "answer ="
_ANSWER_LEAD = re.compile(r"(?<![A-Za-z])answer(?:\s*[*_]{2})?\s*(?:is\b|:|=)(?:\s*[*_]{2})?[ \t]*:?", re.IGNORECASE)
_BOLD = re.compile(r"\*\*|__")
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_INLINE_MATH = re.compile(r"\$([^$]+)\$")
# where a plain-text answer stops: the end of its sentence (not a decimal point), a ';', a
# parenthetical or a clause that explains it ("17 (since 2+15)", "5, which is prime")
_ANSWER_END = re.compile(r"\.(?=\s|$)|;|\s\((?=[a-z]{2})|,\s+(?=[a-z]{2})|\s+(?:because|since|as|which|where|so)\b")


def _balanced(text: str, open_pos: int) -> str | None:
    """The content of the brace group opening at ``open_pos``, or None if never closed."""
    depth = 0
    for i in range(open_pos, len(text)):
        ch = text[i]
        if ch == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[open_pos + 1 : i]
    return None


def extract_boxed_all(text: str) -> list[str]:
    """Every ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) content, in order, braces balanced."""
    found: list[tuple[int, str]] = []
    for command in _BOX_COMMANDS:
        start = 0
        while (pos := text.find(command, start)) != -1:
            after = pos + len(command)
            start = after
            if after < len(text) and text[after].isalpha():
                continue  # another command, e.g. \boxeds
            rest = text[after:]
            stripped = rest.lstrip()
            if stripped.startswith("{"):
                content = _balanced(text, after + (len(rest) - len(stripped)))
                if content is not None:
                    found.append((pos, content.strip()))
            elif rest.startswith(" ") and stripped:
                token = re.match(r"[^\s$]+", stripped)
                if token:
                    found.append((pos, token.group(0)))
    return [content for _, content in sorted(found)]


def extract_boxed(text: str) -> str | None:
    """The last non-empty boxed answer: a model that boxes several things usually boxes the
    final one last, and an empty ``\\boxed{}`` is the instruction echoed, not an answer."""
    boxes = [box for box in extract_boxed_all(text) if box]
    return boxes[-1] if boxes else None


def _stated_value(rest: str) -> str | None:
    """The answer that follows an answer phrase (``rest`` starts right after "Answer:").

    Math in ``$...$``, ``\\(...\\)`` or ``\\[...\\]`` right after the phrase is the answer; otherwise
    the answer is the plain text to the end of its sentence, with markdown bold removed.
    """
    s = rest.lstrip(" \t")
    if s.startswith("\n"):  # "Answer:\n17"
        s = s[1:].lstrip(" \t")
    if _BOLD.match(s):  # "The answer is **5**."
        s = s[2:].lstrip(" \t")
    for left, right in _MATH_DELIMITERS:
        if s.startswith(left):
            end = s.find(right, len(left))
            if end < 0:
                return None  # the math never closes: truncated
            return s[len(left) : end].strip() or None
    line = _BOLD.sub("", s.split("\n", 1)[0])
    end = _ANSWER_END.search(line)
    line = line[: end.start()] if end else line
    inline = _INLINE_MATH.findall(line)  # "x = $5$": the math is the answer
    answer = inline[-1] if inline else line
    return answer.strip().rstrip(".").strip() or None


def extract_math_answer(text: str) -> str | None:
    """The final answer the completion states, or None if it states none.

    In order:

    1. the last non-empty ``\\boxed{...}`` (or ``\\fbox``) whose braces close; an unclosed box
       is a truncated answer and counts as none;
    2. else the last explicit answer statement that has a value: "The final answer is X",
       "Answer: X", "**Answer:** X" (any case), where X is the math right after it
       (``$\\frac{3}{4}$``), else its plain text up to the end of the sentence, a
       parenthetical or an explaining clause ("Answer: 17 (since 2+15)." gives 17);
    3. else None.

    There is deliberately no "last number in the text" fallback: an answer the model did
    not state is not graded correct, and such a fallback would credit truncated chains with
    whatever number they reached last, which biases accuracy between samplers that
    truncate at different rates.
    """
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    for lead in reversed(list(_ANSWER_LEAD.finditer(text))):
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


def _timeout_s() -> int | None:
    """math-verify's timeout uses SIGALRM, which only works in the main thread."""
    return 5 if threading.current_thread() is threading.main_thread() else None


# \frac with unbraced one-character arguments ("\frac ab", "\frac{a}b"), which math-verify
# cannot parse (it does parse "\frac12"); braces are added around each argument
_LOOSE_FRAC = re.compile(r"\\[dt]?frac\s*(\{[^{}]*\}|[A-Za-z0-9])\s*(\{[^{}]*\}|[A-Za-z0-9])")


def _brace(argument: str) -> str:
    return argument if argument.startswith("{") else "{" + argument + "}"


def _parse(answer: str) -> list:
    from math_verify import parse

    s = _LOOSE_FRAC.sub(lambda m: "\\frac" + _brace(m.group(1)) + _brace(m.group(2)), _strip_wrappers(answer))
    return parse(f"${s}$", parsing_timeout=_timeout_s())


def math_equal(reference: str, predicted: str) -> bool | None:
    """Whether ``predicted`` equals ``reference``; ``None`` if the reference cannot be parsed.

    Equal normalized strings are accepted first (cheap, and right for textual answers such
    as names); otherwise both sides go through math-verify's parser and comparison.
    """
    if _normalize_text(reference) == _normalize_text(predicted):
        return True
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    try:
        gold = _parse(reference)
    except Exception:
        gold = []
    if not any(not isinstance(g, str) for g in gold):  # only the raw string back: not parsed
        return None
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
# an integer (thousands separated only as 1,000), an optional ".0", then optionally words
# without digits (a unit: "33 ways"), so that "3, 3" or "1 and 33" are never read as 33 or 133
_INTEGER = re.compile(r"([+-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.0*)?(?:\s+[A-Za-z]{2,}(?:\s+[A-Za-z]+)*)?")


def parse_integer(answer: str) -> int | None:
    """An integer as a model or a dataset writes one, else None.

    Accepted: ``033``, ``1,000`` and ``1{,}000``, ``12.0``, ``70^\\circ``, ``\\$33``,
    ``\\text{33}``/``\\textbf{33}``/``\\mathrm{33}`` (their content is kept), ``33 \\text{ ways}``,
    and equations, whose right-hand side is the answer (``n = 33``, ``m+n=33``). Separate
    numbers are never glued together (``3, 3`` and ``1 \\text{ and } 33`` are not integers).
    """
    s = _strip_wrappers(answer)
    while (unwrapped := _TEXT_COMMAND.sub(r"\1", s)) != s:  # nested: \text{\textbf{33}}
        s = unwrapped
    s = s.rpartition("=")[2].replace("{,}", ",")
    s = _LATEX_SPACE.sub(" ", _INT_DECORATION.sub("", s))
    m = _INTEGER.fullmatch(s.strip().rstrip(".").strip())
    return int(m.group(1) + m.group(2).replace(",", "")) if m else None


_warned_references: set[str] = set()


def _warn_ungradable(reference: str) -> None:
    """Say once per reference that its problem drops out of accuracy: a silent None would
    shrink the graded set without anyone noticing."""
    if reference not in _warned_references:
        _warned_references.add(reference)
        logging.getLogger(__name__).warning(
            "math-verify cannot parse the reference answer %r: completions of this problem are ungraded "
            "(correct=None) and not counted in accuracy",
            reference,
        )


def grade_math(completion: str, reference: str) -> Grade:
    """Grade a math completion against a LaTeX/plain reference with math-verify."""
    extracted = extract_math_answer(completion)
    if extracted is None:
        return Grade(False, None, "no answer found")
    verdict = math_equal(str(reference), extracted)
    if verdict is None:
        _warn_ungradable(str(reference))
        return Grade(None, extracted, f"reference could not be parsed: {reference!r}")
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

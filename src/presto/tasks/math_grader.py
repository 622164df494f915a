"""Math grading: extract the final answer, then compare it with math-verify (or as an integer).

The extraction is deliberately simple and predictable (last ``\\boxed{}``, then an explicit
"answer is" phrase, then the last number) because the prompt asks for ``\\boxed{}``; the
comparison is delegated to math-verify, which knows that ``\\dfrac12``, ``0.5`` and
``\\frac{1}{2}`` are the same number and that ``10\\text{ cm}`` is 10.
"""

from __future__ import annotations

import re
import threading

from presto.tasks.base import Grade

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_ANSWER_PHRASE = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*[:\s]*\$*\s*(?P<ans>[^\n$]+?)\s*\$*\s*(?:\.\s*)?$",
    re.IGNORECASE | re.MULTILINE,
)


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
    """The last boxed answer: a model that boxes several things usually boxes the final one last."""
    boxes = extract_boxed_all(text)
    return boxes[-1] if boxes else None


def extract_math_answer(text: str) -> str | None:
    """The final answer: last ``\\boxed{}``, else the last "answer is X", else the last number."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    phrases = list(_ANSWER_PHRASE.finditer(text))
    if phrases:
        answer = phrases[-1].group("ans").strip().rstrip(".").strip()
        if answer:
            return answer
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


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


def _parse(answer: str) -> list:
    from math_verify import parse

    s = _strip_wrappers(answer)
    return parse(f"${s}$", parsing_timeout=_timeout_s())


def math_equal(reference: str, predicted: str) -> bool | None:
    """Whether ``predicted`` equals ``reference``; ``None`` if the reference cannot be parsed.

    Equal normalized strings are accepted first (cheap, and right for textual answers such
    as names); otherwise both sides go through math-verify's parser and comparison.
    """
    if _normalize_text(reference) == _normalize_text(predicted):
        return True
    import logging

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


_INT_NOISE = re.compile(r"\\[,;!: ]|\\text\{[^{}]*\}|\\mathrm\{[^{}]*\}|\^\{?\\circ\}?|\\%|[$,\s]")


def parse_integer(answer: str) -> int | None:
    """An integer written plainly (``033``, ``1,000``, ``70^\\circ``, ``12.0``), else None."""
    s = _INT_NOISE.sub("", _strip_wrappers(answer))
    m = re.fullmatch(r"([+-]?\d+)(?:\.0*)?", s)
    return int(m.group(1)) if m else None


def grade_math(completion: str, reference: str) -> Grade:
    """Grade a math completion against a LaTeX/plain reference with math-verify."""
    extracted = extract_math_answer(completion)
    if extracted is None:
        return Grade(False, None, "no answer found")
    verdict = math_equal(str(reference), extracted)
    if verdict is None:
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

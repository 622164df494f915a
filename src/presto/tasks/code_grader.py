"""Code grading: pull the program out of a completion, assemble it with the task's tests.

The functions here are pure string work (tested without running anything); running the
assembled job is :func:`presto.tasks.sandbox.run_sandboxed`'s business.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Mapping, Sequence
from typing import Any

from presto.tasks.base import Grade
from presto.tasks.sandbox import SandboxLimits, run_sandboxed

# The info string after an opening fence may not contain a backtick (CommonMark): "```a`b" on
# a line opens no block. Excluding it also keeps a long run of backticks linear: with
# [^\n]* every backtick of the run started a scan to the end of the line (quadratic).
# The possessive quantifiers (*+) never give back what they took, which changes no match
# (the rest of the line could take whatever they gave back) but keeps a long line after
# "```" (spaces, or "pythonpython..." from a looping model) linear when no newline follows.
_OPEN = r"```[ \t]*+([A-Za-z0-9_+-]*+)[^`\n]*+\n"
_FENCE = re.compile(_OPEN + r"(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(_OPEN)
_BACKTICKS = re.compile(r"`+")
_PY_LABELS = {"python", "py", "python3", "py3"}
_READS_STDIN = re.compile(r"\binput\s*\(|\bstdin\b|\bopen\s*\(\s*0\s*[,)]|\bfileinput\b")


def _is_solution(code: str, entry_points: Sequence[str], reads_stdin: bool) -> bool:
    """Whether a fenced block is the solution rather than a usage example, a test or output.

    A solution defines the task's entry point; a stdin program reads its input. An
    "Example usage:" block after the solution (``print(f(...))``, ``assert f(...) == ...``)
    does neither.
    """
    if entry_points:
        return any(defines(code, name) for name in entry_points)
    return reads_stdin and _READS_STDIN.search(code) is not None


def _unclosed_block(text: str, start: int) -> tuple[str, str] | None:
    """(label, code) after a ```python or unlabeled fence at or after ``start`` that never
    closes (the generation ran out), else None."""
    # The first run of backticks that opens a fence is the one: any later run would have
    # closed it. Runs before it that open nothing ("```py`thon" inline, a backtick in the
    # info string) are skipped, a whole run at a time, which keeps a line of backticks linear;
    # a longer fence ("````python") opens with the run's last three backticks.
    fence, pos = None, text.find("```", start)
    while pos >= 0 and fence is None:
        run_end = _BACKTICKS.match(text, pos).end()
        fence = _OPEN_FENCE.match(text, run_end - 3)
        pos = text.find("```", run_end)
    if fence is None or (fence.group(1) and fence.group(1).lower() not in _PY_LABELS):
        return None
    return fence.group(1), text[fence.end() :]


def extract_program(text: str, entry_points: Sequence[str] = (), *, reads_stdin: bool = False) -> str:
    """The program in a completion.

    1. The last fenced block (```python or unlabeled, the trailing one included even if it
       never closes) that is the solution: one that defines one of ``entry_points`` (the
       function name; ``Solution`` or the method for LeetCode-style problems), or, for a
       stdin problem (``reads_stdin``), one that reads stdin. Models often follow the
       solution with an "Example usage:" block, which is not the program to grade.
    2. Else the last ```python block (the final version, after any drafts), else the last
       unlabeled block.
    3. Else the code after an unclosed ```python fence (the generation ran out), else the
       text before a stray closing fence, else the whole text (a bare function body, in the
       classic completion format).
    """
    fences = list(_FENCE.finditer(text))
    blocks = [(fence.group(1), fence.group(2)) for fence in fences]
    unclosed = _unclosed_block(text, fences[-1].end() if fences else 0)
    code_blocks = [body for label, body in blocks if not label or label.lower() in _PY_LABELS]
    code_blocks += [unclosed[1]] if unclosed else []
    solutions = [body for body in code_blocks if _is_solution(body, entry_points, reads_stdin)]
    if solutions:
        return solutions[-1].strip("\n")
    python_blocks = [body for label, body in blocks if label.lower() in _PY_LABELS]
    if python_blocks:
        return python_blocks[-1].strip("\n")
    unlabeled = [body for label, body in blocks if not label]
    if unlabeled:
        return unlabeled[-1].strip("\n")
    if unclosed and unclosed[0]:  # unlabeled, it may be a stray closing fence instead
        return unclosed[1].strip("\n")
    if "```" in text:
        return text[: text.index("```")].strip("\n")
    return text.strip("\n")


def functions_under_test(tests: Sequence[str]) -> tuple[str, ...]:
    """The functions that assert statements call by name (not builtins, not methods), in order.

    MBPP has no entry-point field; its tests (``assert remove_Occ("hello", "l") == "heo"``)
    name the function the solution must define.
    """
    names: list[str] = []
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if not hasattr(builtins, name) and name not in names:
                    names.append(name)
    return tuple(names)


def function_body(continuation: str) -> str:
    """The indented lines of a completion-style continuation, up to the first dedent."""
    kept: list[str] = []
    for line in continuation.split("\n"):
        if line.strip() and not line[0].isspace():
            break
        kept.append(line)
    return "\n".join(kept).rstrip() + "\n"


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines a top-level function or class called ``name``."""
    return re.search(rf"^(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.MULTILINE) is not None


def humaneval_program(prompt: str, code: str, test: str, entry_point: str) -> str:
    """Prompt, solution, tests, ``check(entry_point)``.

    A completion that defines the function is appended after the prompt (which keeps the
    prompt's imports and helper functions; the new definition replaces the stub); one that
    does not is taken as the function body, in the classic completion format.
    """
    solution = f"{prompt}\n{code}\n" if defines(code, entry_point) else prompt + function_body(code)
    return f"{solution}\n\n{test}\n\ncheck({entry_point})\n"


def mbpp_program(setup: str, code: str, tests: Sequence[str]) -> str:
    """Setup code, solution, then the task's assert statements."""
    return f"{setup}\n{code}\n\n" + "\n".join(tests) + "\n"


def grade_job(job: Mapping[str, Any], extracted: str, limits: SandboxLimits, allow_code_execution: bool) -> Grade:
    """Run a sandbox job and turn its outcome into a :class:`Grade`."""
    if not allow_code_execution:
        return Grade(None, extracted, "code execution disabled (dataset.allow_code_execution=false)")
    if not extracted.strip():
        return Grade(False, extracted, "empty program")
    result = run_sandboxed(dict(job), limits)
    if result.status == "error":
        return Grade(None, extracted, f"sandbox error: {result.detail}")
    return Grade(
        result.passed, extracted, result.detail if not result.passed else f"passed in {result.duration_s:.2f} s"
    )

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


class SandboxError(RuntimeError):
    """The sandbox itself could not run the program (it could not start, the judge broke)."""


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
# what may stand before an opening fence on its line: indentation, or a list item's marker
# ("1. ```python"), whose content is indented to the column after it
_FENCE_INDENT = re.compile(r"[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?")
_MAX_FENCE_INDENT = 64  # deeper than any nesting of lists
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
    return fence.group(1), _dedent(text[fence.end() :], _fence_indent(text, fence.start()))


def _fence_indent(text: str, fence_start: int) -> int:
    """How far the fence at ``fence_start`` is indented: the width of what stands before it
    on its line, when that is only indentation or a list marker (else 0: "Here: ```python")."""
    window = max(0, fence_start - _MAX_FENCE_INDENT)
    line_start = text.rfind("\n", window, fence_start) + 1
    if line_start == 0 and window > 0:
        return 0  # a long line before it: prose (and no rescan of a long line for every fence on it)
    prefix = text[line_start:fence_start].rstrip("`")  # a longer fence ("````python") opens with its last three
    return len(prefix) if _FENCE_INDENT.fullmatch(prefix) else 0


def _dedent(body: str, indent: int) -> str:
    """``body`` with up to ``indent`` leading spaces or tabs removed from each line, as CommonMark
    does for a fence indented by ``indent``: a block fenced inside a Markdown list carries the
    list's indentation on every line, which would hide its ``def`` and not parse. Only when the
    block's first line carries it: code that starts at the margin under an indented fence (or a
    list marker before the fence) is no list-indented block, and stripping it would break its nesting."""
    if not indent:
        return body
    lines = body.split("\n")
    code = []  # the block's lines, to its closing fence
    for line in lines:
        if line.lstrip(" \t").startswith("```"):
            break
        code.append(line)
    first = next((line for line in code if line.strip()), "")
    if len(first) - len(first.lstrip(" \t")) < indent:
        return body  # code at the margin under an indented fence ("1. ```python" then "def f"): kept as written
    return "\n".join(line[min(indent, len(line) - len(line.lstrip(" \t"))) :] for line in lines)


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

    A fenced block indented in Markdown (inside a numbered list) loses the fence's indentation
    on every line, as CommonMark reads it. With ``entry_points``, example usage the model
    wrote after the solution in the same block is dropped as well (:func:`strip_example_usage`).
    """
    program = _fenced_program(text, entry_points, reads_stdin)
    return strip_example_usage(program, entry_points) if entry_points else program


def _fenced_program(text: str, entry_points: Sequence[str], reads_stdin: bool) -> str:
    """:func:`extract_program`'s steps 1-3."""
    fences = list(_FENCE.finditer(text))
    blocks = [(fence.group(1), _dedent(fence.group(2), _fence_indent(text, fence.start()))) for fence in fences]
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
    name the function the solution must define. Builtins they call (``set(...)``) are not
    the solution's, unless the tests call nothing else: MBPP's task 126 asks for a function
    named ``sum`` (``assert sum(10, 15) == 6``).
    """
    names: list[str] = []
    shadowed: list[str] = []  # builtin names called: the entry point only when nothing else is
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                called = shadowed if hasattr(builtins, name) else names
                if name not in called:
                    called.append(name)
    return tuple(names or shadowed)


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


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
_MAX_CUTS = 200  # prefixes tried on a program that does not parse (the cut is nearly always near the end)


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _defines_any(tree: ast.Module, entry_points: Sequence[str]) -> bool:
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name in entry_points
        for node in tree.body
    )


def strip_example_usage(code: str, entry_points: Sequence[str]) -> str:
    """The solution of a function task without the example usage a model appends to it.

    Chat models follow the function, in the same block, with a demo: prints, asserts
    whose expected values they got wrong, ``input()``, ``unittest.main()``, or a line the
    token limit cut mid-way. The task's tests call the function themselves, and the demo
    is no part of the answer (as with a separate "Example usage:" block), so it must not
    make a correct function fail. Top-level statements after the last def, class or import
    are dropped, except assignments without calls (constants a function may read),
    assignments to a name the definitions read (a table built for the function), and
    loops, ``if``/``with`` blocks and expressions that fill such a table (``for i in
    range(100): TABLE[i] = 4 * i``, ``TABLE.update(...)``) without calling the solution or
    reading stdin (:func:`_builds_a_table`). A program that does not parse is first cut
    back to the longest prefix of whole top-level statements that parses. Unchanged
    (graded as it is) when no version defines one of ``entry_points``; not for stdin
    programs, whose top level is the program.
    """
    lines = code.split("\n")
    tree = _parse(code)
    if tree is None:
        cuts = [i for i, line in enumerate(lines) if i and line[:1].strip() and not line.startswith("#")]
        for cut in reversed(cuts[-_MAX_CUTS:]):
            tree = _parse("\n".join(lines[:cut]))
            if tree is not None:
                lines = lines[:cut]
                break
    if tree is None or not _defines_any(tree, entry_points):
        return code
    last = max(i for i, node in enumerate(tree.body) if isinstance(node, _DEFINITIONS))
    kept = lines[: tree.body[last].end_lineno]
    read = _names_read(tree.body[: last + 1])
    tables = read - _names_defined(tree.body)
    for node in tree.body[last + 1 :]:
        source = lines[node.lineno - 1 : node.end_lineno]
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            keep = _names_assigned(node) & read or not any(isinstance(n, ast.Call) for n in ast.walk(node))
        else:
            keep = _builds_a_table(node, "\n".join(source), tables, entry_points)
        if keep:
            kept += source
    return "\n".join(kept).rstrip("\n")


def _names_read(nodes: Sequence[ast.AST]) -> set[str]:
    """Global names the definitions among ``nodes`` read (not their parameters or locals): a
    table built after the function it serves (``SQUARES = [i * i for i in range(100)]``) is
    part of the solution, not a demo."""
    read: set[str] = set()
    for node in nodes:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        inside = list(ast.walk(node))
        local = {n.arg for n in inside if isinstance(n, ast.arg)}
        local |= {n.id for n in inside if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        read |= {n.id for n in inside if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local
    return read


def _names_defined(nodes: Sequence[ast.stmt]) -> set[str]:
    """The names top-level imports, functions and classes bind: modules and code, not tables."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


_BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Expr)


def _builds_a_table(node: ast.stmt, source: str, tables: set[str], entry_points: Sequence[str]) -> bool:
    """Whether a loop, ``if``/``with`` block or expression statement after the solution fills
    one of ``tables`` (globals the solution reads): it binds one, stores into one
    (``TABLE[i] = ...``) or calls one's method (``TABLE.append(...)``). A demo does none of
    this (``for x in xs: print(f(x))``), and one that calls the solution or reads stdin
    (empty under the judge) is a demo whatever it fills."""
    if not isinstance(node, _BLOCKS) or _READS_STDIN.search(source):
        return False
    written: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in entry_points:
            return False
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            written.add(n.id)
        elif isinstance(n, ast.Subscript | ast.Attribute) and isinstance(n.ctx, ast.Store):
            written.add(_base_name(n))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            written.add(_base_name(n.func))
    return bool(written & tables)


def _base_name(node: ast.expr) -> str:
    """The variable under a chain of subscripts and attributes: ``GRID`` of ``GRID[0][j]``."""
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _names_assigned(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}


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
        # Not a verdict on the program: raised so that the run records the chain with a
        # grade_error, regrades it on resume, and stops when the sandbox never works.
        raise SandboxError(result.detail)
    return Grade(
        result.passed, extracted, result.detail if not result.passed else f"passed in {result.duration_s:.2f} s"
    )

"""Program extraction, program assembly, and grading of correct and wrong programs."""

from __future__ import annotations

import pytest

from presto.tasks.base import Problem
from presto.tasks.code_grader import (
    defines,
    extract_program,
    function_body,
    functions_under_test,
    grade_job,
    humaneval_program,
    mbpp_program,
    strip_example_usage,
)
from presto.tasks.code_tasks import HumanEvalTask, LiveCodeBenchTask, MBPPTask
from presto.tasks.sandbox import SandboxLimits

LIMITS = SandboxLimits(timeout_s=5.0, memory_mb=512)


@pytest.mark.parametrize(
    ("text", "program"),
    [
        ("Here:\n```python\nx = 1\n```\nand more", "x = 1"),
        ("draft\n```python\nx = 1\n```\nfinal\n```python\nx = 2\n```", "x = 2"),
        ("```py\nx = 3\n```", "x = 3"),
        ("```\nx = 4\n```", "x = 4"),
        ("```text\nnot code\n```\n```python\nx = 5\n```\n```bash\nls\n```", "x = 5"),
        ("truncated\n```python\nx = 6\ny = 7", "x = 6\ny = 7"),
        ("x = 8\n```\ntrailing", "x = 8"),
        ("x = 9\n", "x = 9"),
    ],
)
def test_extract_program(text: str, program: str) -> None:
    assert extract_program(text) == program


SOLUTION = "def f(x):\n    return x + 1"
USAGE = "print(f(1))"


@pytest.mark.parametrize(
    "text",
    [
        f"```python\n{SOLUTION}\n```\nExample usage:\n```python\n{USAGE}\n```",
        f"```python\n{SOLUTION}\n```\nTests:\n```python\nassert f(1) == 2\n```",
        f"```\n{SOLUTION}\n```\nUsage:\n```python\n{USAGE}\n```\nOutput:\n```\n2\n```",
        f"Draft:\n```python\ndef f(x):\n    return x\n```\nFixed:\n```python\n{SOLUTION}\n```\n```python\n{USAGE}\n```",
    ],
)
def test_extract_program_prefers_the_block_that_defines_the_entry_point(text: str) -> None:
    assert extract_program(text, ("f",)) == SOLUTION


@pytest.mark.parametrize(
    "text",
    [
        f"The tests:\n```python\nassert f(1) == 2\n```\nSolution:\n```python\n{SOLUTION}\n",
        f"Usage first:\n```python\n{USAGE}\n```\nNow:\n```python\n{SOLUTION}\n",
        f"Solution:\n```Python\n{SOLUTION}\n",
        f"Solution:\n```\n{SOLUTION}\n",
    ],
)
def test_extract_program_takes_the_solution_from_an_unclosed_last_block(text: str) -> None:
    """A generation that runs out inside its solution block leaves it unclosed."""
    assert extract_program(text, ("f",)) == SOLUTION


def test_extract_program_unclosed_python_block_in_any_case() -> None:
    assert extract_program(f"Solution:\n```Python\n{SOLUTION}\n") == SOLUTION
    assert extract_program(f"Solution:\n```PY3\n{SOLUTION}\n") == SOLUTION


def test_extract_program_for_leetcode_style_and_stdin_problems() -> None:
    solution = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]"
    usage = "print(Solution().twoSum([2, 7], 9))"
    text = f"```python\n{solution}\n```\nExample:\n```python\n{usage}\n```"
    assert extract_program(text, ("Solution", "twoSum")) == solution
    program = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)"
    text = f"```python\n{program}\n```\nFor example:\n```python\n# prints 3 for input 1 2\nprint(1 + 2)\n```"
    assert extract_program(text, reads_stdin=True) == program
    assert extract_program(
        "```python\ndef main():\n    print(input())\n```\n```python\nmain()\n```", reads_stdin=True
    ) == ("def main():\n    print(input())")


def test_extract_program_without_a_solution_block_keeps_the_old_rule() -> None:
    body = "    return x + 1"
    assert extract_program(f"```python\n{body}\n```\n```python\n{USAGE}\n```", ("f",)) == USAGE
    assert extract_program(body, ("f",)) == body
    assert extract_program(f"```python\n{body}\n```", ("f",)) == body


def test_extract_program_a_backtick_in_the_info_string_opens_no_block() -> None:
    """CommonMark: the info string of a backtick fence may not contain a backtick, so
    "```py`thon" is no fence and the lines after it are no program."""
    text = f"Answer:\n```py`thon\n{SOLUTION}\n```\n"
    assert SOLUTION not in extract_program(text, ("f",))
    assert SOLUTION not in extract_program(f"Answer:\n```py`thon\n{SOLUTION}\n", ("f",))  # nor an unclosed one


def test_extract_program_an_unclosed_fence_after_one_that_opens_nothing() -> None:
    """Inline backticks that open no fence do not hide the unclosed block after them."""
    text = f"I put code in ```python` fences:\n```python\n{SOLUTION}\n"
    assert extract_program(text, ("f",)).strip() == SOLUTION.strip()


@pytest.mark.parametrize(
    "text",
    [
        f"````python\n{SOLUTION}\n````\n",
        f"Solution:\n````python\n{SOLUTION}\n",  # unclosed
        f"Solution:\n``````\n{SOLUTION}\n",  # unclosed, unlabeled
    ],
)
def test_extract_program_longer_fences(text: str) -> None:
    assert extract_program(text, ("f",)) == SOLUTION


def test_extract_program_on_a_run_of_backticks() -> None:
    assert extract_program("`" * 3000) == ""
    assert extract_program("`" * 3000 + f"\n{SOLUTION}\n", ("f",)) == SOLUTION


def test_functions_under_test() -> None:
    tests = ["assert math.isclose(area(2), 12.56, rel_tol=0.01)", "assert set(common([1], [1])) == {1}", "bad("]
    assert functions_under_test(tests) == ("area", "common")
    # A task whose function shadows a builtin (MBPP 126: "sum"): the only name the tests call.
    assert functions_under_test(["assert sum(10, 15) == 6", "assert sum(4, 6) == 3"]) == ("sum",)


def test_mbpp_demo_after_a_builtin_named_solution_does_not_fail_it() -> None:
    task = MBPPTask({"allow_code_execution": True, "timeout_s": 5})
    tests = ["assert sum(10, 15) == 6", "assert sum(4, 6) == 3"]  # sum of common divisors
    problem = Problem(0, "mbpp/126", [], "", {"tests": tests, "setup": ""})
    good = "def sum(a, b):\n    return __builtins__['sum'](d for d in range(1, min(a, b) + 1) if a % d == 0 == b % d)"
    good = good.replace("__builtins__['sum']", "__import__('builtins').sum")
    assert task.grade(problem, f"```python\n{good}\nassert sum(1, 1) == 99\n```").correct is True


def test_function_body_stops_at_dedent() -> None:
    assert function_body("    return 1\n\n    # c\nprint('x')\n    y") == "    return 1\n\n    # c\n"


def test_defines() -> None:
    assert defines("import os\ndef foo(x):\n    pass", "foo")
    assert defines("class foo:\n    pass", "foo")
    assert not defines("def foobar(x):\n    pass", "foo")
    assert not defines("    def foo(x):\n        pass", "foo")


def test_humaneval_program_forms() -> None:
    prompt = 'from typing import List\n\ndef f(xs: List[int]) -> int:\n    """Sum."""\n'
    full = humaneval_program(prompt, "def f(xs):\n    return sum(xs)", "def check(c):\n    assert c([1]) == 1", "f")
    body = humaneval_program(prompt, "    return sum(xs)\nprint('junk')", "def check(c):\n    pass", "f")
    assert full.startswith(prompt) and full.rstrip().endswith("check(f)")
    assert "print('junk')" not in body and prompt + "    return sum(xs)\n" in body


def test_mbpp_program() -> None:
    program = mbpp_program("import math", "def g(a):\n    return a", ["assert g(1) == 1"])
    assert program.index("import math") < program.index("def g") < program.index("assert g(1)")


def test_correct_and_wrong_programs() -> None:
    good = mbpp_program("", "def sq(x):\n    return x * x", ["assert sq(3) == 9", "assert sq(-2) == 4"])
    wrong = mbpp_program("", "def sq(x):\n    return x + x", ["assert sq(3) == 9", "assert sq(-2) == 4"])
    syntax = mbpp_program("", "def sq(x) return x", ["assert sq(3) == 9"])
    raises = mbpp_program("", "def sq(x):\n    raise ValueError('no')", ["assert sq(3) == 9"])
    assert grade_job({"kind": "script", "code": good}, "code", LIMITS, True).correct is True
    for program in (wrong, syntax, raises):
        assert grade_job({"kind": "script", "code": program}, "code", LIMITS, True).correct is False


def test_exit_before_tests_is_not_a_pass() -> None:
    for early_exit in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "exit()"):
        program = mbpp_program("", f"def sq(x):\n    return 0\n{early_exit}", ["assert sq(3) == 9"])
        assert grade_job({"kind": "script", "code": program}, "code", LIMITS, True).correct is False, early_exit


def test_main_guard_does_not_run_in_function_tasks() -> None:
    code = "def sq(x):\n    return x * x\nif __name__ == '__main__':\n    input()\n    raise SystemExit(1)"
    program = mbpp_program("", code, ["assert sq(3) == 9"])
    assert grade_job({"kind": "script", "code": program}, "code", LIMITS, True).correct is True


def test_execution_disabled_is_ungradable() -> None:
    grade = grade_job({"kind": "script", "code": "assert True"}, "assert True", LIMITS, False)
    assert grade.correct is None and "disabled" in grade.detail


def test_empty_program_is_wrong() -> None:
    assert grade_job({"kind": "script", "code": ""}, "  \n", LIMITS, True).correct is False


def test_stdio_output_comparison() -> None:
    cases = [{"input": "3\n", "output": "1.50\n2\n"}]
    exact = "n = int(input())\nprint('1.50')\nprint(2)"
    numeric = "n = int(input())\nprint(n / 2)\nprint(2.0)"
    wrong = "print(1)\nprint(2)"
    threads = (
        "import threading, sys\nthreading.stack_size(2**26)\nsys.setrecursionlimit(10**5)\n"
        "def main():\n    n = int(input())\n    print(n / 2)\n    print(2)\n"
        "threading.Thread(target=main).start()"
    )
    for code, expected in ((exact, True), (numeric, True), (wrong, False), (threads, True)):
        job = {"kind": "stdio", "code": code, "cases": cases}
        assert grade_job(job, code, LIMITS, True).correct is expected, code


def test_stdio_program_may_end_with_os_exit() -> None:
    """os._exit(0) skips the child's report; a stdio program's output still decides."""
    cases = [{"input": "1 2\n", "output": "3\n"}]
    exits = "import os, sys\nprint(sum(map(int, input().split())))\nsys.stdout.flush()\nos._exit({})\n"
    for code, expected in ((exits.format(0), True), (exits.format(1), False), ("import os\nos._exit(0)\n", False)):
        job = {"kind": "stdio", "code": code, "cases": cases}
        assert grade_job(job, code, LIMITS, True).correct is expected, code
    skips_asserts = "import os\nos._exit(0)\nassert False\n"  # a script's asserts must run
    assert grade_job({"kind": "script", "code": skips_asserts}, skips_asserts, LIMITS, True).correct is False


SQ = "import math\n\ndef sq(x):\n    return x * x"


@pytest.mark.parametrize(
    "demo",
    [
        "\n\n# Example usage\nassert sq(3) == 10",  # the model got the expected value wrong
        "\nprint(sq())",  # a demo call that raises
        "\nx = int(input('Enter: '))\nprint(sq(x))",  # stdin is empty under the judge
        "\n\n# Example usage\nprint(sq(3), sq(4",  # cut by the token limit mid-line
        "\nprint('unterminated",
    ],
)
def test_strip_example_usage_drops_the_demo_after_the_solution(demo: str) -> None:
    assert strip_example_usage(SQ + demo, ("sq",)) == SQ


def test_strip_example_usage_keeps_trailing_imports_and_classes() -> None:
    unittest_demo = "\nimport unittest\nclass T(unittest.TestCase):\n    def test(self):\n        pass"
    assert strip_example_usage(SQ + unittest_demo + "\nunittest.main()", ("sq",)) == SQ + unittest_demo
    assert strip_example_usage(SQ + "\nimport sys\nsys.exit(0)", ("sq",)) == SQ + "\nimport sys"


def test_strip_example_usage_keeps_what_the_solution_needs() -> None:
    code = "import sys\nsys.setrecursionlimit(10000)\nTABLE = {1: 1}\ndef sq(x):\n    return TABLE.get(x, x * x)"
    assert strip_example_usage(code, ("sq",)) == code
    later = "def sq(x):\n    return LIMIT and x * x\nLIMIT: int = 10\nprint(sq(2))\nFACTOR = [1, 2]"
    assert (
        strip_example_usage(later, ("sq",))
        == "def sq(x):\n    return LIMIT and x * x\nLIMIT: int = 10\nFACTOR = [1, 2]"
    )
    assert strip_example_usage(SQ + "\nimport doctest\ndoctest.testmod()", ("sq",)) == SQ + "\nimport doctest"
    # A table the function reads, built after it (with calls): part of the solution; a demo
    # result nothing reads is not.
    table = "def sq(x):\n    return SQUARES[x]\nSQUARES = [i * i for i in range(100)]\nSQUARES += [0]"
    assert strip_example_usage(table + "\nresult = sq(3)\nprint(result)", ("sq",)) == table


@pytest.mark.parametrize(
    "code",
    [
        "def sq(x):\n    if x:\n        return x *",  # the solution itself is cut
        "def helper(x):\n    return x\ndef sq(x):\n    return helper(",
        "    return x * x\nprint(sq(2))",  # a bare body (HumanEval completion format)
        "print(sq(2))",
        "def other(x):\n    return x\nprint(1)",
    ],
)
def test_strip_example_usage_leaves_other_programs_alone(code: str) -> None:
    assert strip_example_usage(code, ("sq",)) == code


def _mbpp_grade(completion: str) -> bool | None:
    task = MBPPTask({"allow_code_execution": True, "timeout_s": 5})
    problem = Problem(0, "mbpp/1", [], "", {"tests": ["assert sq(3) == 9", "assert sq(-2) == 4"], "setup": ""})
    return task.grade(problem, completion).correct


def test_mbpp_demo_after_a_correct_solution_does_not_fail_it() -> None:
    good, wrong = "def sq(x):\n    return x * x", "def sq(x):\n    return x + x"
    for demo in ("\nassert sq(2) == 5", "\nn = int(input())\nprint(sq(n))", "\nprint(sq(3), sq(", "\nexit()"):
        assert _mbpp_grade(f"Here:\n```python\n{good}\n{demo}\n```") is True, demo
        assert _mbpp_grade(f"Here:\n```python\n{wrong}\n{demo}\n```") is False, demo


def test_livecodebench_call_demo_after_a_correct_solution_does_not_fail_it() -> None:
    task = LiveCodeBenchTask({"allow_code_execution": True, "timeout_s": 5})
    cases = [{"input": "[1, 2, 3]", "output": "6"}]
    problem = Problem(0, "lcb/1", [], "", {"mode": "call", "func_name": "total", "cases": cases})
    solution = "class Solution:\n    def total(self, nums: List[int]) -> int:\n        return {}\n"
    for demo in ("assert Solution().total([1]) == 2", "print(Solution().total(list(map(int, input().split()))))"):
        for body, expected in (("sum(nums)", True), ("max(nums)", False)):
            completion = f"```python\n{solution.format(body)}\n{demo}\n```"
            assert task.grade(problem, completion).correct is expected, (demo, body)


TRUNCATE = "def truncate_number(number: float) -> float:\n    return number % 1.0"
IN_A_LIST = "1. **Implementation**:\n   ```python\n{}\n   ```\n2. **Complexity**: O(1)."
SIGNATURE = "def truncate_number(number: float) -> float:"


@pytest.mark.parametrize(
    ("text", "program"),
    [
        (IN_A_LIST.format(f"   {SIGNATURE}\n       return number % 1.0"), TRUNCATE),
        # tab-indented: the fence's own indentation comes off each line, the body's stays
        (f"1. Code:\n\t```python\n\t{SIGNATURE}\n\t\treturn number % 1.0\n\t```",
         f"{SIGNATURE}\n\treturn number % 1.0"),
        # a line indented less than the fence loses what it has; a blank line stays blank
        (f"  ```python\n  {SIGNATURE}\n\n      return number % 1.0\n x = 1\n  ```",
         f"{SIGNATURE}\n\n    return number % 1.0\nx = 1"),
        # a fence on a list item's line: its content is indented to the column after the marker
        (f"- ```python\n  {SIGNATURE}\n      return number % 1.0\n  ```", TRUNCATE),
        (f"1. ````python\n   {SIGNATURE}\n       return number % 1.0\n   ````", TRUNCATE),
        # the unclosed last block of a cut generation, indented the same way
        (f"1. Code:\n   ```python\n   {SIGNATURE}\n       return number % 1.0\n", TRUNCATE),
    ],
)  # fmt: skip
def test_extract_program_strips_the_indentation_of_a_fence_in_a_list(text: str, program: str) -> None:
    """CommonMark removes up to the opening fence's indentation from each content line."""
    assert extract_program(text, ("truncate_number",)) == program


def test_a_solution_fenced_in_a_markdown_list_passes() -> None:
    prompt = 'def truncate_number(number: float) -> float:\n    """The decimal part."""\n'
    test = "def check(candidate):\n    assert candidate(3.5) == 0.5\n"
    reference = {"prompt": prompt, "test": test, "entry_point": "truncate_number"}
    task = HumanEvalTask({"allow_code_execution": True, "timeout_s": 5})
    problem = Problem(0, "HumanEval/2", [], "", reference)
    good = IN_A_LIST.format(f"   {SIGNATURE}\n       return number % 1.0")
    wrong = IN_A_LIST.format(f"   {SIGNATURE}\n       return number // 1.0")
    assert task.grade(problem, good).correct is True
    assert task.grade(problem, wrong).correct is False
    listed = "1. Solution:\n   ```python\n   def sq(x):\n       return x * x\n   ```"
    assert _mbpp_grade(listed) is True
    assert _mbpp_grade(listed.replace("x * x", "x + x")) is False


TABLE_LOOP = "def square_perimeter(a):\n    return TABLE[a]\nTABLE = {}\nfor i in range(100):\n    TABLE[i] = 4 * i"


@pytest.mark.parametrize(
    "code",
    [
        TABLE_LOOP,
        "def sq(x):\n    return SQUARES[x]\nSQUARES = []\nwhile len(SQUARES) < 10:\n    SQUARES.append(len(SQUARES))",
        "def sq(x):\n    return SQUARES[x]\nSQUARES = {}\nSQUARES.update({i: i * i for i in range(10)})",
        "def sq(x):\n    return LIMIT * x\nif True:\n    LIMIT = 1",
        "def sq(x):\n    return GRID[0][x]\nGRID = [[0] * 3]\nfor j in range(3):\n    GRID[0][j] = j * j",
    ],
)
def test_strip_example_usage_keeps_statements_that_build_what_the_solution_reads(code: str) -> None:
    assert strip_example_usage(code + "\nprint(sq(2))", ("sq", "square_perimeter")) == code


@pytest.mark.parametrize(
    "demo",
    [
        "\nfor i in range(3):\n    print(sq(i))",  # a demo loop: it fills nothing the solution reads
        "\nfor i in range(3):\n    TABLE[i] = sq(i)",  # it calls the solution itself
        "\nif __name__ == '__main__':\n    n = int(input())\n    print(sq(n))",
        "\nfor line in open(0):\n    TABLE[0] = line",  # it reads stdin, which is empty under the judge
        "\nwith open('x.txt') as f:\n    print(f.read())",
        "\nassert sq(1) == 2",
    ],
)
def test_strip_example_usage_still_drops_loops_and_blocks_of_example_usage(demo: str) -> None:
    code = "TABLE = {}\ndef sq(x):\n    return TABLE.get(x, x * x)"
    assert strip_example_usage(code + demo, ("sq",)) == code


def test_strip_example_usage_drops_method_calls_on_modules_the_solution_reads() -> None:
    """``sys.exit(0)`` after a solution that reads ``sys.maxsize`` is a demo's end, not a table."""
    code = "import sys\nimport unittest\n"
    code += "def sq(x):\n    return min(x * x, sys.maxsize)\nclass T(unittest.TestCase):\n    pass"
    assert strip_example_usage(code + "\nunittest.main()\nsys.exit(0)", ("sq",)) == code


def test_mbpp_table_filled_by_a_loop_after_the_function_passes() -> None:
    task = MBPPTask({"allow_code_execution": True, "timeout_s": 5})
    tests = ["assert square_perimeter(10) == 40", "assert square_perimeter(5) == 20"]
    problem = Problem(0, "mbpp/17", [], "", {"tests": tests, "setup": ""})
    completion = "```python\n" + TABLE_LOOP.replace("\nTABLE = {}", "\n\nTABLE = {}") + "\n```"
    assert task.grade(problem, completion).correct is True
    assert task.grade(problem, completion.replace("4 * i", "2 * i")).correct is False


@pytest.mark.parametrize(
    "text",
    [
        "    ```python\ndef f(x):\n    if x:\n        return 1\n    return 0\n```\n",
        "10. ```python\ndef f(x):\n    if x:\n        return 1\n    return 0\n```\n",
        "1. ```python\ndef f(x):\n\tif x:\n\t\treturn 1\n\treturn 0\n```\n",
    ],
)
def test_code_at_the_margin_under_an_indented_fence_keeps_its_nesting(text):
    """Second review of the list-indentation fix: stripping the fence's indentation from code that
    does not carry it broke the code's own nesting."""
    import ast

    ast.parse(extract_program(text, ("f",)))

"""Each loader on a small fixture written in the hub's own column layout, read offline."""

from __future__ import annotations

import base64
import json
import os
import pickle
import socket
import zlib
from pathlib import Path

import pytest

from presto.tasks import Grade, Problem, Task, TaskDataError, build_task
from tests.conftest import gpqa_rows

CONF = Path(__file__).resolve().parents[2] / "conf" / "dataset"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def lcb_encode(cases: list[dict]) -> str:
    """LiveCodeBench's private-test encoding: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail any outgoing connection and record that ``datasets`` ran in offline mode."""
    import datasets

    seen: list[str] = []
    real_load = datasets.load_dataset

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(os.environ.get("HF_DATASETS_OFFLINE", ""))
        return real_load(*args, **kwargs)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted while loading a local file")

    monkeypatch.setattr(datasets, "load_dataset", spy)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return seen


def check_problems(task: Task, problems: list[Problem], n: int) -> None:
    assert isinstance(task, Task)
    assert len(problems) == n
    assert [p.index for p in problems] == list(range(n))
    for p in problems:
        assert p.messages and p.messages[-1]["role"] == "user" and p.messages[-1]["content"]
        assert isinstance(p.raw_prompt, str) and p.raw_prompt


def test_toy_gives_empty_prompts_and_no_grades() -> None:
    task = build_task({"name": "toy", "num_prompts": 3})
    problems = task.load()
    assert [(p.index, p.messages, p.raw_prompt, p.reference) for p in problems] == [(i, [], "", None) for i in range(3)]
    assert task.grade(problems[0], "anything") == Grade(None, None, task.grade(problems[0], "x").detail)
    assert task.grade(problems[0], "anything").correct is None


def test_math500_jsonl(tmp_path: Path, no_network: list[str]) -> None:
    rows = [
        {
            "problem": f"What is ${k}/2$?",
            "solution": "...",
            "answer": f"\\frac{{{k}}}{{2}}",
            "subject": "Algebra",
            "level": 1,
            "unique_id": f"test/algebra/{k}.json",
        }
        for k in (1, 3, 5)
    ]
    path = write_jsonl(tmp_path / "math500.jsonl", rows)
    task = build_task({"name": "math500", "num_prompts": 2, "path": str(path)})
    problems = task.load()
    check_problems(task, problems, 2)
    assert no_network == []  # read with the json module: datasets is not involved
    assert problems[1].problem_id == "test/algebra/3.json"
    assert "\\boxed{}" in problems[0].messages[-1]["content"]
    assert task.grade(problems[1], "So it is $\\boxed{1.5}$.").correct is True
    assert task.grade(problems[1], "So it is $\\boxed{\\dfrac{3}{2}}$.").correct is True
    assert task.grade(problems[1], "So it is $\\boxed{2}$.").correct is False


def test_aime24_parquet(tmp_path: Path, no_network: list[str]) -> None:
    rows = [{"ID": "2024-I-1", "Problem": "Find x.", "Solution": "x = 204", "Answer": 204}]
    path = write_parquet(tmp_path / "aime24.parquet", rows)
    task = build_task({"name": "aime24", "path": str(path)})
    (problem,) = task.load()
    assert problem.problem_id == "aime24/2024-I-1" and problem.reference == 204
    assert task.grade(problem, "... \\boxed{204}").correct is True
    assert task.grade(problem, "... \\boxed{0204}").correct is True
    assert task.grade(problem, "... \\boxed{204.5}").correct is False
    assert task.grade(problem, "... \\boxed{205}").correct is False


def test_aime25_parquet(tmp_path: Path, no_network: list[str]) -> None:
    rows = [{"problem_idx": 1, "problem": "Find the sum.", "answer": 70, "problem_type": ["Number Theory"]}]
    path = write_parquet(tmp_path / "aime25.parquet", rows)
    task = build_task({"name": "aime25", "path": str(path)})
    (problem,) = task.load()
    assert problem.problem_id == "aime25/1"
    assert task.grade(problem, "The answer is \\boxed{70}.").correct is True
    assert task.grade(problem, "The answer is 70.").correct is True
    assert task.grade(problem, "The answer is \\boxed{71}.").correct is False


def test_gpqa_shuffles_by_seed_and_index(tmp_path: Path, no_network: list[str]) -> None:
    rows = gpqa_rows(12, Subdomain="Physics")
    path = write_jsonl(tmp_path / "gpqa.jsonl", rows)
    cfg = {"name": "gpqa_diamond", "num_prompts": 12, "path": str(path), "seed": 1}
    first, again = build_task(cfg).load(), build_task(cfg).load()
    other_seed = build_task({**cfg, "seed": 2}).load()
    assert [p.messages for p in first] == [p.messages for p in again]
    assert [p.reference for p in first] != [p.reference for p in other_seed]
    assert len({p.reference["answer"] for p in first}) > 1  # the correct answer is not always "A"
    task = build_task(cfg)
    for k, p in enumerate(first):
        letter = p.reference["answer"]
        assert f"({letter}) right {k}" in p.messages[-1]["content"]
        assert task.grade(p, f"Reasoning...\nAnswer: {letter}").correct is True
        wrong = next(x for x in "ABCD" if x != letter)
        assert task.grade(p, f"Reasoning...\nAnswer: {wrong}").correct is False
    assert first[0].problem_id == "rec0"


def test_mmlu_parquet_with_integer_answers(tmp_path: Path, no_network: list[str]) -> None:
    rows = [
        {"question": "2+2?", "subject": "elementary_mathematics", "choices": ["3", "4", "5", "6"], "answer": 1},
        {
            "question": "Capital of France?",
            "subject": "geography",
            "choices": ["Rome", "Oslo", "Paris", "Bern"],
            "answer": 2,
        },
    ]
    path = write_parquet(tmp_path / "mmlu.parquet", rows)
    task = build_task({"name": "mmlu", "path": str(path)})
    problems = task.load()
    check_problems(task, problems, 2)
    assert [p.reference["answer"] for p in problems] == ["B", "C"]
    assert "(C) Paris" in problems[1].messages[-1]["content"]
    assert task.grade(problems[1], "The answer is (C).").correct is True
    assert task.grade(problems[1], "Answer: A").correct is False


@pytest.mark.parametrize(("answer", "letter"), [("2", "C"), (" 0 ", "A"), ("C", "C"), ("b", "B"), (3, "D")])
def test_mmlu_answer_as_digit_string_or_letter(tmp_path: Path, answer: object, letter: str) -> None:
    row = {"question": "q", "subject": "s", "choices": ["w", "x", "y", "z"], "answer": answer}
    path = write_jsonl(tmp_path / "mmlu.jsonl", [row])
    (problem,) = build_task({"name": "mmlu", "path": str(path)}).load()
    assert problem.reference["answer"] == letter


def mmlu_pro_row(question_id: int, options: list[str], letter: str) -> dict:
    """A row in TIGER-Lab/MMLU-Pro's layout."""
    row = {
        "question_id": question_id,
        "question": f"Question {question_id}?",
        "options": options,
        "answer": letter,
        "answer_index": "ABCDEFGHIJ".index(letter),
        "cot_content": "",
        "category": "physics",
        "src": "ori_mmlu-high_school_physics",
    }
    return row


TEN = [f"option {k}" for k in range(10)]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_mmlu_pro_layout_loads(tmp_path: Path, no_network: list[str], suffix: str) -> None:
    rows = [mmlu_pro_row(70, TEN, "J"), mmlu_pro_row(71, ["yes", "no", "maybe"], "B")]
    path = tmp_path / f"mmlu_pro.{suffix}"
    write_jsonl(path, rows) if suffix == "jsonl" else write_parquet(path, rows)
    task = build_task({"name": "mmlu_pro", "path": str(path)})
    problems = task.load()
    check_problems(task, problems, 2)
    assert [p.problem_id for p in problems] == ["mmlu_pro/70", "mmlu_pro/71"]
    assert [p.reference for p in problems] == [{"answer": "J", "num_choices": 10}, {"answer": "B", "num_choices": 3}]
    prompt = problems[0].messages[-1]["content"]
    assert all(f"({letter}) option {k}" in prompt for k, letter in enumerate("ABCDEFGHIJ"))
    assert "(K)" not in prompt and "A, B, C, D, E, F, G, H, I or J" in prompt
    assert task.grade(problems[0], "So the answer is \\boxed{J}").correct is True
    assert task.grade(problems[0], "So the answer is \\boxed{I}").correct is False
    assert task.grade(problems[1], "Answer: B").correct is True


def test_mmlu_pro_answer_index_as_a_whole_float(tmp_path: Path, no_network: list[str]) -> None:
    """A pandas export of a column with a missing value stores its integers as floats (2.0)."""
    row = {**mmlu_pro_row(5, ["w", "x", "y", "z"], "C"), "answer_index": 2.0}
    (problem,) = build_task({"name": "mmlu_pro", "path": str(write_jsonl(tmp_path / "p.jsonl", [row]))}).load()
    assert problem.reference["answer"] == "C"


def test_mmlu_pro_drops_placeholder_options_but_not_the_answer(tmp_path: Path) -> None:
    padded = ["a", "N/A", "b", "c", "N/A", "N/A", "d", "N/A", "e", "N/A"]
    rows = [
        mmlu_pro_row(1, padded, "G"),  # "d", after three kept options (a, b, c): D of A-E
        mmlu_pro_row(2, ["x", "y", "N/A", "z"], "C"),  # the answer itself is "N/A": kept
        {**mmlu_pro_row(3, ["x", "y", "z"], "B"), "question_id": None, "category": "law"},  # no id: category/row
    ]
    path = write_jsonl(tmp_path / "mmlu_pro.jsonl", rows)
    task = build_task({"name": "mmlu_pro", "path": str(path)})
    first, second, third = task.load()
    assert first.reference == {"answer": "D", "num_choices": 5}
    assert "N/A" not in first.messages[-1]["content"] and "(D) d\n(E) e\n" in first.messages[-1]["content"]
    assert task.grade(first, "\\boxed{D}").correct is True
    assert second.reference == {"answer": "C", "num_choices": 4} and "(C) N/A" in second.messages[-1]["content"]
    assert third.problem_id == "law/2"


def test_mmlu_pro_yaml_loads_a_local_file(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "mmlu_pro.yaml"), resolve=True)
    assert cfg["hub_id"] == "TIGER-Lab/MMLU-Pro" and cfg["split"] == "test"
    path = write_jsonl(tmp_path / "pro.jsonl", [mmlu_pro_row(5, TEN, "C")])
    (problem,) = build_task({**cfg, "path": str(path), "seed": 0}).load()
    assert problem.problem_id == "mmlu_pro/5" and problem.reference["answer"] == "C"


def test_a_rewritten_file_is_read_again(tmp_path: Path) -> None:
    """Same path, same size, same modification time, new content: the new rows are read."""
    path = tmp_path / "m.jsonl"
    cfg = {"name": "math500", "path": str(path)}
    path.write_text(json.dumps({"problem": "p", "answer": "1"}) + "\n")
    assert build_task(cfg).load()[0].reference == "1"
    stat = path.stat()
    path.write_text(json.dumps({"problem": "p", "answer": "9"}) + "\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert build_task(cfg).load()[0].reference == "9"


def test_mbpp_full_layout(tmp_path: Path, no_network: list[str]) -> None:
    rows = [
        {
            "task_id": 11,
            "text": "Write a python function to add two numbers.",
            "code": "def add(a, b):\n    return a + b",
            "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
            "test_setup_code": "",
            "challenge_test_list": [],
        }
    ]
    path = write_jsonl(tmp_path / "mbpp.jsonl", rows)
    task = build_task({"name": "mbpp", "path": str(path), "allow_code_execution": True, "timeout_s": 5})
    (problem,) = task.load()
    assert problem.problem_id == "mbpp/11"
    assert "assert add(1, 2) == 3" in problem.messages[-1]["content"]
    assert task.grade(problem, "```python\ndef add(a, b):\n    return a + b\n```").correct is True
    assert task.grade(problem, "```python\ndef add(a, b):\n    return a - b\n```").correct is False
    usage = "```python\ndef add(a, b):\n    return a + b\n```\nExample:\n```python\nprint(add(1, 2))\n```"
    assert task.grade(problem, usage).correct is True  # the solution, not the usage example


def test_mbpp_sanitized_layout(tmp_path: Path, no_network: list[str]) -> None:
    rows = [
        {
            "source_file": "x.py",
            "task_id": 12,
            "prompt": "Write a function to find the gcd.",
            "code": "import math\ndef g(a, b):\n    return math.gcd(a, b)",
            "test_imports": ["import math"],
            "test_list": ["assert g(4, 6) == math.gcd(4, 6)"],
        }
    ]
    path = write_jsonl(tmp_path / "mbpp_sanitized.jsonl", rows)
    task = build_task({"name": "mbpp", "path": str(path), "allow_code_execution": True, "timeout_s": 5})
    (problem,) = task.load()
    assert problem.reference["setup"] == "import math"
    assert task.grade(problem, "```python\ndef g(a, b):\n    return math.gcd(a, b)\n```").correct is True


def test_humaneval_hub_layout_file(tmp_path: Path, no_network: list[str]) -> None:
    rows = [
        {
            "task_id": "HumanEval/X",
            "prompt": 'def inc(x: int) -> int:\n    """Return x + 1."""\n',
            "canonical_solution": "    return x + 1\n",
            "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n",
            "entry_point": "inc",
        }
    ]
    path = write_jsonl(tmp_path / "humaneval.jsonl", rows)
    task = build_task({"name": "humaneval", "path": str(path), "allow_code_execution": True, "timeout_s": 5})
    (problem,) = task.load()
    assert problem.problem_id == "HumanEval/X"
    assert problem.raw_prompt == rows[0]["prompt"]
    assert "def inc(x: int) -> int:" in problem.messages[-1]["content"]
    full = "Sure:\n```python\ndef inc(x: int) -> int:\n    return x + 1\n```\nDone."
    assert task.grade(problem, full).correct is True
    assert task.grade(problem, "    return x + 1\n\ndef unrelated():\n    pass\n").correct is True  # body only
    assert task.grade(problem, "```python\ndef inc(x):\n    return x\n```").correct is False
    usage = f"{full}\nExample usage:\n```python\nprint(inc(1))\n```"
    assert task.grade(problem, usage).correct is True  # the solution, not the usage example


def test_humaneval_defaults_to_the_package_file(no_network: list[str]) -> None:
    task = build_task({"name": "humaneval", "num_prompts": 20})
    problems = task.load()
    check_problems(task, problems, 20)
    assert problems[0].problem_id == "HumanEval/0"
    assert no_network == []  # the package's own file, read with the json module
    graded = task.grade(problems[0], "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```")
    assert graded.correct is None and "disabled" in graded.detail  # opt-in


STARTER = "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        "


def test_livecodebench_stdin_and_functional(tmp_path: Path, no_network: list[str]) -> None:
    stdin_public = [{"input": "3\n1 2 3\n", "output": "6\n", "testtype": "stdin"}]
    stdin_private = [{"input": "2\n10 -3\n", "output": "7\n", "testtype": "stdin"}]
    fn_public = [{"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"}]
    fn_private = [{"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional"}]
    rows = [
        {
            "question_title": "Sum",
            "question_content": "Read N and N integers; print their sum.",
            "platform": "atcoder",
            "question_id": "abc000_a",
            "contest_id": "abc000",
            "contest_date": "2025-01-04T00:00:00",
            "starter_code": "",
            "difficulty": "easy",
            "public_test_cases": json.dumps(stdin_public),
            "private_test_cases": lcb_encode(stdin_private),
            "metadata": "{}",
        },
        {
            "question_title": "Two Sum",
            "question_content": "Return indices of the two numbers adding up to target.",
            "platform": "leetcode",
            "question_id": "1",
            "contest_id": "weekly-contest-0",
            "contest_date": "2025-01-05T00:00:00",
            "starter_code": STARTER,
            "difficulty": "easy",
            "public_test_cases": json.dumps(fn_public),
            "private_test_cases": lcb_encode(fn_private),
            "metadata": json.dumps({"func_name": "twoSum"}),
        },
    ]
    path = write_jsonl(tmp_path / "lcb.jsonl", rows)
    task = build_task({"name": "livecodebench", "path": str(path), "allow_code_execution": True, "timeout_s": 5})
    stdin_problem, fn_problem = task.load()
    assert stdin_problem.reference["mode"] == "stdio" and len(stdin_problem.reference["cases"]) == 2
    assert fn_problem.reference["mode"] == "call" and fn_problem.reference["func_name"] == "twoSum"
    assert "class Solution" in fn_problem.messages[-1]["content"]

    good_stdin = "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```"
    only_public = "```python\ninput()\nprint(6)\n```"  # passes the public case only
    assert task.grade(stdin_problem, good_stdin).correct is True
    assert task.grade(stdin_problem, only_public).correct is False
    with_usage = f"{good_stdin}\nFor the sample:\n```python\nprint(1 + 2 + 3)\n```"
    assert task.grade(stdin_problem, with_usage).correct is True  # the program, not the snippet

    good_fn = (
        "```python\nclass Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n```"
    )
    bad_fn = "```python\nclass Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n```"
    assert task.grade(fn_problem, good_fn).correct is True
    assert task.grade(fn_problem, bad_fn).correct is False
    with_usage = f"{good_fn}\nExample:\n```python\nprint(Solution().twoSum([2, 7, 11, 15], 9))\n```"
    assert task.grade(fn_problem, with_usage).correct is True


def test_livecodebench_refuses_pickled_code(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, ("true",))

    rows = [
        {
            "question_id": "x",
            "question_content": "q",
            "starter_code": "",
            "public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}]),
            "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode(),
            "metadata": "{}",
        }
    ]
    path = write_jsonl(tmp_path / "lcb_evil.jsonl", rows)
    with pytest.raises(TaskDataError, match=r"row 0: unreadable test cases"):
        build_task({"name": "livecodebench", "path": str(path)}).load()


def test_gen_math_is_offline_deterministic_and_gradable() -> None:
    cfg = {"name": "gen_math", "num_prompts": 8, "generator_seed": 0}
    first, again = build_task(cfg).load(), build_task(cfg).load()
    assert [p.messages for p in first] == [p.messages for p in again]
    assert len({p.problem_id.split("/")[0] for p in first}) == 8  # one of each generator
    task = build_task(cfg)
    for p in first:
        assert task.grade(p, f"Working... so the answer is $\\boxed{{{p.reference}}}$.").correct is True, p
    assert task.grade(first[0], "\\boxed{definitely not it}").correct is False


def test_gen_math_prompts_ask_for_one_answer_format() -> None:
    """Four default generators end with "Give only the result as your final answer.", which the
    prompt's \\boxed{} instruction (what the grader reads) would contradict."""
    from presto.tasks.prompts import MATH_INSTRUCTION

    problems = build_task({"name": "gen_math", "num_prompts": 16, "generator_seed": 0}).load()
    for problem in problems:
        user = problem.messages[-1]["content"]
        assert "as your final answer" not in user and user.endswith(MATH_INSTRUCTION), user
    units = [p for p in problems if p.problem_id.startswith("gsm_symbolic")]
    assert units and all("Do not include units." in p.messages[-1]["content"] for p in units)


def test_gen_math_fraction_must_be_simplified() -> None:
    """math-verify compares values; fraction_simplification asks for lowest terms (its own scorer)."""
    from presto.tasks.math_tasks import _generated_dataset

    task = build_task({"name": "gen_math", "generators": ["fraction_simplification"], "num_prompts": 3})
    for problem in task.load():
        ref = problem.reference
        meta = _generated_dataset(ref.generator, ref.size, ref.seed)[ref.index]["metadata"]
        num, den = meta["simplified_numerator"], meta["simplified_denominator"]
        assert task.grade(problem, f"\\boxed{{\\dfrac{{{num}}}{{{den}}}}}").correct is True
        assert task.grade(problem, f"The answer is {num}/{den}.").correct is True
        unsimplified = task.grade(problem, f"\\boxed{{\\dfrac{{{meta['numerator']}}}{{{meta['denominator']}}}}}")
        assert unsimplified.correct is False and "scorer" in unsimplified.detail
        assert task.grade(problem, f"\\boxed{{\\dfrac{{{2 * num}}}{{{2 * den}}}}}").correct is False


@pytest.mark.parametrize(("generator", "index"), [("gsm_symbolic", 0), ("products", 1), ("chain_sum", 0)])
def test_gen_math_numbers_are_graded_by_value(generator: str, index: int) -> None:
    """The generators' own scorers misread numbers as models write them (gsm_symbolic's
    takes the first number it sees), so only the value counts."""
    from presto.tasks.math_tasks import GeneratedReference, _generated_dataset, grade_generated

    answer = str(_generated_dataset(generator, 3, 0)[index]["answer"])
    reference = GeneratedReference(answer, generator, 0, 3, index)
    n = int(answer)
    assert abs(n) >= 1000, "the entry needs thousands to separate"
    for written in (f"{n:,}", f"{n:,}".replace(",", "{,}"), f"{n:,}".replace(",", "\\,"), f"x = {n}"):
        assert grade_generated(f"\\boxed{{{written}}}", reference).correct is True, written
    # an equation is worth its right-hand side, not the first number in it
    assert grade_generated(f"\\boxed{{{n} - 3 = {n - 3}}}", reference).correct is False
    assert grade_generated(f"\\boxed{{{n + 3} - 3 = {n}}}", reference).correct is True


def test_num_prompts_takes_the_first_n(tmp_path: Path) -> None:
    rows = [{"problem": f"p{k}", "answer": str(k)} for k in range(5)]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    assert [p.reference for p in build_task({"name": "math500", "num_prompts": 3, "path": str(path)}).load()] == [
        "0",
        "1",
        "2",
    ]
    assert len(build_task({"name": "math500", "num_prompts": None, "path": str(path)}).load()) == 5


def test_hub_failure_says_to_pass_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'HuggingFaceH4/MATH-500' on the Hub\nRetrying...")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TaskDataError) as info:
        build_task({"name": "math500", "path": None, "hub_id": "HuggingFaceH4/MATH-500", "split": "test"}).load()
    message = str(info.value)
    assert "\n" not in message and "dataset.path=" in message and "HuggingFaceH4/MATH-500" in message


def test_every_yaml_builds_its_task() -> None:
    from omegaconf import OmegaConf

    files = sorted(CONF.glob("*.yaml"))
    names = {f.stem for f in files}
    assert names >= {"toy", "humaneval", "math500", "aime24", "aime25", "mbpp", "gpqa_diamond", "mmlu",
                     "mmlu_pro", "livecodebench", "gen_math"}  # fmt: skip
    for f in files:
        cfg = OmegaConf.to_container(OmegaConf.load(f), resolve=True)
        assert cfg["num_prompts"] == 20 and cfg["name"] == f.stem
        task = build_task({**cfg, "seed": 0})
        assert task.name == f.stem
        assert task.chat_template_kwargs == {}
        assert bool(cfg["allow_code_execution"]) == (f.stem in {"humaneval", "mbpp", "livecodebench"})
        if cfg.get("path") is None and cfg.get("hub_id") and f.stem != "humaneval":
            if cfg["hub_id"] == "json":  # the packaged builder reading hub files by URL
                assert all(f.startswith("hf://datasets/") for f in cfg["hub_data_files"])
            else:
                assert cfg["hub_id"].count("/") == 1


def test_enable_thinking_is_carried_to_the_chat_template() -> None:
    assert build_task({"name": "gen_math", "enable_thinking": False}).chat_template_kwargs == {"enable_thinking": False}
    assert build_task({"name": "math500", "enable_thinking": True}).chat_template_kwargs == {"enable_thinking": True}


@pytest.mark.parametrize("name", ["toy", "math500", "gpqa_diamond", "mbpp"])
def test_one_stop_string_given_as_a_string_is_one_stop_string(name: str) -> None:
    """``dataset.stop_strings="</answer>"`` is one stop string, not the characters of it."""
    assert build_task({"name": name, "stop_strings": "</answer>"}).stop_strings == ("</answer>",)
    assert build_task({"name": name, "stop_strings": ["</a>", "</b>"]}).stop_strings == ("</a>", "</b>")
    for wrong in (["</a>", 3], 3, {"a": "</a>"}):
        with pytest.raises(TaskDataError, match="stop_strings") as info:
            build_task({"name": name, "stop_strings": wrong})
        assert "\n" not in str(info.value)


def test_a_stop_string_given_as_a_string_cuts_the_completion_there() -> None:
    task = build_task({"name": "math500", "stop_strings": "</answer>"})
    problem = Problem(0, "p", [], "", "5")
    # each of its characters as a stop string cut "\\boxed{5}" at its "e"
    assert task.grade(problem, "\\boxed{5}</answer>\\boxed{6}").correct is True
    assert task.grade(problem, "\\boxed{6}</answer>\\boxed{5}").correct is False

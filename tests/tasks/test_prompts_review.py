"""Prompt and task-construction review: what each dataset's prompt asks for is what its grader gets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from presto.tasks import build_task
from tests.conftest import gpqa_rows

CONF = Path(__file__).resolve().parents[2] / "conf" / "dataset"

# The first row of MBPP's sanitized test split, as the hub serves it.
MBPP_SANITIZED_ROW = {
    "source_file": "Benchmark Questions Verification V2.ipynb",
    "task_id": 11,
    "prompt": "Write a python function to remove first and last occurrence of a given character from the string.",
    "code": "def remove_Occ(s,ch): \n    s = s.replace(ch, '', 1)\n    return s[::-1].replace(ch, '', 1)[::-1]",
    "test_imports": [],
    "test_list": [
        'assert remove_Occ("hello","l") == "heo"',
        'assert remove_Occ("abcda","a") == "bcd"',
        'assert remove_Occ("PHP","P") == "H"',
    ],
}


def yaml_cfg(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"), resolve=True)


def test_mbpp_yaml_reads_the_sanitized_test_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paper's MBPP has 257 problems (its Table 3): the test split of the "sanitized"
    config. The "full" config's test split has 500, and its first 20 are a different set."""
    import datasets

    calls: list[tuple[tuple, dict]] = []

    def fake_load(*args: object, **kwargs: object) -> datasets.Dataset:
        calls.append((args, kwargs))
        return datasets.Dataset.from_list([MBPP_SANITIZED_ROW])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    (problem,) = build_task({**yaml_cfg("mbpp"), "seed": 0}).load()
    assert calls == [(("google-research-datasets/mbpp", "sanitized"), {"split": "test"})]
    assert problem.problem_id == "mbpp/11" and problem.reference["setup"] == ""
    user = problem.messages[-1]["content"]
    assert MBPP_SANITIZED_ROW["prompt"] in user and MBPP_SANITIZED_ROW["test_list"][0] in user


def test_mbpp_prompt_names_every_function_the_tests_call(tmp_path: Path) -> None:
    """The prompt shows the first test; the grader runs all of them, so they must call no
    function the prompt did not name."""
    from presto.tasks.code_grader import functions_under_test

    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(MBPP_SANITIZED_ROW) + "\n", encoding="utf-8")
    task = build_task({"name": "mbpp", "path": str(path), "allow_code_execution": True, "timeout_s": 5})
    (problem,) = task.load()
    named = functions_under_test(problem.reference["tests"])
    assert named == ("remove_Occ",) and all(f"{name}(" in problem.messages[-1]["content"] for name in named)
    assert task.grade(problem, f"```python\n{MBPP_SANITIZED_ROW['code']}\n```").correct is True


def test_humaneval_entry_point_is_the_function_the_prompt_shows() -> None:
    """Every packaged problem: the function under test is the last one the prompt defines,
    the plain prompt is the dataset's prompt (a completion continues it), and the chat
    prompt shows the whole signature and docstring."""
    problems = build_task({"name": "humaneval", "num_prompts": None}).load()
    assert len(problems) == 164 == len({p.problem_id for p in problems})
    for p in problems:
        ref = p.reference
        assert re.findall(r"^def (\w+)\(", ref["prompt"], re.MULTILINE)[-1] == ref["entry_point"], p.problem_id
        assert p.raw_prompt == ref["prompt"]
        assert ref["prompt"].rstrip() in p.messages[-1]["content"]
        assert [m["role"] for m in p.messages] == ["system", "user"]


def test_gen_math_prefix_does_not_depend_on_num_prompts() -> None:
    """dataset.num_prompts=N must give the first N problems of a longer run, under the same ids."""
    short = build_task({"name": "gen_math", "num_prompts": 8}).load()
    long = build_task({"name": "gen_math", "num_prompts": 24}).load()
    assert len({p.problem_id for p in long}) == 24
    for a, b in zip(short, long, strict=False):
        assert (a.problem_id, a.messages, str(a.reference)) == (b.problem_id, b.messages, str(b.reference))


def test_gpqa_shuffle_is_fixed_per_problem_and_unbiased(tmp_path: Path) -> None:
    """A problem's shuffle does not depend on how many problems are loaded (a resume with
    another num_prompts sees the same prompt), every option keeps its text, and over many
    problems the correct letter lands in every position about equally often."""
    path = tmp_path / "gpqa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in gpqa_rows(200)), encoding="utf-8")
    cfg = {"name": "gpqa_diamond", "path": str(path), "seed": 10086}
    every = build_task({**cfg, "num_prompts": None}).load()
    first = build_task({**cfg, "num_prompts": 20}).load()
    assert [p.messages for p in first] == [p.messages for p in every[:20]]
    counts = {letter: 0 for letter in "ABCD"}
    for k, p in enumerate(every):
        user = p.messages[-1]["content"]
        options = re.findall(r"^\(([A-D])\) (\S+) \d+$", user, re.MULTILINE)
        assert sorted(text for _, text in options) == ["right", "wrong1", "wrong2", "wrong3"], user
        assert dict(options)[p.reference["answer"]] == "right" and p.problem_id == f"rec{k}"
        counts[p.reference["answer"]] += 1
    assert all(30 <= c <= 70 for c in counts.values()), counts  # 50 each expected; sd about 6

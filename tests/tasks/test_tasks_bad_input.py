"""Bad input: one clear line naming the file and row, or the allowed dataset names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from presto.tasks import TASK_NAMES, TaskDataError, build_task


def load_error(cfg: dict) -> str:
    with pytest.raises(TaskDataError) as info:
        build_task(cfg).load()
    message = str(info.value)
    assert "\n" not in message, message
    assert isinstance(info.value, ValueError)
    return message


def test_unknown_dataset_lists_the_allowed_names() -> None:
    with pytest.raises(TaskDataError) as info:
        build_task({"name": "gsm9k"})
    message = str(info.value)
    assert "gsm9k" in message and "\n" not in message
    assert all(name in message for name in TASK_NAMES)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    message = load_error({"name": "math500", "path": str(missing)})
    assert str(missing) in message and "not found" in message


def test_malformed_jsonl_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "a", "answer": "1"}\n{"problem": "b", "answer": \n')
    message = load_error({"name": "math500", "path": str(path)})
    assert str(path) in message and "line 2" in message


def test_malformed_json_array(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"problem": "a", "answer": "1"},\n {"problem": ]')
    message = load_error({"name": "math500", "path": str(path)})
    assert str(path) in message and "line 2" in message


def test_non_object_row(tmp_path: Path) -> None:
    path = tmp_path / "list.jsonl"
    path.write_text('{"problem": "a", "answer": "1"}\n[1, 2]\n')
    message = load_error({"name": "math500", "path": str(path)})
    assert "line 2" in message and "JSON object" in message


def test_malformed_parquet(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"this is not parquet")
    message = load_error({"name": "mmlu", "path": str(path)})
    assert str(path) in message and "parquet" in message


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    assert "empty" in load_error({"name": "math500", "path": str(path)})


@pytest.mark.parametrize(("name", "text"), [("empty.json", "[]"), ("blank.jsonl", "\n\n"), ("spaces.json", " [ ] ")])
def test_file_without_rows(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    message = load_error({"name": "math500", "path": str(path)})
    assert str(path) in message and ("empty" in message or "no rows" in message), message


def test_unsupported_suffix(tmp_path: Path) -> None:
    path = tmp_path / "data.tsv"
    path.write_text("problem\tanswer\na\t1\n")
    message = load_error({"name": "math500", "path": str(path)})
    assert "unsupported" in message and ".jsonl" in message and ".csv" in message


@pytest.mark.parametrize(
    ("name", "row", "missing"),
    [
        ("math500", {"problem": "p"}, "'answer'"),
        ("aime24", {"ID": "x", "Problem": "p"}, "'Answer'"),
        ("aime25", {"problem_idx": 1, "answer": 3}, "'problem'"),
        ("gpqa_diamond", {"Question": "q", "Correct Answer": "a"}, "'Incorrect Answer 1'"),
        ("mmlu", {"question": "q", "choices": ["a", "b"]}, "'answer'"),
        ("mbpp", {"task_id": 1, "text": "t"}, "'test_list'"),
        ("humaneval", {"task_id": "HumanEval/0", "prompt": "def f():\n"}, "'test'"),
        ("livecodebench", {"question_id": "1", "question_content": "q"}, "'public_test_cases'"),
    ],
)
def test_row_without_expected_fields(tmp_path: Path, name: str, row: dict, missing: str) -> None:
    good = {
        "math500": {"problem": "p", "answer": "1"},
        "aime24": {"ID": "y", "Problem": "p", "Answer": 1},
        "aime25": {"problem_idx": 0, "problem": "p", "answer": 1},
        "gpqa_diamond": {"Question": "q", "Correct Answer": "a", "Incorrect Answer 1": "b",
                         "Incorrect Answer 2": "c", "Incorrect Answer 3": "d"},
        "mmlu": {"question": "q", "choices": ["a", "b"], "answer": 0},
        "mbpp": {"task_id": 0, "text": "t", "test_list": ["assert True"]},
        "humaneval": {"task_id": "HumanEval/1", "prompt": "def f():\n", "test": "", "entry_point": "f"},
        "livecodebench": {"question_id": "0", "question_content": "q",
                          "public_test_cases": '[{"input": "", "output": "", "testtype": "stdin"}]'},
    }[name]  # fmt: skip
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    message = load_error({"name": name, "path": str(path)})
    assert str(path) in message and "row 1" in message and missing in message, message


def test_wrong_field_type_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "aime.jsonl"
    path.write_text(json.dumps({"ID": "a", "Problem": "p", "Answer": "twelve"}) + "\n")
    message = load_error({"name": "aime24", "path": str(path)})
    assert "row 0" in message and "'Answer'" in message


def test_bad_mmlu_answer_index(tmp_path: Path) -> None:
    path = tmp_path / "mmlu.jsonl"
    path.write_text(json.dumps({"question": "q", "choices": ["a", "b", "c", "d"], "answer": 7}) + "\n")
    assert "row 0" in load_error({"name": "mmlu", "path": str(path)})


def pro_row(**fields: object) -> dict:
    row = {"question_id": 1, "question": "q", "options": ["a", "b", "c", "d"], "answer": "B", "answer_index": 1}
    return {**row, **fields}


@pytest.mark.parametrize(
    ("row", "words"),
    [
        (pro_row(answer="B", answer_index=2), ("'answer' is 'B'", "'answer_index' is 2", "option C")),
        (pro_row(answer="E"), ("'answer'", "A-D")),
        (pro_row(answer_index=9), ("'answer_index'", "0-3")),
        (pro_row(options=["a"] + ["N/A"] * 3, answer="A", answer_index=0), ("'options'", "2-10")),
        (pro_row(options=[f"o{k}" for k in range(11)]), ("'options'", "2-10")),
        (pro_row(options="abcd"), ("'options'", "list")),
        (pro_row(answer=None), ("missing", "'answer'")),
    ],
)
def test_bad_mmlu_pro_row_is_one_line(tmp_path: Path, row: dict, words: tuple[str, ...]) -> None:
    path = tmp_path / "pro.jsonl"
    path.write_text(json.dumps(pro_row(question_id=0)) + "\n" + json.dumps(row) + "\n")
    message = load_error({"name": "mmlu_pro", "path": str(path)})
    assert str(path) in message and "row 1" in message and all(w in message for w in words), message


def test_duplicate_mmlu_pro_question_id(tmp_path: Path) -> None:
    path = tmp_path / "pro.jsonl"
    path.write_text(json.dumps(pro_row()) + "\n" + json.dumps(pro_row(question="other")) + "\n")
    message = load_error({"name": "mmlu_pro", "path": str(path)})
    assert "row 1" in message and "'mmlu_pro/1'" in message and "row 0" in message, message


@pytest.mark.parametrize("n", [-5, "ten", 1.5, True])
def test_bad_num_prompts(n: object) -> None:
    assert "num_prompts" in load_error({"name": "toy", "num_prompts": n})


def test_no_path_and_no_hub_id() -> None:
    assert "dataset.path" in load_error({"name": "math500", "path": None, "hub_id": None})

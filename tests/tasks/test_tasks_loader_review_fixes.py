"""Loader bugs found in review: each test failed before its fix."""

from __future__ import annotations

import csv
import gzip
import json
import logging
from pathlib import Path

import pytest

from presto.tasks import TaskDataError, build_task

CONF = Path(__file__).resolve().parents[2] / "conf" / "dataset"
LCB_ROW = {
    "question_id": "abc000_a",
    "question_content": "Print the input.",
    "starter_code": "",
    "public_test_cases": json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}]),
    "private_test_cases": "",
    "metadata": "{}",
}


def load_error(cfg: dict) -> str:
    with pytest.raises(TaskDataError) as info:
        build_task(cfg).load()
    message = str(info.value)
    assert "\n" not in message, message
    return message


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


class DatasetsLog(logging.Handler):
    """Every record the ``datasets`` loggers emit (they do not propagate to the root logger)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def datasets_log() -> DatasetsLog:
    import datasets  # noqa: F401  (configures the library's root logger)

    handler = DatasetsLog()
    logger = logging.getLogger("datasets")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


# 1. LiveCodeBench from the hub


def test_livecodebench_yaml_reads_test6_through_the_json_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub repository ships a loading script, which datasets 5 refuses before reading
    data_files; the packaged json builder reads the file by URL."""
    import datasets
    from omegaconf import OmegaConf

    calls: list[tuple[tuple, dict]] = []

    def fake_load(*args: object, **kwargs: object) -> datasets.Dataset:
        calls.append((args, kwargs))
        return datasets.Dataset.from_list([LCB_ROW])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "livecodebench.yaml"), resolve=True)
    (problem,) = build_task(cfg).load()
    assert calls == [
        (("json",), {"split": "train", "data_files": ["hf://datasets/livecodebench/code_generation_lite/test6.jsonl"]})
    ]
    assert problem.problem_id == "abc000_a"


def test_hub_errors_name_the_data_files_and_one_file_is_not_split(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls: list[dict] = []

    def offline(*args: object, **kwargs: object) -> None:
        calls.append(kwargs)
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    url = "hf://datasets/livecodebench/code_generation_lite/test6.jsonl"
    message = load_error({"name": "livecodebench", "hub_id": "json", "hub_data_files": url, "split": "train"})
    assert calls[0]["data_files"] == [url]  # a string given on the command line, not its letters
    assert url in message and "dataset.path=" in message


# 2. JSON values kept as written


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".jsonl.gz"])
def test_json_values_are_kept_exactly_as_written(tmp_path: Path, suffix: str) -> None:
    """A column mixing strings and numbers was typed Json by datasets, which decoded every
    string that is JSON itself: "0.50" -> "0.5", "null" -> missing, "[-3, 7]" -> a list."""
    answers = ["[-3, 7]", 3, "0.50", "010", "null", "1e3", '{"a": 1}']
    rows = [{"problem": f"p{k}", "answer": a} for k, a in enumerate(answers)]
    path = tmp_path / f"m{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    elif suffix == ".jsonl.gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(row) + "\n" for row in rows))
    else:
        write_jsonl(path, rows)
    problems = build_task({"name": "math500", "num_prompts": 20, "path": str(path)}).load()
    assert [p.reference for p in problems] == ["[-3, 7]", "3", "0.50", "010", "null", "1e3", '{"a": 1}']


def test_json_rows_with_different_keys(tmp_path: Path) -> None:
    """Rows read without datasets keep their own keys; an absent field is still reported."""
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem": "a", "answer": "1", "unique_id": "u0"}, {"problem": "b"}])
    message = load_error({"name": "math500", "path": str(path)})
    assert "row 1" in message and "'answer'" in message


# 3. LiveCodeBench test cases and fields


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("public_test_cases", [{"input": "1"}]),
        ("public_test_cases", ["1"]),
        ("public_test_cases", [{"input": 1, "output": "1"}]),
        ("public_test_cases", json.dumps([{"input": "1", "output": None}])),
        ("private_test_cases", [{"output": "1"}]),
        ("question_content", 5),
        ("starter_code", 5),
    ],
)
def test_livecodebench_bad_rows_name_the_row(tmp_path: Path, field: str, value: object) -> None:
    path = write_jsonl(tmp_path / "lcb.jsonl", [LCB_ROW, {**LCB_ROW, field: value}])
    message = load_error({"name": "livecodebench", "path": str(path)})
    assert str(path) in message and "row 1" in message, message


def test_livecodebench_cases_given_as_a_list(tmp_path: Path) -> None:
    cases = [{"input": "2\n", "output": "2\n", "testtype": "stdin"}]
    path = write_jsonl(tmp_path / "lcb.jsonl", [{**LCB_ROW, "public_test_cases": cases, "starter_code": None}])
    (problem,) = build_task({"name": "livecodebench", "path": str(path)}).load()
    assert problem.reference["cases"] == [{"input": "2\n", "output": "2\n"}]


# 4. truncated or corrupt gzip


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_damaged_gzip_is_one_line(tmp_path: Path, damage: str) -> None:
    rows = [{"problem": f"problem number {k} " * 20, "answer": str(k)} for k in range(200)]
    data = gzip.compress("".join(json.dumps(row) + "\n" for row in rows).encode())
    # truncated: EOFError; else zlib.error: the first deflate block (after the 10-byte header) of type 3, invalid
    data = data[: len(data) // 2] if damage == "truncate" else data[:10] + b"\x07" + data[11:]
    path = tmp_path / "m.jsonl.gz"
    path.write_bytes(data)
    message = load_error({"name": "math500", "path": str(path)})
    assert str(path) in message and "malformed" in message, message


# 5. parquet errors


def test_corrupt_parquet_is_one_line_without_datasets_log(tmp_path: Path, datasets_log: DatasetsLog) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 this is not parquet PAR1")
    message = load_error({"name": "mmlu", "path": str(path)})
    assert str(path) in message and "parquet" in message
    assert datasets_log.messages == []


def test_quiet_datasets_silences_and_restores_the_log(datasets_log: DatasetsLog) -> None:
    from datasets.utils import logging as ds_logging

    from presto.tasks.data import quiet_datasets

    before = ds_logging.get_verbosity()
    with quiet_datasets():
        ds_logging.get_logger("datasets.builder").error("An error occurred while generating the dataset")
    assert datasets_log.messages == []
    assert ds_logging.get_verbosity() == before
    ds_logging.get_logger("datasets.builder").error("after")
    assert datasets_log.messages == ["after"]  # the fixture's handler does see errors outside the block


def test_parquet_without_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"problem": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), path)
    message = load_error({"name": "math500", "path": str(path)})
    assert str(path) in message and "no rows" in message, message


# 6. MBPP test_imports


def test_mbpp_test_imports_as_a_string(tmp_path: Path) -> None:
    row = {"task_id": 1, "prompt": "gcd", "test_list": ["assert g(4, 6) == 2"], "test_imports": "import math"}
    path = write_jsonl(tmp_path / "mbpp.jsonl", [row])
    (problem,) = build_task({"name": "mbpp", "path": str(path)}).load()
    assert problem.reference["setup"] == "import math"


def test_mbpp_test_imports_of_another_type(tmp_path: Path) -> None:
    row = {"task_id": 1, "prompt": "gcd", "test_list": ["assert True"], "test_imports": [1, 2]}
    path = write_jsonl(tmp_path / "mbpp.jsonl", [row])
    message = load_error({"name": "mbpp", "path": str(path)})
    assert "row 0" in message and "'test_imports'" in message


# 7. gen_math


def test_gen_math_refuses_a_generator_listed_twice() -> None:
    """Its problems would repeat under the same ids, which the runner refuses only later."""
    message = load_error({"name": "gen_math", "generators": ["chain_sum", "products", "chain_sum"], "num_prompts": 6})
    assert "'chain_sum'" in message and "twice" in message


# 8. num_prompts


@pytest.mark.parametrize("n", [-5, "ten"])
def test_num_prompts_message_promises_only_what_the_cli_takes(n: object) -> None:
    """presto.config takes integers >= 1 only, so the message must not offer null (all)."""
    message = load_error({"name": "toy", "num_prompts": n})
    assert ">= 1" in message and "null" not in message and "all" not in message


# 9. CSV (GPQA's own format)


GPQA_HEADER = [
    "Pre-Revision Question",
    "Question",
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
    "Explanation",
    "Record ID",
    "High-level domain",
]


def test_gpqa_from_its_csv(tmp_path: Path) -> None:
    path = tmp_path / "gpqa_diamond.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(GPQA_HEADER)
        for k in range(3):
            writer.writerow(
                ["old", f"Question {k},\nwith two lines?", f"right {k}", "0.50", "010", "w3", "", f"rec{k}", "Physics"]
            )
    task = build_task({"name": "gpqa_diamond", "path": str(path), "seed": 0})
    problems = task.load()
    assert [p.problem_id for p in problems] == ["rec0", "rec1", "rec2"]
    content = problems[1].messages[-1]["content"]
    assert "Question 1,\nwith two lines?" in content and "right 1" in content
    assert "0.50" in content and "010" in content  # strings, as written
    letter = problems[1].reference["answer"]
    assert f"({letter}) right 1" in content
    assert task.grade(problems[1], f"Answer: {letter}").correct is True


def test_csv_row_with_a_missing_cell(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("problem,answer\np0,1\np1\n", encoding="utf-8")
    message = load_error({"name": "math500", "path": str(path)})
    assert str(path) in message and "row 1" in message, message

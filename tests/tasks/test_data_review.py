"""presto.tasks.data on small local files: encodings, directories, whole-file JSON objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from presto.tasks.base import TaskDataError
from presto.tasks.data import load_rows


def rows_of(path: Path, n: int = 5) -> list[dict]:
    rows, _ = load_rows({"path": str(path), "num_prompts": n}, task="t", required=("a",))
    return rows


@pytest.mark.parametrize(
    ("name", "text"),
    [("rows.jsonl", '{"a": 1}\n{"a": 2}\n'), ("rows.json", '[{"a": 1}, {"a": 2}]')],
)
def test_a_utf8_byte_order_mark_is_read_as_csv_files_are(tmp_path: Path, name: str, text: str) -> None:
    # Windows editors and PowerShell 5 write UTF-8 with a BOM; the CSV reader already skips it.
    path = tmp_path / name
    path.write_text("\ufeff" + text, encoding="utf-8")
    assert rows_of(path) == [{"a": 1}, {"a": 2}]


def test_a_directory_is_not_reported_as_missing(tmp_path: Path) -> None:
    folder = tmp_path / "data.jsonl"
    folder.mkdir()
    with pytest.raises(TaskDataError) as err:
        rows_of(folder)
    message = str(err.value)
    assert "not found" not in message and "is a directory" in message and str(folder) in message


def test_one_json_object_over_several_lines_is_not_called_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text('{\n  "rows": [{"a": 1}]\n}\n')
    with pytest.raises(TaskDataError) as err:
        rows_of(path)
    message = str(err.value)
    assert "invalid JSON" not in message and "one JSON object" in message and "\n" not in message


def test_jsonl_with_a_bad_first_line_still_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"a": 1\n{"a": 2}\n')
    with pytest.raises(TaskDataError, match=r"line 1: invalid JSON"):
        rows_of(path)


def test_first_n_rows_in_file_order_and_fewer_when_the_file_is_shorter(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(f'{{"a": {i}}}\n' for i in (3, 1, 2)))
    assert rows_of(path, n=2) == [{"a": 3}, {"a": 1}]
    assert rows_of(path, n=2) == rows_of(path, n=2)
    assert rows_of(path, n=100) == [{"a": 3}, {"a": 1}, {"a": 2}]

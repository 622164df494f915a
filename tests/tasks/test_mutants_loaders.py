"""Tests that kill the mutants a hand mutation review of the dataset loaders found surviving (ids DA =
tasks/data.py, MT = tasks/math_tasks.py, CT = tasks/choice_tasks.py, CO = tasks/code_tasks.py; the
list is at the end of the file).

They pin what the loaders promise on small fixtures written here (never the hub): the default split
each task asks the hub for, the first-N selection for every file type, num_prompts' special values,
the offline switch, GPQA's documented shuffle key, the choice-count and answer-index bounds, problem
ids from falsy ids (0), the generated-math seeds and sizes, and LiveCodeBench's refusal of pickled
globals.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import zlib
from pathlib import Path

import pytest

from presto.tasks import TaskDataError, build_task
from presto.tasks.data import load_rows, offline
from tests.conftest import gpqa_rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def load_error(cfg: dict) -> str:
    with pytest.raises(TaskDataError) as info:
        build_task(cfg).load()
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- hub arguments (default splits)

HUB_ROWS = {
    "math500": {"problem": "p", "answer": "1"},
    "aime24": {"ID": "a", "Problem": "p", "Answer": 1},
    "aime25": {"problem_idx": 1, "problem": "p", "answer": 1},
    "gpqa_diamond": gpqa_rows(1)[0],
    "mmlu": {"question": "q", "choices": ["a", "b"], "answer": 0},
    "mmlu_pro": {"question_id": 1, "question": "q", "options": ["a", "b"], "answer": "A"},
    "mbpp": {"task_id": 1, "text": "t", "test_list": ["assert True"]},
    "humaneval": {"task_id": "H/0", "prompt": "def f():\n", "test": "", "entry_point": "f"},
    "livecodebench": {
        "question_id": "1",
        "question_content": "q",
        "public_test_cases": '[{"input": "1", "output": "1", "testtype": "stdin"}]',
    },
}


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("math500", "test"),
        ("aime24", "train"),
        ("aime25", "train"),
        ("gpqa_diamond", "train"),
        ("mmlu", "test"),
        ("mmlu_pro", "test"),
        ("mbpp", "test"),
        ("humaneval", "test"),
        ("livecodebench", "train"),
    ],
)
def test_hub_loads_ask_for_the_datasets_own_split(monkeypatch: pytest.MonkeyPatch, name: str, split: str) -> None:
    """MT3 (AIME default split "test"), MT18 (MATH-500 "train"), CT15 (GPQA "test": GPQA has only a
    train split), CO7 (LiveCodeBench "test"), CO13 (MBPP "train"), DA12 (the configured split ignored),
    DA24 (data files dropped for a repository id): without dataset.split each task asks for the one
    split its hub repository has; a configured split and data files are passed through as given."""
    import datasets

    calls: list[tuple[tuple, dict]] = []

    def fake_load(*args: object, **kwargs: object) -> datasets.Dataset:
        calls.append((args, kwargs))
        return datasets.Dataset.from_list([HUB_ROWS[name]])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    cfg = {"name": name, "hub_id": "org/repo", "use_package": False}
    assert len(build_task(cfg).load()) == 1
    assert calls == [(("org/repo",), {"split": split})]
    calls.clear()
    build_task({**cfg, "split": "validation", "hub_data_files": ["data/x.parquet"]}).load()
    assert calls == [(("org/repo",), {"split": "validation", "data_files": ["data/x.parquet"]})]


# ---------------------------------------------------------------- data.py: selection and reading


def test_num_prompts_default_and_all_rows(tmp_path: Path) -> None:
    """DA1 (default 21 rows), DA2 (-1 refused instead of "all rows"), DA3 (-2 admitted): without
    num_prompts a task reads 20 rows; 0, -1 and None read every row; -2 is refused."""
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem": f"p{k}", "answer": str(k)} for k in range(25)])
    assert len(build_task({"name": "math500", "path": str(path)}).load()) == 20
    for every in (None, 0, -1):
        assert len(build_task({"name": "math500", "path": str(path), "num_prompts": every}).load()) == 25
    assert "num_prompts" in load_error({"name": "math500", "path": str(path), "num_prompts": -2})


def test_parquet_gives_its_first_rows_in_file_order(tmp_path: Path) -> None:
    """DA6 (parquet rows taken from the end): num_prompts=N is the first N rows for parquet too."""
    path = write_parquet(tmp_path / "m.parquet", [{"problem": f"p{k}", "answer": str(k)} for k in range(6)])
    problems = build_task({"name": "math500", "path": str(path), "num_prompts": 2}).load()
    assert [p.reference for p in problems] == ["0", "1"]


def test_gzipped_json_array_and_blank_jsonl_lines(tmp_path: Path) -> None:
    """DA8 (only .jsonl.gz unzipped), DA9 (blank JSONL lines not skipped): a gzipped JSON array is
    read, and blank lines between JSONL rows (an editor's trailing newlines) are not rows."""
    import gzip

    gz = tmp_path / "rows.json.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write('[{"a": 1}, {"a": 2}]')
    assert load_rows({"path": str(gz)}, task="t", required=("a",))[0] == [{"a": 1}, {"a": 2}]
    blank = tmp_path / "rows.jsonl"
    blank.write_text('{"a": 1}\n\n   \n{"a": 2}\n\n', encoding="utf-8")
    assert load_rows({"path": str(blank)}, task="t", required=("a",))[0] == [{"a": 1}, {"a": 2}]


def test_csv_with_a_bom_and_a_row_with_an_extra_cell(tmp_path: Path) -> None:
    """DA25 (CSV read without utf-8-sig: the first header becomes "\\ufeffa"), DA11 (a row with more
    cells than the header accepted, its extra cell silently dropped)."""
    path = tmp_path / "rows.csv"
    path.write_text("\ufeffa,b\n1,2\n", encoding="utf-8")
    assert load_rows({"path": str(path)}, task="t", required=("a",))[0] == [{"a": "1", "b": "2"}]
    path.write_text("a,b\n1,2\n3,4,5\n", encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"row 1: 2 columns in the header"):
        load_rows({"path": str(path)}, task="t", required=("a",))


def test_json_array_checks_its_first_row_too(tmp_path: Path) -> None:
    """DA23 (the object check skips row 0)."""
    path = tmp_path / "rows.json"
    path.write_text('[1, {"a": 2}]', encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"row 0: expected a JSON object, got int"):
        load_rows({"path": str(path)}, task="t", required=("a",))


def test_missing_field_message_lists_only_fields_with_values(tmp_path: Path) -> None:
    """DA21 (null fields listed as present)."""
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem": "p", "answer": None, "level": None}])
    message = load_error({"name": "math500", "path": str(path)})
    assert "missing field(s) 'answer' (has: problem)" in message, message


def test_a_home_relative_path_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DA27 (~ not expanded: "not found"), DA26 (the source label keeps the ~)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    write_jsonl(tmp_path / "m.jsonl", [{"problem": "p", "answer": "1"}])
    rows, source = load_rows({"path": "~/m.jsonl"}, task="t", required=("problem",))
    assert rows == [{"problem": "p", "answer": "1"}] and source == str(tmp_path / "m.jsonl")


def test_offline_sets_both_switches_and_restores_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """DA16 (HF_HUB_OFFLINE not set), DA17 (a variable that was unset stays set after the block)."""
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with offline():
        assert os.environ["HF_DATASETS_OFFLINE"] == "1" and os.environ["HF_HUB_OFFLINE"] == "1"
    assert "HF_DATASETS_OFFLINE" not in os.environ and os.environ["HF_HUB_OFFLINE"] == "0"


def test_a_rewritten_parquet_file_is_read_again(tmp_path: Path) -> None:
    """DA18 (the cache directory keyed on the path, not the content): same path, same modification
    time, new rows: the new rows are read."""
    path = write_parquet(tmp_path / "m.parquet", [{"problem": "p", "answer": "1"}])
    cfg = {"name": "math500", "path": str(path)}
    assert build_task(cfg).load()[0].reference == "1"
    stat = path.stat()
    write_parquet(path, [{"problem": "p", "answer": "9"}])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert build_task(cfg).load()[0].reference == "9"


# ---------------------------------------------------------------- math_tasks.py


def test_aime_problem_id_zero_is_kept(tmp_path: Path) -> None:
    """MT4 (an id of 0 replaced by the row number)."""
    rows = [{"problem_idx": k, "problem": "p", "answer": k} for k in (5, 0)]
    problems = build_task({"name": "aime25", "path": str(write_jsonl(tmp_path / "a.jsonl", rows))}).load()
    assert [p.problem_id for p in problems] == ["aime25/5", "aime25/0"]


def test_gen_math_seeds_sizes_and_default_count() -> None:
    """MT7 (dataset size one more than ceil(n / generators)), MT10 (the run seed instead of
    generator_seed), MT11 (all rows = 20 problems instead of 100), MT12 (question not stripped)."""
    gens = ["chain_sum", "basic_arithmetic", "products"]
    cfg = {"name": "gen_math", "generators": gens, "num_prompts": 7, "generator_seed": 3}
    problems = build_task({**cfg, "seed": 0}).load()
    assert [p.reference.size for p in problems] == [3] * 7
    assert [p.problem_id for p in problems][:4] == [
        "chain_sum/3/0",
        "basic_arithmetic/4/0",
        "products/5/0",
        "chain_sum/3/1",
    ]
    again = build_task({**cfg, "seed": 99}).load()
    assert [p.messages for p in again] == [p.messages for p in problems]
    for p in problems:
        content = p.messages[-1]["content"]
        assert not content.startswith((" ", "\n"))
    assert len(build_task({"name": "gen_math", "num_prompts": None, "generators": gens}).load()) == 100


def test_gen_math_grade_cuts_at_the_stop_string() -> None:
    """MT20 (gen_math grades the completion past its stop string)."""
    task = build_task({"name": "gen_math", "num_prompts": 1, "stop_strings": "</answer>"})
    (problem,) = task.load()
    right = f"\\boxed{{{problem.reference}}}"
    assert task.grade(problem, f"{right}</answer>\\boxed{{nonsense}}").correct is True
    assert task.grade(problem, f"\\boxed{{nonsense}}</answer>{right}").correct is False


# ---------------------------------------------------------------- choice_tasks.py


def test_gpqa_order_is_the_documented_shuffle(tmp_path: Path) -> None:
    """CT1 (key fields swapped), CT18 (the list shuffled from another start): the choice order of
    problem i is random.Random(f"presto-gpqa:{seed}:{i}").shuffle(range(4)), so a recorded run's
    prompts replay; the options are stripped of the whitespace GPQA's cells carry (CT6)."""
    rows = gpqa_rows(6)
    rows[0]["Correct Answer"] = "right 0\n"
    path = write_jsonl(tmp_path / "g.jsonl", rows)
    problems = build_task({"name": "gpqa_diamond", "path": str(path), "seed": 7}).load()
    for i, p in enumerate(problems):
        order = list(range(4))
        random.Random(f"presto-gpqa:7:{i}").shuffle(order)
        names = ["right", "wrong1", "wrong2", "wrong3"]
        expected = "\n".join(f"({'ABCD'[k]}) {names[j]} {i}" for k, j in enumerate(order))
        assert expected in p.messages[-1]["content"], p.messages[-1]["content"]
        assert p.reference["answer"] == "ABCD"[order.index(0)]


def test_mmlu_answer_and_choice_bounds(tmp_path: Path) -> None:
    """CT8 (answer index == number of choices admitted), CT9 and CT16 (one choice, or eleven,
    admitted), CT20 (a bool answer taken as an index)."""
    base = {"question": "q", "choices": ["a", "b", "c", "d"], "answer": 0}
    bad = [
        ({"answer": 4}, "0-3"),
        ({"answer": True}, "'answer'"),
        ({"choices": ["a"]}, "2-10"),
        ({"choices": [str(k) for k in range(11)]}, "2-10"),
    ]
    for k, (change, words) in enumerate(bad):
        path = write_jsonl(tmp_path / f"m{k}.jsonl", [{**base, **change}])
        assert words in load_error({"name": "mmlu", "path": str(path)})


def test_choice_problem_ids(tmp_path: Path) -> None:
    """CT10 (MMLU ids without the subject), CT12 (MMLU-Pro question_id 0 replaced by category/row)."""
    rows = [{"question": "q", "subject": "anatomy", "choices": ["a", "b"], "answer": 1}]
    (problem,) = build_task({"name": "mmlu", "path": str(write_jsonl(tmp_path / "m.jsonl", rows))}).load()
    assert problem.problem_id == "anatomy/0"
    pro = [{"question_id": 0, "question": "q", "options": ["a", "b"], "answer": "A", "category": "law"}]
    (problem,) = build_task({"name": "mmlu_pro", "path": str(write_jsonl(tmp_path / "p.jsonl", pro))}).load()
    assert problem.problem_id == "mmlu_pro/0"


# ---------------------------------------------------------------- code_tasks.py


def lcb_row(**fields: object) -> dict:
    row = {
        "question_id": "1",
        "question_content": "q",
        "public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}]),
    }
    return {**row, **fields}


def test_livecodebench_refuses_any_pickled_global(tmp_path: Path) -> None:
    """CO16 (the unpickler allows globals): a payload that calls even a harmless global (str) is
    refused, not run; the existing os.system case fails either way once the result is not a list."""

    class Call:
        def __reduce__(self) -> tuple:
            return (str, ('[{"input": "2", "output": "2"}]',))

    private = base64.b64encode(zlib.compress(pickle.dumps(Call()))).decode()
    path = write_jsonl(tmp_path / "l.jsonl", [lcb_row(private_test_cases=private)])
    assert "unreadable test cases" in load_error({"name": "livecodebench", "path": str(path)})


def test_livecodebench_metadata_and_func_name(tmp_path: Path) -> None:
    """CO10 (an empty metadata string is an error), CO20 (functional tests without a func_name loaded)."""
    path = write_jsonl(tmp_path / "l.jsonl", [lcb_row(metadata="  ")])
    (problem,) = build_task({"name": "livecodebench", "path": str(path)}).load()
    assert problem.reference["mode"] == "stdio"
    functional = json.dumps([{"input": "1", "output": "1", "testtype": "functional"}])
    path = write_jsonl(tmp_path / "f.jsonl", [lcb_row(public_test_cases=functional, metadata="{}")])
    assert "metadata.func_name" in load_error({"name": "livecodebench", "path": str(path)})


def test_code_task_limits(tmp_path: Path) -> None:
    """CO11 (LiveCodeBench's 6 s default), CO12 (1024 MB default), CO21 (dataset.timeout_s ignored)."""
    assert build_task({"name": "livecodebench"}).limits.timeout_s == 6.0
    assert build_task({"name": "mbpp"}).limits.timeout_s == 10.0
    assert build_task({"name": "mbpp"}).limits.memory_mb == 1024
    assert build_task({"name": "humaneval", "timeout_s": 3}).limits.timeout_s == 3.0


def test_mbpp_and_humaneval_rows(tmp_path: Path) -> None:
    """CO4 (an empty test_list loaded: every completion would pass), CO14 ("prompt" preferred to
    "text" when a row has both), CO2 (HumanEval's canonical solution dropped from the reference)."""
    path = write_jsonl(tmp_path / "e.jsonl", [{"task_id": 1, "text": "t", "test_list": []}])
    assert "test_list" in load_error({"name": "mbpp", "path": str(path)})
    row = {"task_id": 2, "text": "the text", "prompt": "the prompt", "test_list": ["assert f()"]}
    (problem,) = build_task({"name": "mbpp", "path": str(write_jsonl(tmp_path / "b.jsonl", [row]))}).load()
    assert "the text" in problem.messages[-1]["content"] and "the prompt" not in problem.messages[-1]["content"]
    he = {**HUB_ROWS["humaneval"], "canonical_solution": "    return 1\n"}
    (problem,) = build_task({"name": "humaneval", "path": str(write_jsonl(tmp_path / "h.jsonl", [he]))}).load()
    assert problem.reference["canonical_solution"] == "    return 1\n"


# Mutants of the review
# (89: 40 killed by existing tests, 44 by this file, 5 equivalent or left untested)
#
# data.py (27: 10 existing, 17 new)
#   DA4 bool num_prompts admitted: existing (test_tasks_bad_input). DA5 one row too many: existing
#   (test_tasks_loaders math500). DA7 null fields accepted: existing (test_tasks_bad_input mmlu_pro).
#   DA10 JSONL line numbers from 0: existing (test_data_review). DA13 hub_config dropped: existing
#   (test_prompts_review mbpp yaml). DA14/DA15 hub data files split into letters / not named: existing
#   (test_tasks_loader_review_fixes). DA19 empty parquet not caught, DA22 row + 1: existing
#   (test_tasks_loader_review_fixes). DA20 directory check skipped: existing (test_data_review).
#   DA1, DA2, DA3, DA6, DA8, DA9, DA11, DA12, DA16, DA17, DA18, DA21, DA23, DA24, DA25, DA26, DA27: new.
#
# math_tasks.py (21: 12 existing, 7 new, 2 equivalent / untested)
#   MT1 unique_id ignored, MT6 problem index + 1: existing (test_tasks_loaders math500). MT2 answer kept
#   unstringified: existing (test_tasks_loader_review_fixes). MT5 AIME24 id key: existing (aime24).
#   MT8 reference seed without the generator offset, MT9 datasets built from one seed, MT19 k = i % G,
#   MT21 reference index = i: existing (test_tasks_loaders gen_math gradable). MT13 no form-scored
#   generators, MT14 score > 0: existing (fraction test). MT15 duplicate check off: existing
#   (test_tasks_loader_review_fixes). MT16 stop string not cut: existing (test_tasks_loaders).
#   MT3, MT4, MT7, MT10, MT11, MT18, MT20: new.
#   MT12 (question not stripped): equivalent: math_prompt strips the problem text.
#   MT17 (AIME graded by grade_math instead of grade_integer): survives everything; not pinned here
#       (both graders accept the existing fixtures' integer answers; the difference is in graders'
#       reading of non-integer forms, which the grader reviews own).
#
# choice_tasks.py (20: 10 existing, 9 new, 1 equivalent)
#   CT2 answer letter = order[0] (not the inverse), CT3 seed ignored, CT4 one shuffle for every problem,
#   CT5 Record ID ignored, CT14 digit strings not parsed, CT19 options reversed before the shuffle:
#   existing (test_tasks_loaders gpqa). CT7 grader letters A-D only: existing (mmlu_pro layout).
#   CT11 answer/answer_index agreement unchecked: existing (test_tasks_bad_input). CT13 whole floats not
#   read: existing (mmlu_pro float). CT17 duplicate ids: existing (test_tasks_bad_input).
#   CT1, CT8, CT9, CT10, CT12, CT15, CT16, CT18, CT20: new.
#   CT6 (GPQA cells not stripped): equivalent: choice_prompt strips every option and the question.
#
# code_tasks.py (21: 8 existing, 11 new, 2 equivalent / untested)
#   CO1 package file not the default: existing (humaneval package). CO3 test_imports ignored, CO5
#   private cases dropped, CO17 starter code dropped, CO18 only the first case kept: existing
#   (test_tasks_loaders). CO8 empty private cases an error, CO9 list cases unchecked, CO15 a string
#   test_imports joined by letters: existing (test_tasks_loader_review_fixes).
#   CO2, CO4, CO7, CO10, CO11, CO12, CO13, CO14, CO16, CO20, CO21: new.
#   CO6 (functional decided by the first case only): survives; LiveCodeBench rows are all stdin or all
#       functional, so it differs only on mixed rows, which the dataset does not have.
#   CO19 (func_name kept only for functional rows): equivalent for grading: stdio jobs ignore func_name.

"""scripts/compare_runs.py and scripts/report.py on bad and edge inputs: one `error:` line, runs left intact.

The runs here are written by hand (summary.json + chains.jsonl, no config.yaml: the setting
is then the summary's keys), so each case changes exactly one thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from presto.eval.runs import RunData, compare, pool
from tests.conftest import call_script, load_script, one_error_line

compare_runs = load_script("compare_runs")
report = load_script("report")


SUMMARY = {"sampler": "powermh", "alpha": 4.0, "tau": 0.25, "max_new_tokens": 8, "block_size": 4, "steps": 6}


def chain(prompt: int, index: int, calls: int, seconds: float, loglik: float) -> dict:
    return {
        "prompt_id": f"p{prompt}",
        "chain": index,
        "seed": 0,
        "model_calls": calls,
        "call_time_s": seconds,
        "transitions": 12,
        "loglik": loglik,
        "confidence": -loglik / 2,
    }


def write_run(path: Path, traversal: str, calls: int, seconds: float, shift: float = 0.0) -> Path:
    """Four prompts x two chains with a spread in loglik across prompts."""
    path.mkdir(parents=True)
    n_pf = 1 if traversal == "sequential" else 4
    (path / "summary.json").write_text(json.dumps({**SUMMARY, "traversal": traversal, "n_pf": n_pf, "prompts": 4}))
    records = [chain(p, c, calls, seconds * (1 + p), shift - 1 - 0.3 * p - 0.1 * c) for p in range(4) for c in (0, 1)]
    (path / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    return write_run(tmp_path / "seq", "sequential", 14, 1.0), write_run(tmp_path / "bfs", "bfs", 6, 0.8, 0.01)


def test_compare_prints_the_statistics_it_was_asked_for(pair, capsys):
    assert call_script(compare_runs, *pair, "--stats", "loglik", "transitions", "loglik") == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| powermh/bfs@4 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["loglik", "transitions"]


def test_compare_refuses_a_statistic_no_chain_records(pair, capsys):
    assert call_script(compare_runs, *pair, "--stats", "lolglik") == 2
    assert "--stats lolglik" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("margin", ["-1", "0", "nan", "inf"])
def test_compare_refuses_a_margin_that_is_not_positive(pair, capsys, margin):
    assert call_script(compare_runs, *pair, f"--margin-sd={margin}") == 2
    assert "--margin-sd must be a positive number" in capsys.readouterr().err


def damage(run: Path, case: str) -> str:
    """Break ``run`` one way; returns what the error line must name."""
    if case == "summary torn":
        (run / "summary.json").write_text('{"sampler": "powermh", "trav')
        return "summary.json cannot be read"
    if case == "summary a list":
        (run / "summary.json").write_text("[1, 2]")
        return "summary.json is not a run summary"
    if case == "record without chain":
        (run / "chains.jsonl").write_text(json.dumps({"prompt_id": "p0", "model_calls": 1}) + "\n")
        return "record 1 lacks chain, call_time_s, transitions"
    if case == "record a list":
        (run / "chains.jsonl").write_text("[1]\n")
        return "record 1 is not a chain record"
    if case == "text in a statistic":
        records = [json.loads(line) for line in (run / "chains.jsonl").read_text().splitlines()]
        records[2]["loglik"] = "-1.2"
        (run / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return "statistic 'loglik' is not a number in the chains of p1"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case", ["summary torn", "summary a list", "record without chain", "record a list", "text in a statistic"]
)
def test_compare_names_what_is_wrong_with_a_run(pair, capsys, case):
    expected = damage(pair[1], case)
    assert call_script(compare_runs, *pair) == 2
    assert expected in one_error_line(capsys.readouterr().err)


def test_compare_refuses_a_file_or_a_multirun_for_a_run(pair, tmp_path, capsys):
    assert call_script(compare_runs, pair[0] / "summary.json", pair[1]) == 2
    assert "is a file, not a run directory" in one_error_line(capsys.readouterr().err)
    assert call_script(compare_runs, tmp_path, pair[1]) == 2  # tmp_path holds the two runs
    assert "give their directories" in one_error_line(capsys.readouterr().err)


def test_compare_json_never_overwrites_a_run_and_fails_in_one_line(pair, tmp_path, capsys):
    chains = pair[0] / "chains.jsonl"
    before = chains.read_text()
    assert call_script(compare_runs, *pair, "--json", chains) == 2
    assert "would overwrite the run" in one_error_line(capsys.readouterr().err)
    assert chains.read_text() == before
    assert call_script(compare_runs, *pair, "--json", tmp_path) == 2
    assert "is a directory" in one_error_line(capsys.readouterr().err)
    assert call_script(compare_runs, *pair, "--json", pair[0] / "summary.json" / "out.json") == 2
    assert "is a file, not a directory" in one_error_line(capsys.readouterr().err)
    out = tmp_path / "new" / "folder" / "compare.json"
    assert call_script(compare_runs, *pair, "--json", out) == 0
    speedup = json.loads(out.read_text())["pairs"][0]["speedup"]
    # eq. 20 over the paired chains: summed call time of the baseline over the variant's.
    assert speedup["speedup"] == pytest.approx(1.0 / 0.8)
    assert speedup["call_reduction"] / speedup["time_per_call_increase"] == pytest.approx(speedup["speedup"])


def test_pool_counts_a_baseline_once_however_its_path_is_spelled(tmp_path):
    seq = write_run(tmp_path / "seq", "sequential", 14, 1.0)
    other = write_run(tmp_path / "seq2", "sequential", 14, 1.0)
    (tmp_path / "sub").mkdir()
    paths = (seq, tmp_path / "sub" / ".." / "seq", other)
    runs = [RunData(p, {}, json_lines(p / "chains.jsonl")) for p in paths]
    variants = [write_run(tmp_path / f"v{i}", "bfs", 6, 0.8, 0.01 * i) for i in (1, 2, 3)]
    variant_runs = [RunData(v, {}, json_lines(v / "chains.jsonl")) for v in variants]
    comparisons = [compare(b, v) for b, v in zip(runs, variant_runs, strict=True)]
    assert pool(comparisons, "loglik").pairs == 2  # seq (spelled twice) once, seq2 once
    assert pool(comparisons[:2], "loglik") is None  # one baseline alone: nothing to pool


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def multirun(tmp_path) -> Path:
    root = tmp_path / "multi"
    write_run(root / "0", "sequential", 14, 1.0)
    write_run(root / "1", "bfs", 6, 0.8, 0.01)
    return root


def test_report_leaves_out_an_unreadable_job_with_a_notice(multirun, tmp_path, capsys):
    write_run(multirun / "2", "bfs", 5, 0.7)
    (multirun / "2" / "summary.json").write_text('{"sampler": "pow')  # damaged after the fact
    out = tmp_path / "report.md"
    assert call_script(report, multirun, "--no-figures", "--out", out) == 0
    err = capsys.readouterr().err
    assert f"notice: {multirun / '2'} left out: " in err and "summary.json cannot be read" in err
    text = out.read_text()
    assert "2 run directories." in text and "Quality equivalence" in text


def test_report_lists_a_run_given_twice_once(multirun, tmp_path):
    out = tmp_path / "report.md"
    assert call_script(report, multirun, multirun / "1", "--no-figures", "--out", out) == 0
    text = out.read_text()
    assert "2 run directories." in text and text.count("| bfs | 4 |") == 1


def test_report_says_why_a_presto_run_has_no_speedup(multirun, tmp_path):
    out = tmp_path / "report.md"
    assert call_script(report, multirun / "1", "--no-figures", "--out", out) == 0
    assert f"note: {multirun / '1'}: no sequential run of this setting here" in out.read_text()
    damage(multirun / "1", "text in a statistic")
    assert call_script(report, multirun / "0", multirun / "1", "--no-figures", "--out", out) == 0
    assert f"note: {multirun / '1'} not compared with {multirun / '0'}: statistic 'loglik'" in out.read_text()


def test_report_refuses_bad_output_and_margin_in_one_line(multirun, tmp_path, capsys):
    assert call_script(report, multirun, "--no-figures", "--out", tmp_path) == 2
    assert "is a directory" in one_error_line(capsys.readouterr().err)
    assert call_script(report, multirun, "--no-figures", "--out", multirun / "0" / "chains.jsonl") == 2
    assert "would overwrite the run" in one_error_line(capsys.readouterr().err)
    assert call_script(report, multirun, "--no-figures", "--margin-sd", "-0.2") == 2
    assert "--margin-sd must be a positive number" in capsys.readouterr().err


def test_report_of_the_working_directory_is_titled_by_its_name(multirun, tmp_path, monkeypatch):
    monkeypatch.chdir(multirun)
    assert call_script(report, ".", "--no-figures", "--out", tmp_path / "report.md") == 0
    assert (tmp_path / "report.md").read_text().startswith("# PreSTO report: multi\n")


def test_report_given_a_run_file_names_its_directory(multirun, tmp_path, capsys):
    out = tmp_path / "report.md"
    assert call_script(report, multirun / "0" / "summary.json", "--no-figures", "--out", out) == 2
    err = one_error_line(capsys.readouterr().err)
    assert "is a file, not a run directory" in err and f"({multirun / '0'})" in err
    assert call_script(report, tmp_path / "absent", "--no-figures", "--out", out) == 2
    assert "no such directory" in one_error_line(capsys.readouterr().err)
    assert not out.exists()

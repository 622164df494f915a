"""load_run reads chains.jsonl a record at a time and keeps of each chain what the evaluation reads.

A paper-scale chain record is tens of KB on disk (3072 token ids, the text, per-transition
lists, per-call times) and several times that parsed, so a report over a few runs of
thousands of chains used to hold GBs. load_run keeps every number and null, the chain's ids
and its per-call times (RunData.chains); RunData.full_chains() reads the records whole.
These tests check that every report, comparison and figure is what the whole records gave,
and that loading holds far less than the file.
"""

from __future__ import annotations

import gc
import json
import shutil
import tracemalloc
from array import array

import numpy as np
import pytest

from presto.eval import plots, runs
from presto.eval.report import build_report, comparison_lines
from presto.eval.runs import RunData, chain_progress, compare, load_run, pair_chains, paired_values, prompt_figures
from presto.runner.outputs import read_jsonl
from tests.conftest import load_script, peak_bytes, run_cli, toy_args, write_toy_table

HEAVY = ("tokens", "text", "accepts", "log_accepts")  # what every MH chain record holds and no reader reads


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory):
    """A sequential and a PreSTO toy run of one setting (2 prompts x 2 chains, n=8, B=4, K=5)."""
    root = tmp_path_factory.mktemp("chain_streaming")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    for name, extra in (("seq", ("traversal=sequential",)), ("bfs", ("traversal=bfs", "budget.n_pf=6"))):
        result = run_cli(*toy_args(table, root / name, *extra, "seed=3", steps=5))
        assert result.returncode == 0, result.stderr
    return root


def whole(run_dir) -> RunData:
    """The run as load_run used to hold it: every record parsed whole."""
    summary = json.loads((run_dir / "summary.json").read_text())
    return RunData(run_dir, summary, read_jsonl(run_dir / "chains.jsonl"))


def resumed(toy_runs, dest):
    """The PreSTO run with a chain recorded twice (its later record other figures, other prompt
    tokens, one call time null), a graded answer, a damaged middle line and a torn last line."""
    shutil.copytree(toy_runs / "bfs", dest)
    lines = (dest / "chains.jsonl").read_text().splitlines(keepends=True)
    again = json.loads(lines[0])
    again.update(call_time_s=2 * again["call_time_s"], loglik=again["loglik"] - 0.25, correct=True, extracted="B")
    again["prompt_sha"] = "0123456789abcdef"
    again["call_times_s"] = [2 * t for t in again["call_times_s"]]
    again["call_times_s"][1] = None  # a non-finite time is written as null
    text = "".join(lines[:2]) + '{"prompt_id": "to\n' + "".join(lines[2:]) + json.dumps(again) + "\n" + lines[1][:50]
    (dest / "chains.jsonl").write_text(text)
    return dest


def test_loaded_records_keep_numbers_ids_and_call_times_not_text_or_lists(toy_runs):
    for name in ("seq", "bfs"):
        run = load_run(toy_runs / name)
        records = read_jsonl(toy_runs / name / "chains.jsonl")
        assert len(run.chains) == len(records) == 4
        for kept, record in zip(run.chains, records, strict=True):
            assert list(kept) == list(record)  # every key is still there, in its order
            for key in HEAVY:
                assert not isinstance(kept[key], list | str), key
                assert isinstance(kept[key], runs.NotKept) and "not kept by load_run" in repr(kept[key])
            for key, value in record.items():
                if value is None or isinstance(value, bool | int | float) or key in ("prompt_id", "prompt_sha"):
                    assert kept[key] == value and type(kept[key]) is type(value), key
            assert isinstance(kept["call_times_s"], array) and len(kept["call_times_s"]) == record["model_calls"]
            np.testing.assert_array_equal(np.asarray(kept["call_times_s"], dtype=float), record["call_times_s"])


def test_full_chains_reads_the_records_whole_from_disk(toy_runs, tmp_path):
    run = load_run(resumed(toy_runs, tmp_path / "run"))
    records = read_jsonl(run.path / "chains.jsonl")
    assert list(run.full_chains()) == records and list(run.full_chains()) == records  # a fresh pass per call
    assert all(isinstance(r["tokens"], list) and isinstance(r["text"], str) for r in records)


def test_torn_and_damaged_lines_and_a_chain_recorded_twice(toy_runs, tmp_path, capsys):
    """As read_jsonl does: one warning for the damaged middle line, none for the torn last one;
    the chain recorded twice is held twice and counts once, with its later record."""
    path = resumed(toy_runs, tmp_path / "run")
    capsys.readouterr()
    run = load_run(path)
    err = capsys.readouterr().err
    assert err == f"warning: {path / 'chains.jsonl'}: line 3 is not JSON; skipped\n"
    assert len(run.chains) == 5 and run.chains_held == 4 and len(run.answers) == 4
    first = run.answers[("toy/0", 0)]
    later = read_jsonl(path / "chains.jsonl")[-1]
    assert first["call_time_s"] == later["call_time_s"] and first["correct"] is True
    assert isinstance(first["extracted"], runs.NotKept)
    times = np.asarray(first["call_times_s"], dtype=float)
    assert np.isnan(times[1]) and times[0] == later["call_times_s"][0]


def test_every_figure_of_the_evaluation_is_that_of_the_whole_records(toy_runs, tmp_path):
    dup = resumed(toy_runs, tmp_path / "dup")
    for baseline_dir, variant_dir in ((toy_runs / "seq", toy_runs / "bfs"), (toy_runs / "seq", dup)):
        loaded = [load_run(baseline_dir), load_run(variant_dir)]
        full = [whole(baseline_dir), whole(variant_dir)]
        for unit in ("prompt", "chain"):
            stats = ("loglik", "confidence", "model_calls", "wall_time_s", "rounds", "correct")
            a = compare(*loaded, stats=stats, unit=unit)
            b = compare(*full, stats=stats, unit=unit)
            assert a.as_dict() == b.as_dict()
            assert a.prompts_differ == ([] if variant_dir.name == "bfs" else ["toy/0"])
            assert comparison_lines([a], {}) == comparison_lines([b], {})
            for stat in stats:
                x, y = paired_values(pair_chains(*loaded), stat, unit), paired_values(pair_chains(*full), stat, unit)
                np.testing.assert_array_equal(x, y)
        for mine, theirs in zip(loaded, full, strict=True):
            assert prompt_figures(mine) == prompt_figures(theirs)
            assert (mine.chains_held, mine.prompt_ids) == (theirs.chains_held, theirs.prompt_ids)
            for key, record in mine.answers.items():
                got, expected = chain_progress(mine, record), chain_progress(theirs, theirs.answers[key])
                assert (got is None) == (expected is None)
                if got is not None:
                    np.testing.assert_array_equal(got[0], expected[0])
                    np.testing.assert_array_equal(got[1], expected[1])
            trace, expected = plots.transition_trace(mine), plots.transition_trace(theirs)
            assert trace is not None
            for x, y in zip(trace, expected, strict=True):
                np.testing.assert_array_equal(x, y)
    # The report, its figures included, byte for byte.
    loaded = [load_run(p) for p in (toy_runs / "seq", toy_runs / "bfs", dup)]
    full = [whole(p) for p in (toy_runs / "seq", toy_runs / "bfs", dup)]
    mine, theirs = build_report(loaded, tmp_path / "a" / "report.md"), build_report(full, tmp_path / "b" / "report.md")
    assert mine.read_bytes() == theirs.read_bytes()
    figures = sorted(p.name for p in (tmp_path / "a" / "figures").glob("*.png"))
    assert "transition_traces.png" in figures and figures == sorted(
        p.name for p in (tmp_path / "b" / "figures").glob("*.png")
    )
    for name in figures:
        assert (tmp_path / "a" / "figures" / name).read_bytes() == (tmp_path / "b" / "figures" / name).read_bytes(), (
            name
        )


def test_a_statistic_that_is_text_or_a_list_is_refused_as_before(toy_runs, capsys):
    seq, bfs = load_run(toy_runs / "seq"), load_run(toy_runs / "bfs")
    for stat in ("text", "tokens"):
        with pytest.raises(ValueError, match=f"statistic '{stat}' is not a number in the chains of toy/0"):
            compare(seq, bfs, stats=(stat,))
    script = load_script("compare_runs")
    capsys.readouterr()
    assert script.main([str(toy_runs / "seq"), str(toy_runs / "bfs"), "--stats", "text"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "statistic 'text' is not a number" in err[0]
    # A statistic no chain records names the numeric ones the records hold, as from the whole records.
    assert script.main([str(toy_runs / "seq"), str(toy_runs / "bfs"), "--stats", "nothere"]) == 2
    records = [r for n in ("seq", "bfs") for r in read_jsonl(toy_runs / n / "chains.jsonl")]
    numeric = sorted({k for r in records for k, v in r.items() if isinstance(v, int | float)})
    err = capsys.readouterr().err
    assert f"(they record {', '.join(numeric)})" in err and "model_calls" in numeric


def paper_scale(toy_runs, dest, chains):
    """The two toy runs with ``chains`` chains each of paper-scale records: n = 3072 token ids and
    their text, 96 transitions of per-transition lists and 112 per-call times (16 blocks of K = 6)."""
    rng = np.random.default_rng(0)
    for name in ("seq", "bfs"):
        shutil.copytree(toy_runs / name, dest / name)
        base = read_jsonl(toy_runs / name / "chains.jsonl")[0]
        with (dest / name / "chains.jsonl").open("w") as out:
            for i in range(chains):
                tokens = rng.integers(0, 150_000, 3072).tolist()
                times = rng.uniform(0, 0.05, 112).tolist()
                record = {
                    **base,
                    "prompt_id": f"toy/{i // 4}",
                    "chain": i % 4,
                    "tokens": tokens,
                    "text": " ".join(f"w{t % 1000}" for t in tokens),
                    "accepts": rng.integers(0, 2, 96).tolist(),
                    "log_accepts": (-rng.uniform(0, 1, 96)).tolist(),
                    "transitions": 96,
                    "model_calls": 112,
                    "call_time_s": sum(times),
                    "call_times_s": times,
                    "loglik": -float(rng.uniform()),
                    "confidence": -float(rng.uniform()),
                }
                out.write(json.dumps(record) + "\n")
        summary = json.loads((dest / name / "summary.json").read_text())
        summary.update(chains=chains, expected_chains=chains, max_new_tokens=3072, block_size=192, steps=6)
        (dest / name / "summary.json").write_text(json.dumps(summary))
    return [dest / name for name in ("seq", "bfs")]


def test_loading_and_reporting_hold_far_less_than_the_chain_files(toy_runs, tmp_path):
    """Parsed whole, the records took over three times the file (their token lists alone twice
    it). What load_run keeps is a few KB a chain, and the report (tables; the figures cost the
    same whatever the chain count) adds nothing per chain."""
    build_report(
        [load_run(toy_runs / "seq"), load_run(toy_runs / "bfs")], tmp_path / "warm" / "report.md", figures=False
    )
    dirs = paper_scale(toy_runs, tmp_path, chains=200)
    size = (dirs[0] / "chains.jsonl").stat().st_size
    assert size > 8_000_000
    held, peak = peak_bytes(lambda: load_run(dirs[0]))
    assert peak < size / 5
    assert held.chains_held == 200
    gc.collect()
    tracemalloc.start()
    try:
        loaded = [load_run(d) for d in dirs]
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < 2 * size / 10
    written, peak = peak_bytes(lambda: build_report(loaded, tmp_path / "r" / "report.md", figures=False))
    assert peak < size / 5
    assert "| sequential |" in written.read_text()
    # ... and the transition traces are still drawn from them: every chain lines up with its calls.
    trace = plots.transition_trace(loaded[0])
    assert trace is not None and len(trace[0]) == 96

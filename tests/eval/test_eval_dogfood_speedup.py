"""Dogfooding fixes in compare_runs and report: the speedup decomposition explained, incomplete runs flagged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from presto.eval.runs import compare, load_run
from tests.conftest import load_script, run_cli, toy_args, write_toy_table

compare_runs = load_script("compare_runs")
report = load_script("report")

SUMMARY = {"sampler": "powermh", "alpha": 4.0, "tau": 0.25, "max_new_tokens": 8, "block_size": 4, "steps": 6}


def write_run(path: Path, traversal: str, chains: list[tuple[int, float]]) -> Path:
    """A hand-written run (no config.yaml): one prompt per (calls, call time) chain."""
    path.mkdir(parents=True)
    summary = {**SUMMARY, "traversal": traversal, "n_pf": 1 if traversal == "sequential" else 4, "prompts": 3}
    (path / "summary.json").write_text(json.dumps(summary))
    records = [
        {
            "prompt_id": f"p{i}",
            "chain": 0,
            "seed": 0,
            "model_calls": calls,
            "call_time_s": seconds,
            "transitions": 12,
            "loglik": -1.0 - 0.3 * i,
            "confidence": -0.5 - 0.1 * i,
        }
        for i, (calls, seconds) in enumerate(chains)
    ]
    (path / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def spread(tmp_path) -> tuple[Path, Path]:
    """Time per call spreads across chains, so call reduction != calls A/B and the increase != pooled ratio."""
    seq = write_run(tmp_path / "seq", "sequential", [(14, 1.4), (14, 2.8), (14, 14.0)])
    bfs = write_run(tmp_path / "bfs", "bfs", [(2, 0.4), (7, 2.1), (6, 9.0)])
    return seq, bfs


def test_compare_runs_says_how_reduction_and_increase_are_defined(spread, capsys):
    assert compare_runs.main([str(p) for p in spread]) == 0
    out = capsys.readouterr().out
    definitions = [line for line in out.splitlines() if "call reduction = speedup × increase" in line]
    assert (
        len(definitions) == 1
        and "time/call increase = mean over prompts of each prompt's time per call" in definitions[0]
    )
    assert "(calls A/B)" in definitions[0]
    # The numbers keep the paper's definition (eq. 20, ratios of means).
    s = compare(load_run(spread[0]), load_run(spread[1]), stats=()).speedup
    assert s.speedup == pytest.approx((1.4 + 2.8 + 14.0) / (0.4 + 2.1 + 9.0))
    assert s.time_per_call_increase == pytest.approx(((0.2 + 0.3 + 1.5) / 3) / ((0.1 + 0.2 + 1.0) / 3))
    assert s.call_reduction == pytest.approx(s.speedup * s.time_per_call_increase)
    assert s.calls_ratio == pytest.approx(42 / 15) and abs(s.calls_ratio - s.call_reduction) > 0.1
    row = next(line for line in out.splitlines() if line.startswith("| powermh/sequential | powermh/bfs@4 |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[4:8] == [f"{v:.4g}" for v in (s.speedup, s.call_reduction, s.time_per_call_increase, s.calls_ratio)]


def test_report_says_how_reduction_and_increase_are_defined_and_shows_the_calls_ratio(spread, tmp_path):
    out = tmp_path / "report.md"
    assert report.main([str(spread[0].parent), "--out", str(out), "--no-figures"]) == 0
    text = out.read_text()
    definitions = [line for line in text.splitlines() if "call reduction = speedup × increase" in line]
    assert (
        len(definitions) == 1
        and "time/call increase = mean over prompts of each prompt's time per call" in definitions[0]
    )
    assert "(calls seq/run)" in definitions[0]
    header = next(line for line in text.splitlines() if line.startswith("| traversal |"))
    columns = [c.strip() for c in header.split("|")[1:-1]]
    row = next(line for line in text.splitlines() if line.startswith("| bfs |"))
    cells = dict(zip(columns, [c.strip() for c in row.split("|")[1:-1]], strict=True))
    s = compare(load_run(spread[0]), load_run(spread[1]), stats=()).speedup
    assert cells["calls seq/run"] == f"{s.calls_ratio:.4g}"
    assert cells["call reduction"] == f"{s.call_reduction:.4g}" and cells["speedup"] == f"{s.speedup:.4g}"


# --- incomplete runs -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A finished sequential run and a BFS run of one toy setting (2 prompts x 2 chains)."""
    root = tmp_path_factory.mktemp("dogfood_incomplete")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    for name, extra in (("seq", ("traversal=sequential",)), ("bfs", ("traversal=bfs", "budget.n_pf=4"))):
        done = run_cli(*toy_args(table, root / name, *extra))
        assert done.returncode == 0, done.stderr[-2000:]
    return root / "seq", root / "bfs"


def interrupt(source: Path, dest: Path, keep: int, old: bool) -> Path:
    """A copy of ``source`` that holds only its first ``keep`` chains, as an interrupted run leaves it.

    ``old``: as written before summary.json carried complete and expected_chains.
    """
    shutil.copytree(source, dest)
    lines = (dest / "chains.jsonl").read_text().splitlines(keepends=True)
    (dest / "chains.jsonl").write_text("".join(lines[:keep]))
    summary = json.loads((dest / "summary.json").read_text())
    summary.update(chains=keep, complete=False)
    if old:
        summary.pop("complete")
        summary.pop("expected_chains", None)
    (dest / "summary.json").write_text(json.dumps(summary))
    return dest


@pytest.mark.parametrize("old", [False, True], ids=["summary-keys", "config-fallback"])
def test_compare_runs_warns_about_an_incomplete_run(toy_pair, tmp_path, capsys, old):
    seq, bfs = toy_pair
    cut = interrupt(bfs, tmp_path / "bfs_cut", keep=3, old=old)
    assert compare_runs.main([str(seq), str(cut)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(cut) in warnings[0] and "holds 3 of 4 chains" in warnings[0]
    assert str(seq) not in warnings[0]
    # Both runs configured 4 chains; the pair holds 3.
    note = next(line for line in captured.out.splitlines() if "pairs 3 chains" in line)
    assert note == f"- note: {seq} vs {cut} pairs 3 chains, fewer than the runs configured (A: 4, B: 4)"


def test_a_finished_run_or_an_unknown_one_is_not_warned_about(toy_pair, tmp_path, capsys):
    seq, bfs = toy_pair
    assert compare_runs.main([str(seq), str(bfs)]) == 0
    captured = capsys.readouterr()
    assert "warning:" not in captured.err and "fewer than" not in captured.out
    # An old run without the summary keys nor config.yaml: completeness unknown, no warning.
    unknown = interrupt(bfs, tmp_path / "unknown", keep=3, old=True)
    (unknown / "config.yaml").unlink()
    assert load_run(unknown).complete is None and load_run(unknown).expected_chains is None


def test_report_notes_an_incomplete_run_with_its_chain_count(toy_pair, tmp_path):
    seq, bfs = toy_pair
    root = tmp_path / "runs"
    shutil.copytree(seq, root / "seq")
    cut = interrupt(bfs, root / "bfs_cut", keep=3, old=True)
    out = tmp_path / "report.md"
    assert report.main([str(root), "--out", str(out), "--no-figures"]) == 0
    text = out.read_text()
    warning = text[text.index("**Warning: incomplete runs.**") :].split("\n\n")[1]
    assert warning.startswith("- ") and str(cut) in warning and "holds 3 of 4 chains" in warning
    assert str(root / "seq") not in warning
    row = next(line for line in text.splitlines() if line.startswith("| bfs |"))
    assert "3 of 4 (incomplete)" in row

"""Review fixes in presto.eval: per-prompt time per call (App. D.2), pooling, seeds, duplicates, robustness.

The runs are written by hand (summary.json + chains.jsonl, no config.yaml), so each case
changes exactly one thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import presto.eval.plots
from presto.eval.report import build_report
from presto.eval.runs import RunData, chain_progress, compare, load_run, pair_chains, pool, speedup
from presto.eval.tost import pooled_tost
from tests.conftest import call_script, load_script

compare_runs = load_script("compare_runs")

SUMMARY = {"sampler": "powermh", "alpha": 4.0, "tau": 0.25, "max_new_tokens": 8, "block_size": 4, "steps": 2}


def record(prompt: str, chain: int, calls: int, seconds: float, **extra) -> dict:
    return {
        "prompt_id": prompt,
        "chain": chain,
        "seed": 0,
        "model_calls": calls,
        "call_time_s": seconds,
        "transitions": 4,
        **extra,
    }


def write_run(path: Path, traversal: str, records: list[dict], **summary) -> Path:
    path.mkdir(parents=True)
    n_pf = 1 if traversal == "sequential" else 4
    prompts = len({r["prompt_id"] for r in records})
    full = {**SUMMARY, "traversal": traversal, "n_pf": n_pf, "prompts": prompts, "seed": 0, **summary}
    (path / "summary.json").write_text(json.dumps({k: v for k, v in full.items() if v is not None}))
    (path / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def table_row(text: str, first_cell: str) -> dict[str, str]:
    """The cells of the report's speed table row starting with ``first_cell``, by column."""
    header = next(line for line in text.splitlines() if line.startswith("| traversal |"))
    columns = [c.strip() for c in header.split("|")[1:-1]]
    row = next(line for line in text.splitlines() if line.startswith(f"| {first_cell} |"))
    return dict(zip(columns, [c.strip() for c in row.split("|")[1:-1]], strict=True))


# --- 1. a summary without max_new_tokens / block_size -------------------------------------


def timed(prompt: str, calls: int) -> dict:
    """A sequential chain with per-call times: one extension call, then one call per transition."""
    return record(prompt, 0, calls, float(calls), call_times_s=[1.0] * calls)


@pytest.mark.parametrize(
    "summary",
    [
        {"max_new_tokens": None},
        {"block_size": None},
        {"block_size": 0},
        {"max_new_tokens": "eight"},
        {"max_new_tokens": 10},  # B=4 does not divide n=10: the stage count is not what ran
    ],
)
def test_chain_progress_is_none_when_the_summary_cannot_tell_the_stages(summary):
    """Sequential, K=1, 4 calls: lines up with 2 stages (n=8, B=4), and with floor(10 / 4) = 2 as well."""
    run = RunData(Path("seq"), {**SUMMARY, "steps": 1, "traversal": "sequential", **summary}, [])
    assert chain_progress(run, timed("p0", 4)) is None
    good = RunData(Path("seq"), {**SUMMARY, "steps": 1, "traversal": "sequential"}, [])
    transitions, times = chain_progress(good, timed("p0", 4))  # the same record with a usable summary
    assert transitions.tolist() == [0, 1, 1, 2] and times.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_report_keeps_its_tables_when_the_summary_lacks_max_new_tokens_and_block_size(tmp_path):
    chains = [timed(f"p{i}", 6) | {"loglik": -1.0 - 0.1 * i} for i in range(3)]
    runs = [
        load_run(write_run(tmp_path / name, traversal, chains, max_new_tokens=None, block_size=None))
        for name, traversal in (("seq", "sequential"), ("bfs", "bfs"))
    ]
    out = build_report(runs, tmp_path / "out" / "report.md", figures=True)
    text = out.read_text()
    assert "## Speed per sampler and setting" in text and table_row(text, "bfs")["speedup"] == "1"


def test_a_figure_that_fails_becomes_a_note_and_the_tables_stay(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("no figure today")

    monkeypatch.setattr(presto.eval.plots, "make_plots", broken)
    chains = [record(f"p{i}", 0, 6, 6.0, loglik=-1.0 - 0.1 * i) for i in range(3)]
    runs = [load_run(write_run(tmp_path / n, t, chains)) for n, t in (("seq", "sequential"), ("bfs", "bfs"))]
    text = build_report(runs, tmp_path / "report.md", figures=True).read_text()
    assert "Figures could not be drawn: RuntimeError: no figure today" in text
    assert table_row(text, "bfs")["speedup"] == "1" and "## Quality equivalence" in text
    assert "no figure today" in capsys.readouterr().err


# --- 2. time per call per prompt (App. D.2) -----------------------------------------------


def test_time_per_call_is_per_prompt_as_in_the_paper():
    """One prompt, two chains: its time per call is its summed call time over its summed calls."""
    a = RunData(Path("a"), {}, [record("p0", 0, 10, 10.0), record("p0", 1, 10, 10.0)])
    b = RunData(Path("b"), {}, [record("p0", 0, 1, 5.0), record("p0", 1, 9, 9.0)])
    s = speedup(pair_chains(a, b))
    assert s.time_per_call_baseline == pytest.approx(1.0) and s.time_per_call_variant == pytest.approx(1.4)
    assert s.speedup == pytest.approx(10.0 / 7.0)
    assert s.time_per_call_increase == pytest.approx(1.4)  # not (0.5 * (5 + 1)) / 1 = 3.0
    assert s.call_reduction == pytest.approx(2.0) and s.calls_ratio == pytest.approx(2.0)


def test_time_per_call_is_the_mean_over_prompts_of_each_prompts_ratio():
    a = RunData(Path("a"), {}, [record("p0", 0, 10, 10.0), record("p1", 0, 10, 30.0), record("p1", 1, 30, 30.0)])
    b = RunData(Path("b"), {}, [record("p0", 0, 2, 4.0), record("p1", 0, 1, 9.0), record("p1", 1, 4, 6.0)])
    s = speedup(pair_chains(a, b))
    assert s.time_per_call_baseline == pytest.approx((1.0 + 60.0 / 40) / 2)
    assert s.time_per_call_variant == pytest.approx((2.0 + 15.0 / 5) / 2)
    assert s.time_per_call_increase == pytest.approx(2.5 / 1.25)
    assert s.call_reduction == pytest.approx(s.speedup * 2.0)


# --- 3. pooling needs two independent comparisons -----------------------------------------

# The reviewer's case: the paired t-TOST says not equivalent, a z-test pooled over it alone says equivalent.
LOGLIK_A = [-1.0, -0.8, -1.2, -0.9]
LOGLIK_B = [-0.98, -0.83, -1.16, -0.92]


def runs_with_loglik(path: Path, values: list[float], traversal: str) -> RunData:
    records = [record(f"p{i}", 0, 10, 10.0, loglik=v) for i, v in enumerate(values)]
    return RunData(path, {"traversal": traversal}, records)


def test_pool_of_one_surviving_comparison_is_none_not_a_contradicting_z_test(tmp_path):
    baseline = runs_with_loglik(tmp_path / "seq", LOGLIK_A, "sequential")
    variants = [runs_with_loglik(tmp_path / f"v{i}", LOGLIK_B, "bfs") for i in (1, 2)]
    comparisons = [compare(baseline, v, stats=("loglik",)) for v in variants]
    paired = comparisons[0].tost["loglik"]
    assert not paired.equivalent and pooled_tost([paired]).equivalent  # why a lone pair must not be pooled
    assert pool(comparisons, "loglik") is None  # one baseline: one independent comparison
    assert pool(comparisons[:1], "loglik") is None
    other = runs_with_loglik(tmp_path / "seq2", LOGLIK_A, "sequential")
    two = [comparisons[0], compare(other, variants[1], stats=("loglik",))]
    assert pool(two, "loglik").pairs == 2
    # One variant against two baselines is not two independent pairs either: the variant's
    # chains would enter the pooled test twice.
    shared_variant = [comparisons[0], compare(other, variants[0], stats=("loglik",))]
    assert pool(shared_variant, "loglik") is None
    assert pool([*shared_variant, two[1]], "loglik").pairs == 2  # seq-v1 and seq2-v2


def test_report_shows_no_pooled_row_when_one_comparison_survives(tmp_path):
    """Two settings of powermh/bfs@4; the second has one prompt, so no TOST: nothing to pool."""
    a = [record(f"p{i}", 0, 10, 10.0, loglik=v, confidence=v / 2) for i, v in enumerate(LOGLIK_A)]
    b = [record(f"p{i}", 0, 4, 8.0, loglik=v, confidence=v / 2) for i, v in enumerate(LOGLIK_B)]
    write_run(tmp_path / "s1" / "seq", "sequential", a)
    write_run(tmp_path / "s1" / "bfs", "bfs", b)
    write_run(tmp_path / "s2" / "seq", "sequential", a[:1], alpha=2.0)
    write_run(tmp_path / "s2" / "bfs", "bfs", b[:1], alpha=2.0)
    runs = [load_run(p.parent) for p in sorted(tmp_path.rglob("summary.json"))]
    text = build_report(runs, tmp_path / "report.md", figures=False).read_text()
    assert "Pooled over its settings" not in text
    assert "Not pooled: fewer than two of these comparisons" in text


def test_compare_runs_pools_nothing_when_both_pairs_share_a_baseline(tmp_path, capsys):
    seq = write_run(
        tmp_path / "seq", "sequential", [record(f"p{i}", 0, 10, 10.0, loglik=v) for i, v in enumerate(LOGLIK_A)]
    )
    bfs = write_run(tmp_path / "bfs", "bfs", [record(f"p{i}", 0, 4, 8.0, loglik=v) for i, v in enumerate(LOGLIK_B)])
    out = tmp_path / "compare.json"
    assert call_script(compare_runs, seq, bfs, seq, bfs, "--stats", "loglik", "--json", out) == 0
    stdout = capsys.readouterr().out
    assert json.loads(out.read_text())["pooled"] == {"loglik": None}
    assert "No statistic can be pooled: fewer than two pairs that share no run" in stdout
    assert "run pairs pooled" not in stdout


# --- 4. seed matching needs seeds ---------------------------------------------------------


def test_records_without_seeds_are_not_seed_matched():
    unseeded = [{k: v for k, v in record(f"p{i}", 0, 10, 10.0).items() if k != "seed"} for i in range(2)]
    a, b = RunData(Path("a"), {}, unseeded), RunData(Path("b"), {}, [dict(r) for r in unseeded])
    assert compare(a, b, stats=()).seed_matched is False
    one_side = RunData(Path("c"), {}, [record(f"p{i}", 0, 10, 10.0) for i in range(2)])
    assert compare(a, one_side, stats=()).seed_matched is False
    assert compare(one_side, RunData(Path("d"), {}, [dict(r) for r in one_side.chains]), stats=()).seed_matched


# --- 5. a chain recorded twice counts once ------------------------------------------------


def test_a_chain_recorded_twice_pairs_once_with_its_later_record():
    a = RunData(
        Path("a"),
        {},
        [record("p0", 0, 10, 99.0), record("p1", 0, 10, 20.0), record("p0", 0, 10, 10.0)],  # p0 resumed
    )
    b = RunData(Path("b"), {}, [record("p0", 0, 2, 5.0), record("p1", 0, 2, 5.0)])
    pairs = pair_chains(a, b)
    assert [(x["prompt_id"], x["call_time_s"]) for x, _ in pairs] == [("p0", 10.0), ("p1", 20.0)]  # baseline order
    c = compare(a, b, stats=())
    assert c.speedup.units == 2 and c.unpaired == (0, 0)
    assert c.speedup.speedup == pytest.approx(15.0 / 5.0)
    extra = RunData(Path("b2"), {}, [*b.chains, record("p1", 0, 2, 5.0), record("p2", 0, 2, 5.0)])
    assert compare(a, extra, stats=()).unpaired == (0, 1)


def test_report_call_time_per_chain_counts_a_chain_recorded_twice_once(tmp_path):
    seq = [record("p0", 0, 10, 30.0), record("p1", 0, 10, 20.0), record("p0", 0, 10, 10.0)]
    bfs = [record("p0", 0, 2, 5.0), record("p1", 0, 2, 5.0)]
    runs = [load_run(write_run(tmp_path / "seq", "sequential", seq)), load_run(write_run(tmp_path / "bfs", "bfs", bfs))]
    text = build_report(runs, tmp_path / "report.md", figures=False).read_text()
    assert table_row(text, "sequential")["call time/chain (s)"] == "15"  # (10 + 20) / 2, not 60 / 3
    assert table_row(text, "bfs")["speedup"] == "3"

"""Tests from a mutation review of the evaluation statistics (eval/tost.py, runs.py, report.py).

Each test kills a mutant the other tests let live: a boundary of the exact (zero-spread) TOST, the
rounding tolerance at large values, the per-prompt mean, seed matching, the same-seed sequential
baseline, pooling only pairs with a baseline spread, chain_summary over the chains held, prompts_differ,
and the "Shards pooled" table (grouping key, numeric shard order, the first comparison of a shard,
unequal shards, eq. (20) over all pairs). The references are worked by hand in each test, never read
off the implementation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from presto.eval.report import shards_pooled_lines
from presto.eval.runs import (
    RunData,
    chain_summary,
    compare,
    load_run,
    pair_chains,
    paired_values,
    pool,
    sequential_baseline,
)
from presto.eval.tost import paired_tost, pooled_tost


def rec(prompt: str, chain: int, calls: int, seconds: float, **extra) -> dict:
    return {"prompt_id": prompt, "chain": chain, "model_calls": calls, "call_time_s": seconds, "transitions": 4} | extra


# --- tost.py: an exact pair (zero spread) on the margin --------------------------------------


@pytest.mark.parametrize("shift", [-0.5, 0.5])
def test_a_shift_of_exactly_the_margin_is_not_equivalent(shift):
    # Every difference is exactly +-delta: mu_d = +-delta lies in H0 (|mu_d| >= delta), so with
    # no spread nothing rejects it: that side's p is 1 and its statistic is at the null's end.
    baseline = np.array([0.0, 1.0, 2.0, 3.0])
    result = paired_tost(baseline, baseline + shift, margin=0.5)
    assert result.se == 0 and result.mean_diff == shift
    if shift < 0:
        assert (result.t_lower, result.p_lower, result.p_upper) == (-math.inf, 1.0, 0.0)
    else:
        assert (result.t_upper, result.p_upper, result.p_lower) == (math.inf, 1.0, 0.0)
    assert result.p_eq == 1.0 and not result.equivalent
    inside = paired_tost(baseline, baseline + shift / 2, margin=0.5)
    assert (inside.t_lower, inside.t_upper, inside.p_eq) == (math.inf, -math.inf, 0.0) and inside.equivalent


def test_rounding_spread_is_judged_relative_to_large_values():
    # Values in the millions shifted by 0.1: the differences are 0.1 up to rounding (spread ~1e-11,
    # above an absolute 1e-12 but far below 1e-12 of the values), so this is an exact pair.
    rng = np.random.default_rng(0)
    baseline = rng.uniform(1e5, 4e6, size=40)
    variant = baseline + 0.1
    spread = float(np.std(variant - baseline, ddof=1))
    assert 1e-12 < spread < 1e-12 * baseline.max()  # the test needs that rounding noise
    exact = paired_tost(baseline, variant)
    assert exact.sd_diff == 0 and exact.se == 0 and exact.equivalent
    # Pooled beside a pair with a real spread: equal weights (documented), not a ~1e20 weight.
    other_baseline = rng.normal(size=30)
    other_variant = other_baseline + rng.normal(0.3, 0.5, size=30)
    pooled = pooled_tost([exact, paired_tost(other_baseline, other_variant)])
    d, sd = other_variant - other_baseline, np.std(other_baseline, ddof=1)
    m = [0.1 / np.std(baseline, ddof=1), np.mean(d) / sd]
    se_other = np.std(d, ddof=1) / math.sqrt(30) / sd
    assert pooled.estimate == pytest.approx(np.mean(m), rel=1e-6)
    assert pooled.se == pytest.approx(se_other / 2, rel=1e-9)


# --- runs.py: per-prompt means and seed matching ---------------------------------------------


def test_a_prompts_value_is_the_mean_of_its_chains_not_their_median(tmp_path):
    # Three chains of p0 (baseline 0, 0, 3; variant 1, 1, 1) and two of p1: means by hand.
    base = RunData(tmp_path / "a", {}, [rec("p0", c, 4, 1.0, loglik=v) for c, v in enumerate([0.0, 0.0, 3.0])])
    var = RunData(tmp_path / "b", {}, [rec("p0", c, 4, 1.0, loglik=1.0) for c in range(3)])
    base.chains += [rec("p1", 0, 4, 1.0, loglik=2.0), rec("p1", 1, 4, 1.0, loglik=4.0)]
    var.chains += [rec("p1", 0, 4, 1.0, loglik=2.0), rec("p1", 1, 4, 1.0, loglik=2.5)]
    a, b = paired_values(pair_chains(base, var), "loglik", "prompt")
    assert a.tolist() == [1.0, 3.0] and b.tolist() == [1.0, 2.25]
    t = compare(base, var, stats=("loglik",)).tost["loglik"]
    assert t.n == 2 and t.mean_diff == pytest.approx(((1.0 - 1.0) + (2.25 - 3.0)) / 2)


@pytest.mark.parametrize(
    ("seeds_a", "seeds_b", "matched"),
    [([0, 0, 1], [0, 0, 1], True), ([0, 0, 1], [0, 0, 2], False), ([None, None, None], [None, None, None], False)],
)
def test_a_comparison_is_seed_matched_only_when_every_pair_shares_its_seed(tmp_path, seeds_a, seeds_b, matched):
    base = RunData(tmp_path / "a", {}, [rec(f"p{i}", 0, 4, 1.0, seed=s) for i, s in enumerate(seeds_a)])
    var = RunData(tmp_path / "b", {}, [rec(f"p{i}", 0, 2, 1.0, seed=s) for i, s in enumerate(seeds_b)])
    assert compare(base, var, stats=()).seed_matched is matched


# --- report.py: the "Shards pooled" table ------------------------------------------------------


def shard_run(root: Path, name: str, traversal: str, shard: str, times: dict[str, list[float]], **summary) -> RunData:
    """A run of one shard: config.yaml (JSON is YAML) with dataset.shard, summary.json, chains.jsonl.

    ``times``: per prompt, the call time of each chain; each chain makes one model call per second
    unless ``calls`` (per prompt, each chain's calls) says otherwise."""
    path = root / name
    path.mkdir()
    calls = summary.pop("calls", None) or {}
    num_prompts = summary.pop("num_prompts", 4)
    config = {
        "engine": {"name": "toy"},
        "model": {"path": "toy"},
        "dataset": {"name": "toy", "num_prompts": num_prompts, "shard": shard},
        "sampler": {"name": "powermh", "alpha": 4.0},
        "run": {"chains_per_prompt": 1},
    }
    n_pf = summary.pop("n_pf", 1 if traversal == "sequential" else 8)
    chains = [
        rec(prompt, c, calls.get(prompt, [int(t) for t in ts])[c], t)
        for prompt, ts in times.items()
        for c, t in enumerate(ts)
    ]
    full = {"sampler": "powermh", "traversal": traversal, "n_pf": n_pf, "seed": 0, "alpha": 4.0}
    full |= {"max_new_tokens": 8, "block_size": 4, "steps": 2, "expected_chains": len(chains)} | summary
    (path / "config.yaml").write_text(json.dumps(config))
    (path / "summary.json").write_text(json.dumps(full))
    (path / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chains))
    return load_run(path)


def shard_rows(comparisons) -> list[dict[str, str]]:
    names = {run.path: run.path.name for c in comparisons for run in (c.baseline, c.variant)}
    lines = shards_pooled_lines(comparisons, names)
    table = [line for line in lines if line.startswith("| ")]
    if not table:
        return []
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    return [dict(zip(header, [cell.strip() for cell in row.strip("|").split("|")], strict=True)) for row in table[1:]]


def shard_pair(root: Path, shard: str, seq: dict, bfs: dict, tag: str = "", bfs_calls=None, **summary):
    index = shard.partition("/")[0]
    baseline = shard_run(root, f"seq{index}{tag}", "sequential", shard, seq, **summary)
    variant = shard_run(root, f"bfs{index}{tag}", "bfs", shard, bfs, calls=bfs_calls, **summary)
    return compare(baseline, variant, stats=())


def test_shards_pooled_speedup_is_eq_20_over_all_pairs_not_the_mean_of_the_shards(tmp_path):
    # Shard 0: sequential 10 s per chain, PreSTO 5 s (2x); shard 1: 30 s vs 10 s (3x).
    # Eq. (20) over the 4 paired chains: mean 20 s / mean 7.5 s = 8/3, not (2 + 3) / 2.
    # Time per call: 1 s on every prompt of both runs but PreSTO's p2 (5 s over 2 calls), so the
    # increase is the mean over prompts (1, 1, 2.5, 1) over the sequential's 1, and
    # call reduction = speedup x increase.
    seq0, bfs0 = {"p0": [10.0], "p2": [10.0]}, {"p0": [5.0], "p2": [5.0]}
    comparisons = [
        shard_pair(tmp_path, "0/2", seq0, bfs0, bfs_calls={"p2": [2]}),
        shard_pair(tmp_path, "1/2", {"p1": [30.0], "p3": [30.0]}, {"p1": [10.0], "p3": [10.0]}),
    ]
    (row,) = shard_rows(comparisons)
    assert row["paired chains"] == "4"
    assert float(row["speedup"]) == pytest.approx(8 / 3, rel=1e-3)
    increase = (1 + 1 + 2.5 + 1) / 4  # p0, p1, p2 (5 s / 2 calls), p3
    assert float(row["time/call increase"]) == pytest.approx(increase, rel=1e-3)
    assert float(row["call reduction"]) == pytest.approx(8 / 3 * increase, rel=1e-3)


def test_shards_are_listed_in_numeric_order(tmp_path):
    one = {"p": [2.0]}
    comparisons = [shard_pair(tmp_path, shard, one, one, num_prompts=12) for shard in ("10/12", "2/12")]
    (row,) = shard_rows(comparisons)
    assert next(v for k, v in row.items() if k.startswith("shards")) == "2/12 (bfs2), 10/12 (bfs10)"


@pytest.mark.parametrize(
    ("second", "pooled"),
    [
        ({}, True),
        ({"seed": 1}, False),  # another seed: another replicate, not the rest of this one
        ({"n_pf": 16}, False),  # another budget: another label (powermh/bfs@16)
        ({"shard": "1/3"}, False),  # another split of the prompts
    ],
)
def test_only_shards_of_one_split_seed_and_label_pool(tmp_path, second, pooled):
    one = {"p": [2.0]}
    shard = second.pop("shard", "1/2")
    comparisons = [shard_pair(tmp_path, "0/2", one, one), shard_pair(tmp_path, shard, one, one, **second)]
    assert len(shard_rows(comparisons)) == (1 if pooled else 0)


def test_a_shard_compared_twice_counts_its_first_comparison(tmp_path):
    first = shard_pair(tmp_path, "0/2", {"p0": [4.0]}, {"p0": [2.0]})
    again = shard_pair(tmp_path, "0/2", {"p0": [4.0]}, {"p0": [1.0]}, tag="b")  # a repeat, same seed and label
    other = shard_pair(tmp_path, "1/2", {"p1": [4.0]}, {"p1": [2.0]})
    (row,) = shard_rows([first, again, other])
    assert row["paired chains"] == "2" and float(row["speedup"]) == pytest.approx(2.0)
    assert next(v for k, v in row.items() if k.startswith("shards")) == "0/2 (bfs0), 1/2 (bfs1)"


def test_shards_of_unequal_size_pool_as_one_split(tmp_path):
    # 3 prompts in 2 shards: shard 0 runs two prompts, shard 1 one. Each shard's own setting counts
    # its own prompts (so it pairs with its own sequential shard), yet the two are one split.
    comparisons = [
        shard_pair(tmp_path, "0/2", {"p0": [6.0], "p2": [6.0]}, {"p0": [3.0], "p2": [3.0]}, num_prompts=3),
        shard_pair(tmp_path, "1/2", {"p1": [6.0]}, {"p1": [1.0]}, num_prompts=3),
    ]
    assert comparisons[0].variant.setting_values()["dataset.num_prompts"] == 2
    assert comparisons[1].variant.setting_values()["dataset.num_prompts"] == 1
    (row,) = shard_rows(comparisons)
    assert row["paired chains"] == "3" and float(row["speedup"]) == pytest.approx(6.0 / (7.0 / 3), rel=1e-3)


def test_pool_needs_two_comparisons_with_a_baseline_spread(tmp_path):
    # Two independent comparisons, one of whose baselines has no spread (every prompt the same value):
    # one usable pair is its own paired t-TOST, so there is no pooled test (documented in ``pool``).
    def run(name: str, traversal: str, values: list[float]) -> RunData:
        return RunData(
            tmp_path / name, {"traversal": traversal}, [rec(f"p{i}", 0, 4, 1.0, loglik=v) for i, v in enumerate(values)]
        )

    spread = [run("s1", "sequential", [-1.0, -0.8, -1.2]), run("v1", "bfs", [-1.0, -0.9, -1.1])]
    flat = [run("s2", "sequential", [-1.0, -1.0, -1.0]), run("v2", "bfs", [-1.0, -0.9, -1.1])]
    comparisons = [compare(*spread, stats=("loglik",)), compare(*flat, stats=("loglik",))]
    assert comparisons[1].tost["loglik"].baseline_sd == 0
    assert pool(comparisons, "loglik") is None


def test_the_sequential_baseline_of_the_same_seed_is_preferred(tmp_path):
    def run(name: str, traversal: str, seed: int) -> RunData:
        return RunData(tmp_path / name, {"sampler": "powermh", "traversal": traversal, "n_pf": 8, "seed": seed}, [])

    other, same = run("seq_seed1", "sequential", 1), run("seq_seed0", "sequential", 0)
    variant = run("bfs_seed0", "bfs", 0)
    assert sequential_baseline(variant, [other, same, variant]) is same
    assert sequential_baseline(run("bfs_seed2", "bfs", 2), [other, same]) is other  # none of its seed: the first


def test_chain_summary_counts_a_chain_recorded_twice_once_and_accepts_over_the_chains_that_record_them(tmp_path):
    # p0 was resumed: its later record (10 s, 10 calls, 3 of 4 accepted) replaces the first (99 s);
    # p1 records no accepts, so the acceptance rate is over p0's 4 transitions only.
    run = RunData(
        tmp_path / "r",
        {},
        [
            rec("p0", 0, 30, 99.0, accepted=0, correct=False),
            rec("p1", 0, 10, 20.0, correct=True),
            rec("p0", 0, 10, 10.0, accepted=3, correct=True),
        ],
    )
    figures = chain_summary(run)
    assert figures["time_per_call_s"] == pytest.approx((10.0 + 20.0) / (10 + 10))
    assert figures["transitions_per_call"] == pytest.approx((4 + 4) / (10 + 10))
    assert figures["acceptance_rate"] == pytest.approx(3 / 4)
    assert figures["accuracy"] == pytest.approx(1.0)


def test_prompts_differ_only_where_both_sides_record_their_prompt_tokens(tmp_path):
    base = RunData(tmp_path / "a", {}, [rec("p0", 0, 4, 1.0, prompt_sha="x"), rec("p1", 0, 4, 1.0, prompt_sha="a")])
    var = RunData(tmp_path / "b", {}, [rec("p0", 0, 2, 1.0), rec("p1", 0, 2, 1.0, prompt_sha="b")])
    assert compare(base, var, stats=()).prompts_differ == ["p1"]  # p0: the variant predates prompt_sha

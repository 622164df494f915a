"""scripts/compare_runs.py: pairing, the speedup decomposition (eq. 20), and TOST on toy runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from presto.eval.runs import RunData, compare, pair_chains, paired_values, speedup
from tests.conftest import PROJECT_ROOT, run_cli, toy_args, write_toy_table

COMPARE = PROJECT_ROOT / "scripts" / "compare_runs.py"


def compare_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(COMPARE), *args], capture_output=True, text=True, timeout=120, cwd="/")


def record(prompt: str, chain: int, calls: int, time_s: float, transitions: int = 10, **extra) -> dict:
    return {
        "prompt_id": prompt,
        "chain": chain,
        "seed": 0,
        "model_calls": calls,
        "call_time_s": time_s,
        "transitions": transitions,
        **extra,
    }


def test_speedup_is_a_ratio_of_means_split_into_calls_and_time_per_call():
    baseline = RunData(Path("a"), {}, [record("p0", 0, 10, 10.0), record("p1", 0, 10, 20.0)])
    variant = RunData(Path("b"), {}, [record("p1", 0, 4, 8.0), record("p0", 0, 2, 3.0), record("p9", 0, 1, 1.0)])
    pairs = pair_chains(baseline, variant)
    assert [(a["prompt_id"], b["prompt_id"]) for a, b in pairs] == [("p0", "p0"), ("p1", "p1")]
    s = speedup(pairs)
    assert s.speedup == pytest.approx(15.0 / 5.5)
    assert s.time_per_call_baseline == pytest.approx(1.5)  # mean of 1.0 and 2.0 s per call
    assert s.time_per_call_variant == pytest.approx(1.75)  # mean of 1.5 and 2.0 s per call
    assert s.time_per_call_increase == pytest.approx(1.75 / 1.5)
    assert s.call_reduction / s.time_per_call_increase == pytest.approx(s.speedup)
    assert s.calls_ratio == pytest.approx(10.0 / 3.0)
    assert s.transitions_per_call_baseline == pytest.approx(
        20 / 20
    ) and s.transitions_per_call_variant == pytest.approx(20 / 6)


def run_with_config(path: Path, traversal: str, **sampler) -> RunData:
    """A run directory with a config.yaml (the setting) and two prompts of one chain."""
    from omegaconf import OmegaConf

    path.mkdir(parents=True)
    config = {
        "engine": {"name": "toy", "table": "t.json"},
        "model": {"path": "none"},
        "dataset": {"name": "toy", "num_prompts": 2},
        "sampler": {"name": "entropycut", "alpha": 4.0, "beta": 4.0, "uniform_mix": 0.1, **sampler},
        "traversal": {"name": traversal},
        "budget": {"n_pf": 20},
        "seed": 0,
    }
    (path / "config.yaml").write_text(OmegaConf.to_yaml(config))
    summary = {"sampler": "entropycut", "traversal": traversal, "n_pf": 20, "seed": 0}
    chains = [record(f"p{i}", 0, 4, 4.0, loglik=-1.0 - i, confidence=0.5 + i) for i in range(2)]
    return RunData(path, summary, chains)


def test_runs_pair_only_within_one_setting(tmp_path):
    from presto.eval.runs import sequential_baseline

    sequential = run_with_config(tmp_path / "seq", "sequential")
    sequential_pure = run_with_config(tmp_path / "seq0", "sequential", uniform_mix=0.0)
    bfs = run_with_config(tmp_path / "bfs", "bfs")
    # Sampler options beyond alpha/tau (here uniform_mix) define the setting too.
    assert bfs.setting() == sequential.setting() != sequential_pure.setting()
    assert sequential_baseline(bfs, [sequential_pure, sequential, bfs]) is sequential
    with pytest.raises(ValueError, match=r"sampler.uniform_mix \(0.0 vs 0.1\)"):
        compare(sequential_pure, bfs)
    allowed = compare(sequential_pure, bfs, allow_different_settings=True)
    assert allowed.differences == ["sampler.uniform_mix (0.0 vs 0.1)"]
    assert compare(sequential, bfs).differences == [] and compare(sequential, bfs).unpaired == (0, 0)


def test_compare_script_refuses_a_level_without_an_interval(tmp_path):
    result = compare_cli(str(tmp_path), str(tmp_path), "--level", "0.5")
    assert result.returncode == 2 and "--level must be in (0, 0.5)" in result.stderr


def test_paired_values_per_chain_or_per_prompt():
    a = RunData(Path("a"), {}, [record("p0", c, 1, 1.0, loglik=float(c)) for c in range(2)])
    b = RunData(Path("b"), {}, [record("p0", c, 1, 1.0, loglik=float(c) + 1) for c in range(2)])
    pairs = pair_chains(a, b)
    x, y = paired_values(pairs, "loglik", "chain")
    assert x.tolist() == [0.0, 1.0] and y.tolist() == [1.0, 2.0]
    x, y = paired_values(pairs, "loglik", "prompt")
    assert x.tolist() == [0.5] and y.tolist() == [1.5]
    assert compare(a, b, stats=("loglik",), unit="chain").tost["loglik"].mean_diff == pytest.approx(1.0)
    assert compare(a, b, stats=("loglik",)).tost["loglik"] is None  # per prompt (default): one pair, no test


def test_sequential_and_presto_runs_compare_as_identical_and_faster_per_transition(toy_table, tmp_path):
    runs = {}
    for traversal in ("sequential", "bfs"):
        runs[traversal] = tmp_path / traversal
        result = run_cli(*toy_args(toy_table, runs[traversal], f"traversal={traversal}", "budget.n_pf=6", "seed=4"))
        assert result.returncode == 0, result.stderr
    out = tmp_path / "compare.json"
    result = compare_cli(str(runs["sequential"]), str(runs["bfs"]), "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "speedup" in result.stdout and "p_eq" in result.stdout
    pair = json.loads(out.read_text())["pairs"][0]
    assert pair["seed_matched"] and pair["speedup"]["units"] == 4
    s = pair["speedup"]
    assert s["call_reduction"] / s["time_per_call_increase"] == pytest.approx(s["speedup"])
    assert s["transitions_per_call_variant"] > s["transitions_per_call_baseline"]
    for stat in ("loglik", "confidence"):  # a deterministic engine: PreSTO's chains are the sequential ones
        assert pair["tost"][stat]["mean_diff"] == 0 and pair["tost"][stat]["equivalent"]
    bad = compare_cli(str(runs["sequential"]))
    assert bad.returncode != 0 and "pairs" in bad.stderr


def many_chains(table, run_dir, *extra):
    return (
        "engine=toy",
        "model=toy",
        f"engine.table={table}",
        "dataset=toy",
        "experiment=none",
        "dataset.num_prompts=1000",
        "sampler.max_new_tokens=4",
        "sampler.block_size=4",
        "sampler.steps=4",
        "sampler.alpha=2",
        "traversal=sequential",
        "run.progress=false",
        f"hydra.run.dir={run_dir}",
        *extra,
    )


@pytest.fixture
def fast_tmp(tmp_path):
    """A directory in memory when the machine has one: each finished chain is fsynced, 1000s of them here."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="presto-eval-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_tost_declares_seeds_equivalent_and_a_shifted_alpha_not(fast_tmp):
    """1000 independent chains per run: enough for a 0.2-SD margin (the 90% CI half-width is ~0.07 SD)."""
    tmp_path = fast_tmp
    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)
    settings = {
        "a": ("seed=1",),
        "b": ("seed=2",),
        "c": ("seed=3",),
        "d": ("seed=4",),
        "alpha": ("seed=3", "sampler.alpha=1"),
    }
    dirs = {name: tmp_path / name for name in settings}
    with ThreadPoolExecutor(max_workers=2) as pool:  # the runs wait on fsync more than on the CPU
        results = list(pool.map(lambda name: run_cli(*many_chains(table, dirs[name], *settings[name])), settings))
    for result in results:
        assert result.returncode == 0, result.stderr
    out = tmp_path / "compare.json"
    args = [str(dirs[k]) for k in ("a", "b", "a", "c", "a", "alpha")]
    refused = compare_cli(*args, "--json", str(out))  # alpha differs: not a measure of PreSTO alone
    assert refused.returncode == 2 and "sampler.alpha (2 vs 1)" in refused.stderr and not out.exists()
    result = compare_cli(*args, "--allow-different-settings", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "note:" in result.stdout and "sampler.alpha" in result.stdout
    data = json.loads(out.read_text())
    same_b, same_c, shifted = data["pairs"]
    for pair in (same_b, same_c):
        assert not pair["seed_matched"] and pair["speedup"]["units"] == 1000
        assert pair["tost"]["loglik"]["equivalent"] and pair["tost"]["confidence"]["equivalent"], pair["tost"]
    assert not shifted["tost"]["loglik"]["equivalent"] and shifted["tost"]["loglik"]["p_eq"] > 0.5
    assert not shifted["tost"]["confidence"]["equivalent"]
    # Pooled over two same-setting pairs of four distinct runs: equivalent.
    pooled = compare_cli(*(str(dirs[k]) for k in ("a", "b", "c", "d")), "--json", str(out))
    assert pooled.returncode == 0 and "Pooled" in pooled.stdout
    assert all(v["equivalent"] and v["pairs"] == 2 for v in json.loads(out.read_text())["pooled"].values())
    # A run in both pairs (a as baseline of one and variant of the other) makes them dependent:
    # its chains would enter the pooled test twice, so one pair is left and nothing is pooled.
    reused = compare_cli(*(str(dirs[k]) for k in ("a", "b", "c", "a")), "--json", str(out))
    assert reused.returncode == 0 and all(v is None for v in json.loads(out.read_text())["pooled"].values())
    # Two variants against one baseline are not independent pairs: the baseline enters once,
    # which leaves one pair, and one pair is not pooled (its own paired TOST is the answer).
    shared = compare_cli(*args[:4], "--json", str(out))
    assert shared.returncode == 0 and all(v is None for v in json.loads(out.read_text())["pooled"].values())
    assert "No statistic can be pooled" in shared.stdout

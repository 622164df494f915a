"""scripts/benchmark.py end to end on the toy engine: every setting, exact chains, its JSON figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT, toy_overrides

SCRIPT = PROJECT_ROOT / "scripts" / "benchmark.py"


def run_script(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def test_benchmark_compares_every_setting_with_identical_chains(toy_table, tmp_path):
    out = tmp_path / "figures.json"
    # Overrides right after a multi-valued option: they must not be read as budgets.
    done = run_script(
        "--samplers",
        "powermh",
        "multitry",
        "--traversals",
        "bfs",
        "predictive",
        "clairvoyant",
        "--n-pf",
        "1",
        "5",
        *toy_overrides(toy_table),
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    settings = [(r["sampler"], r["traversal"], r["n_pf"]) for r in rows]
    assert settings == [
        (sampler, traversal, n_pf)
        for sampler in ("powermh", "multitry")
        for traversal, n_pf in [
            ("sequential", 1),
            ("bfs", 1),
            ("bfs", 5),
            ("predictive", 1),
            ("predictive", 5),
            ("clairvoyant", 1),
            ("clairvoyant", 5),
        ]
    ]
    by_setting = {s: r for s, r in zip(settings, rows, strict=True)}
    for sampler in ("powermh", "multitry"):
        sequential = by_setting[(sampler, "sequential", 1)]
        assert all(r["identical_chains"] == r["same_path_chains"] == 1.0 for r in rows if r["sampler"] == sampler)
        assert all(r["chains"] == 4 for r in rows if r["sampler"] == sampler)
        # One request per round is one transition per call: the sequential chain's calls.
        assert by_setting[(sampler, "bfs", 1)]["model_calls"] == sequential["model_calls"]
        assert by_setting[(sampler, "bfs", 5)]["model_calls"] < sequential["model_calls"]
        assert by_setting[(sampler, "bfs", 5)]["transitions_per_call"] > sequential["transitions_per_call"]
        # The clairvoyant walks are BFS's walks, with only the requests they decide.
        bfs, clairvoyant = by_setting[(sampler, "bfs", 5)], by_setting[(sampler, "clairvoyant", 5)]
        assert clairvoyant["rounds"] == bfs["rounds"]
        assert clairvoyant["transitions_per_round"] == bfs["transitions_per_round"]
    # Walk vs oracle (replayed on the BFS run's trees): one transition per round at N_pf=1;
    # at N_pf=5 the node-level oracle cannot beat one request per depth, and nothing was cut off.
    for (_sampler, traversal, n_pf), r in by_setting.items():
        if traversal == "sequential":
            assert "transitions_per_round" not in r
            continue
        assert r["oracle_replayed_on"] == "bfs" and r["replayed_rounds_with_truncated_trees"] == 0
        if n_pf == 1:
            assert r["transitions_per_round"] == r["oracle_transitions_per_round"] == 1.0
            assert r["bfs_expected_transitions_per_round"] == 1.0
        else:
            assert 1.0 < r["oracle_transitions_per_round"] <= r["bfs_expected_transitions_per_round"] + 1e-9 <= 5
            assert 1.0 <= r["transitions_per_round"] <= 5
    for r in rows:  # the chains' wall time holds their call time and the host work around it
        assert r["wall_time_s"] >= r["call_time_s"] and r["host_time_s"] >= 0
        assert 0.0 <= r["others_cores"] <= os.cpu_count()  # what other processes took meanwhile
    assert "identical" in done.stdout and f"figures written to {out}" in done.stdout
    assert "outside model calls" in done.stdout
    assert "MH transitions per prefetch round" in done.stdout


def test_benchmark_refuses_a_mistyped_option(toy_table, tmp_path):
    done = run_script("--npf", "5", *toy_overrides(toy_table), cwd=tmp_path)
    assert done.returncode == 2 and "--npf" in done.stderr


def test_every_setting_starts_with_an_empty_prefix_cache(toy_table, tmp_path, monkeypatch):
    """Each chain of each setting is preceded by a cache reset, so none is served another's prefixes."""
    import importlib.util

    from presto.engines.toy import ToyEngine

    spec = importlib.util.spec_from_file_location("benchmark_script", SCRIPT)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    events = []
    monkeypatch.setattr(ToyEngine, "reset_prefix_cache", lambda self: events.append("reset") or True)
    generate = ToyEngine._generate

    def counted_generate(engine, requests):
        events.append("call")
        return generate(engine, requests)

    monkeypatch.setattr(ToyEngine, "_generate", counted_generate)
    argv = ["--traversals", "bfs", "--n-pf", "2", "5", *toy_overrides(toy_table), "--out", str(tmp_path / "f.json")]
    assert benchmark.main(argv) == 0
    chains = 2 * 2 * 3  # prompts x chains x (sequential, bfs at 2, bfs at 5)
    assert events.count("reset") == chains
    # A reset opens every chain: the first event, and never two resets without calls between them.
    assert events[0] == "reset" and "reset,reset" not in ",".join(events)


def test_a_chain_is_identical_only_along_the_same_path():
    """Same final tokens and accept flags are not enough: each decision's log A must agree too."""
    import numpy as np

    from tests.conftest import load_script

    benchmark = load_script("benchmark")
    same_path = benchmark.same_path
    reference = {"tokens": np.array([3, 1, 2]), "accepts": [1, 0, 1], "log_accepts": [-0.5, float("-inf"), 0.0]}
    other_proposal = {**reference, "log_accepts": [-0.5, -3.2, 0.0]}
    assert benchmark.same_outcome(other_proposal, reference)  # what "identical" counts
    assert same_path(dict(reference), reference)
    # The transformers engine's float64 batch variance (~1e-14) is still one path...
    assert same_path({**reference, "log_accepts": [-0.5 + 1e-14, float("-inf"), 0.0]}, reference)
    # ...another proposal at the second transition, rejected as well, is not.
    assert not same_path(other_proposal, reference)
    assert not same_path({**reference, "accepts": [1, 1, 1]}, reference)
    assert not same_path({**reference, "tokens": np.array([3, 1, 4])}, reference)


def test_rows_split_wall_time_into_calls_and_host_work():
    """Wall-clock figures sum each setting's chains and compare them with the sequential chains'."""
    import numpy as np

    from tests.conftest import load_script

    benchmark = load_script("benchmark")

    def chain(call_s: float, wall_s: float, calls: int, others_cpu_s: float = 0.0) -> dict:
        return {
            "others_cpu_s": others_cpu_s,
            "load_window_s": wall_s + 1.0,  # the chain, and its prompt's encoding and grading
            "model_calls": calls,
            "call_time_s": call_s,
            "wall_time_s": wall_s,
            "transitions": 4,
            "tokens": np.array([1, 2]),
            "accepts": [1, 0, 0, 1],
            "log_accepts": [0.0, -1.0, -1.0, 0.0],
            "discarded_requests": 0,
            "unique_requests": calls,
            "loglik": -1.0,
        }

    records = {
        ("sequential", 1): [chain(8.0, 8.5, 4), chain(4.0, 4.5, 4)],
        ("bfs", 20): [chain(2.0, 3.0, 1, others_cpu_s=4.5), chain(1.0, 3.0, 1, others_cpu_s=-0.01)],
    }
    rows = benchmark.sampler_rows("powermh", records, {}, expected=None)
    sequential, bfs = rows
    assert sequential["wall_time_s"] == 13.0 and sequential["host_time_s"] == 1.0
    assert sequential["wall_speedup"] == 1.0
    assert bfs["wall_time_s"] == 6.0 and bfs["host_time_s"] == 3.0
    assert bfs["speedup"] == 4.0  # in call time: 12 s against 3 s
    assert bfs["wall_speedup"] == 13.0 / 6.0  # in wall time, host work included
    # Other processes' CPU seconds over the setting's load windows (a tick's negative noise included).
    assert sequential["others_cores"] == 0.0 and bfs["others_cores"] == pytest.approx(4.49 / 8.0)


def test_a_benchmark_on_a_busy_machine_says_so(toy_table, tmp_path, monkeypatch, capsys):
    """Chains timed while other processes kept CPUs busy are flagged on their line and after the tables."""
    import presto.eval.machine_load as machine_load
    from tests.conftest import call_script, load_script

    benchmark = load_script("benchmark")
    steps = iter(range(10**6))

    def snapshot():  # 1 s between two snapshots, 0.6 CPU seconds of it other processes'
        step = next(steps)
        return machine_load.CpuSnapshot(wall_s=float(step), machine_busy_s=0.6 * step, own_s=0.0)

    monkeypatch.setattr(machine_load, "cpu_snapshot", snapshot)
    out = tmp_path / "figures.json"
    args = ("--samplers", "powermh", "--traversals", "bfs", "--n-pf", "3", *toy_overrides(toy_table))
    assert call_script(benchmark, *args, "--out", str(out)) == 0
    captured = capsys.readouterr()
    assert captured.out.count("(other processes kept 0.60 CPUs busy)") == 8  # 4 chains x 2 settings
    assert "warning: other processes kept 0.60 of the " in captured.err
    assert [round(row["others_cores"], 9) for row in json.loads(out.read_text())["rows"]] == [0.6, 0.6]


def test_benchmarks_started_in_the_same_second_write_separate_default_files(toy_table, tmp_path):
    """The default --out is named by the time to the second: two launched together must not share it."""
    # Both processes see one frozen clock (sitecustomize), as two jobs a launcher starts at once would.
    frozen = tmp_path / "frozen_clock"
    frozen.mkdir()
    (frozen / "sitecustomize.py").write_text("import time\ntime.strftime = lambda *a, **k: '2026-01-01_00-00-00'\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(frozen), env.get("PYTHONPATH")]))
    # A copy of scripts/ under tmp_path: the default --out lies under the script's project root.
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    for name in ("benchmark.py", "oracle_bound.py"):
        (root / "scripts" / name).write_text((PROJECT_ROOT / "scripts" / name).read_text())
    for name in ("conf", "src"):
        (root / name).symlink_to(PROJECT_ROOT / name)
    argv = [sys.executable, str(root / "scripts" / "benchmark.py"), "--n-pf", "2", *toy_overrides(toy_table)]
    jobs = [subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in "ab"]
    for job in jobs:
        _, err = job.communicate(timeout=300)
        assert job.returncode == 0, err.decode()
    written = sorted((root / "outputs" / "benchmarks").glob("2026-01-01_00-00-00*.json"))
    assert len(written) == 2, written

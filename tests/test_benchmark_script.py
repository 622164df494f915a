"""scripts/benchmark.py end to end on the toy engine: every setting, exact chains, its JSON figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
        for traversal, n_pf in [("sequential", 1), ("bfs", 1), ("bfs", 5), ("predictive", 1), ("predictive", 5)]
    ]
    by_setting = {s: r for s, r in zip(settings, rows, strict=True)}
    for sampler in ("powermh", "multitry"):
        sequential = by_setting[(sampler, "sequential", 1)]
        assert all(r["identical_chains"] == 1.0 for r in rows if r["sampler"] == sampler)
        assert all(r["chains"] == 4 for r in rows if r["sampler"] == sampler)
        # One request per round is one transition per call: the sequential chain's calls.
        assert by_setting[(sampler, "bfs", 1)]["model_calls"] == sequential["model_calls"]
        assert by_setting[(sampler, "bfs", 5)]["model_calls"] < sequential["model_calls"]
        assert by_setting[(sampler, "bfs", 5)]["transitions_per_call"] > sequential["transitions_per_call"]
    assert "identical" in done.stdout and f"figures written to {out}" in done.stdout


def test_benchmark_refuses_a_mistyped_option(toy_table, tmp_path):
    done = run_script("--npf", "5", *toy_overrides(toy_table), cwd=tmp_path)
    assert done.returncode == 2 and "--npf" in done.stderr

"""Scripts run from an unrelated working directory: user paths resolve there, failures propagate;
and the figure scripts (benchmark, call_cost, toy_table) on what a review found them to get wrong.

scripts/gpu_check.sh needs a GPU and vLLM; here nvidia-smi and the interpreter are stand-ins
that record each call (its working directory and arguments), so the script's own logic runs
in milliseconds on any machine. The benchmark runs in this process on the toy engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import (
    PROJECT_ROOT,
    STAND_IN_NVIDIA_SMI,
    call_script,
    load_script,
    one_error_line,
    stand_in_tools,
    toy_overrides,
    write_toy_table,
)

GPU_CHECK = PROJECT_ROOT / "scripts" / "gpu_check.sh"
TOY_TABLE = PROJECT_ROOT / "scripts" / "toy_table.py"

# Records "cwd<TAB>args" per call; pytest and benchmark.py exit with $FAKE_PYTEST / $FAKE_BENCH.
FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\t%s\\n' "$PWD" "$*" >> "$FAKE_CALLS"
if [[ "$1" == -m && "$2" == pytest ]]; then exit "${FAKE_PYTEST:-0}"; fi
if [[ "$1" == *benchmark.py ]]; then exit "${FAKE_BENCH:-0}"; fi
exit 0
"""


@pytest.fixture
def gpu_check(tmp_path):
    bin_dir = stand_in_tools(tmp_path / "bin", {"nvidia-smi": STAND_IN_NVIDIA_SMI, "python": FAKE_PYTHON})
    calls = tmp_path / "calls.txt"
    cwd = tmp_path / "caller dir"  # a space: every path must be quoted
    cwd.mkdir()

    def run(*args: str, **env_vars: str):
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python")}
        env.update(FAKE_CALLS=str(calls), DTYPES="float32", **env_vars)
        done = subprocess.run(["bash", str(GPU_CHECK), *args], capture_output=True, text=True, cwd=cwd, env=env)
        lines = calls.read_text().splitlines() if calls.exists() else []
        return done, [tuple(line.split("\t", 1)) for line in lines], cwd

    return run


def test_gpu_check_resolves_relative_paths_against_the_callers_directory(gpu_check):
    done, calls, cwd = gpu_check("dataset.path=data.jsonl", OUT="report dir", MODEL_PATH="models/m")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (cwd / "report dir" / "gpu_check.txt").is_file()  # not <repo>/report dir
    assert not (PROJECT_ROOT / "report dir").exists()
    bench = [(where, args) for where, args in calls if "benchmark.py" in args]
    cost = [(where, args) for where, args in calls if "call_cost.py" in args]
    assert bench and cost
    for where, args in bench + cost:
        # model.path, dataset.path and --out are read where the user wrote them
        assert Path(where) == cwd and "model.path=models/m" in args and "dataset.path=data.jsonl" in args, args
    (pytest_call,) = [where for where, args in calls if args.startswith("-m pytest")]
    assert Path(pytest_call) == PROJECT_ROOT  # the test paths are the repository's


@pytest.mark.parametrize("failing", ["FAKE_PYTEST", "FAKE_BENCH"])
def test_gpu_check_fails_when_a_step_fails(gpu_check, tmp_path, failing):
    done, calls, _ = gpu_check(OUT=str(tmp_path / "out"), **{failing: "1"})
    assert done.returncode == 1
    assert any("call_cost.py" in args for _, args in calls)  # the later steps still ran


def test_toy_table_unwritable_output_is_one_line(tmp_path):
    out = tmp_path / "table.json"
    out.symlink_to(tmp_path / "no such folder" / "table.json")  # a dangling link: writing it fails
    done = subprocess.run([sys.executable, str(TOY_TABLE), str(out)], capture_output=True, text=True, cwd="/")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr


# --- the figure scripts -------------------------------------------------------------------

benchmark = load_script("benchmark")
call_cost = load_script("call_cost")
toy_table_script = load_script("toy_table")


def interrupted_status(module, *argv) -> int:
    """The exit status of a script stopped by Ctrl-C; a KeyboardInterrupt out of main() (a traceback) fails."""
    try:
        return call_script(module, *argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main(): the user gets a traceback")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return write_toy_table(tmp_path_factory.mktemp("table") / "table.json", vocab=6, seed=3)


def small(table, steps: int = 2) -> tuple[str, ...]:
    """The toy setting with one prompt (2 chains) and K=steps: a benchmark of it takes about a second."""
    return (*toy_overrides(table, steps=steps), "dataset.num_prompts=1")


def rows_of(out: Path) -> list[tuple]:
    return [(r["sampler"], r["traversal"], r["n_pf"]) for r in json.loads(out.read_text())["rows"]]


@pytest.mark.parametrize("argv", [("--seed", "-1"), ("--vocab", "100000")])
def test_toy_table_bad_seed_or_huge_vocabulary_is_one_line(tmp_path, capsys, argv):
    # Was: numpy's traceback (a negative seed), or an attempt to allocate 75 GB (100000 x 100000 logits).
    assert call_script(toy_table_script, tmp_path / "t.json", *argv) == 2
    assert argv[0] in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "t.json").exists()


def test_benchmark_applies_a_sampler_option_to_the_samplers_that_have_it(table, tmp_path, monkeypatch):
    """sampler.beta is EntropyCut's: it must reach EntropyCut and not stop PowerMH from composing."""
    import presto.samplers

    built, build_kernel = {}, presto.samplers.build_kernel

    def spy(settings):
        built[settings.name] = dict(settings.options)
        return build_kernel(settings)

    monkeypatch.setattr(presto.samplers, "build_kernel", spy)
    out = tmp_path / "b.json"
    argv = ("--samplers", "powermh", "entropycut", "--n-pf", "2", *small(table), "sampler.beta=0.5", "--out", out)
    assert call_script(benchmark, *argv) == 0  # was: error: Could not override 'sampler.beta'
    assert built["entropycut"]["beta"] == 0.5 and "beta" not in built["powermh"]
    assert [s for s, _, _ in rows_of(out)] == ["powermh"] * 2 + ["entropycut"] * 2


def test_benchmark_serves_each_sampler_the_predictor_shipped_for_it(table, tmp_path, capsys):
    """traversal.predictor=default is per sampler in the benchmark as in a run, and it says which."""
    from presto.predictor import default_checkpoint
    from presto.predictor.hotload import load_predictor

    argv = ("--samplers", "powermh", "multitry", "--traversals", "bfs", "predictive", "--n-pf", "2", *small(table))
    assert call_script(benchmark, *argv, "--out", tmp_path / "b.json") == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("notice: planning with")]
    expected = []
    for sampler in ("powermh", "multitry"):
        shipped = load_predictor(default_checkpoint(sampler))
        expected.append(f"notice: planning with predictor {shipped.path} (fingerprint {shipped.fingerprint})")
    assert notices == expected


def test_benchmark_applies_a_traversal_option_to_the_rule_that_has_it(table, tmp_path, monkeypatch):
    """traversal.predictor and friends are the predictive rule's: BFS beside it must not refuse them."""
    from presto.prefetch.predictive import PredictiveTraversal

    seen, from_options = [], PredictiveTraversal.from_options.__func__

    def spy(cls, options, sampler=None):
        seen.append(dict(options))
        return from_options(cls, options, sampler)

    monkeypatch.setattr(PredictiveTraversal, "from_options", classmethod(spy))
    out = tmp_path / "b.json"
    options = ("traversal.predictor=null", "traversal.warmup_rows=3")
    argv = ("--traversals", "bfs", "predictive", "--n-pf", "2", *small(table), *options, "--out", out)
    assert call_script(benchmark, *argv) == 0  # was: error: Could not override 'traversal.predictor'
    assert seen and all(o["warmup_rows"] == 3 and o["predictor"] is None for o in seen)
    assert rows_of(out) == [("powermh", "sequential", 1), ("powermh", "bfs", 2), ("powermh", "predictive", 2)]


def test_benchmark_takes_budget_and_traversal_overrides_as_its_settings(table, tmp_path):
    # Was: budget.n_pf=3 traversal=predictive ran BFS at N_pf 5, 10 and 20 without a word.
    out = tmp_path / "b.json"
    argv = (*small(table), "budget.n_pf=3", "traversal=predictive", "traversal.predictor=null", "--out", out)
    assert call_script(benchmark, *argv) == 0
    assert rows_of(out) == [("powermh", "sequential", 1), ("powermh", "predictive", 3)]


def test_benchmark_takes_the_clairvoyant_as_an_override_as_it_does_as_an_option(table, tmp_path):
    # Was: "traversal=clairvoyant is not an option" (checked as a config group choice, which it is not).
    out = tmp_path / "b.json"
    assert call_script(benchmark, *small(table), "budget.n_pf=2", "traversal=clairvoyant", "--out", out) == 0
    assert rows_of(out) == [("powermh", "sequential", 1), ("powermh", "clairvoyant", 2)]


@pytest.mark.parametrize(
    "args, message",
    [
        (("budget.n_pf=3", "--n-pf", "2"), "budget.n_pf"),  # was: --n-pf won, the override did nothing
        (("traversal=predictive", "--traversals", "bfs"), "traversal=predictive"),
        (("sampler=entropycut", "--samplers", "powermh"), "sampler=entropycut"),
        (("sampler.betta=2",), "sampler.betta"),  # a typo no benchmarked sampler has
        (("traversal.predictor=null", "--traversals", "bfs"), "traversal.predictor"),  # BFS has no predictor
        # Keys a run reads and the benchmark did not: each was accepted and did nothing.
        (("hydra.run.dir=/tmp/x",), "hydra.run.dir"),
        (("logger=wandb",), "logger=wandb"),
        (("run.rescore=true",), "run.rescore"),
        (("run.max_logged_nodes=4",), "run.max_logged_nodes"),
        (("run.resume=true",), "run.resume"),
    ],
)
def test_benchmark_refuses_an_override_it_would_not_apply(table, tmp_path, capsys, args, message):
    out = tmp_path / "b.json"
    assert call_script(benchmark, *small(table), *args, "--out", out) == 2
    assert message in one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_benchmark_does_not_charge_one_time_setup_to_the_sequential_chain(table, tmp_path, monkeypatch):
    """An engine's first call pays one-time setup (CUDA context, kernels): here 0.5 s. The chain
    that runs first is always the sequential one, so without a warm-up every speedup is inflated."""
    from presto.engines.toy import ToyEngine

    generate, first = ToyEngine._generate, []

    def slow_first_call(engine, requests):
        if not first:
            first.append(1)
            time.sleep(0.5)
        return generate(engine, requests)

    monkeypatch.setattr(ToyEngine, "_generate", slow_first_call)
    out = tmp_path / "b.json"
    assert call_script(benchmark, "--n-pf", "2", *small(table), "--out", out) == 0
    sequential = json.loads(out.read_text())["rows"][0]
    assert sequential["traversal"] == "sequential" and sequential["call_time_s"] < 0.25, sequential


def test_an_interrupted_benchmark_keeps_the_chains_of_the_sampler_under_way(table, tmp_path, monkeypatch, capsys):
    import presto.runner.run

    sample_chain, calls = presto.runner.run.sample_chain, []

    def interrupted_in_the_second_chain(*args, **kwargs):
        calls.append(1)
        if len(calls) > 2:  # chain 0 ran in both settings (sequential, bfs); chain 1 never finishes
            raise KeyboardInterrupt
        return sample_chain(*args, **kwargs)

    monkeypatch.setattr(presto.runner.run, "sample_chain", interrupted_in_the_second_chain)
    out = tmp_path / "b.json"
    assert call_script(benchmark, "--n-pf", "2", *small(table), "--out", out) == 130
    figures = json.loads(out.read_text())
    assert figures["complete"] is False and figures["rows"] == []  # no sampler finished
    partial = figures["partial_rows"]  # was: the first chain's figures were lost
    assert [(r["traversal"], r["chains"]) for r in partial] == [("sequential", 1), ("bfs", 1)]
    assert partial[1]["identical_chains"] == 1.0 and partial[1]["model_calls"] < partial[0]["model_calls"]
    assert "1 chain of powermh" in capsys.readouterr().err


def test_a_terminated_benchmark_stops_as_an_interrupted_one(table, tmp_path, monkeypatch, capsys):
    """SIGTERM (Slurm's time limit, kill) used to end the process on the spot: no message, engine not closed."""
    import presto.runner.run

    class Killed(Exception):
        pass

    def unhandled(signum, frame):  # stands in for the default action, which would end pytest itself
        raise Killed

    sample_chain, calls = presto.runner.run.sample_chain, []

    def terminated_in_the_second_sampler(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # powermh: 1 prompt x 2 chains x (sequential, bfs)
            os.kill(os.getpid(), signal.SIGTERM)
        return sample_chain(*args, **kwargs)

    monkeypatch.setattr(presto.runner.run, "sample_chain", terminated_in_the_second_sampler)
    previous = (signal.signal(signal.SIGTERM, unhandled), signal.getsignal(signal.SIGINT))
    out = tmp_path / "b.json"
    try:
        status = call_script(
            benchmark, "--n-pf", "2", "--samplers", "powermh", "entropycut", *small(table), "--out", out
        )
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    assert status == 130
    assert rows_of(out) == [("powermh", "sequential", 1), ("powermh", "bfs", 2)]
    assert "interrupted" in capsys.readouterr().err


def test_call_cost_times_the_configured_multitry_temperatures(table, capsys):
    # Was: always MultiTryMH's default temperatures (0.25, 0.5, 1), whatever sampler.temperatures said.
    argv = ("--rows", "1", "--tokens", "2", "--prompt-tokens", "4", "engine=toy", "model=toy", f"engine.table={table}")
    assert call_script(call_cost, *argv, "sampler=multitry", "sampler.temperatures=[0.5,2.0]") == 0
    labels = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip().endswith("x")]
    assert labels == ["0.25", "0.25+0.5,2"]


def test_an_interrupted_call_cost_closes_its_engine_and_says_so(table, monkeypatch, capsys):
    # Was: a traceback, and the engine (vLLM's engine core, a process of its own) left open.
    from presto.engines.toy import ToyEngine

    generate, calls, closed = ToyEngine._generate, [], []

    def interrupted_at_the_third_call(engine, requests):
        calls.append(1)
        if len(calls) == 3:  # the warm-up and the 1-row call are done
            raise KeyboardInterrupt
        return generate(engine, requests)

    monkeypatch.setattr(ToyEngine, "_generate", interrupted_at_the_third_call)
    monkeypatch.setattr(ToyEngine, "close", lambda engine: closed.append(1))
    argv = ("--rows", "1", "2", "--tokens", "2", "--prompt-tokens", "4", "engine=toy", "model=toy")
    assert interrupted_status(call_cost, *argv, f"engine.table={table}") == 130
    captured = capsys.readouterr()
    assert closed == [1] and "interrupted" in captured.err and "Traceback" not in captured.err
    assert captured.out.count("x\n") == 1  # the call measured before the interruption is kept


def test_an_interrupted_replay_is_one_line(tmp_path, monkeypatch, capsys):
    oracle_bound = load_script("oracle_bound")
    trees = tmp_path / "trees.jsonl"
    trees.write_text(json.dumps({"nodes": [], "depth_cap": 1}) + "\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(oracle_bound, "replay_rounds", interrupted)
    assert interrupted_status(oracle_bound, trees, "--predictor", "none", "--n-pf", "1") == 130
    assert "interrupted" in capsys.readouterr().err


def test_a_benchmark_started_with_sigint_ignored_still_stops_on_sigint(table, tmp_path, monkeypatch):
    """A shell script's background job inherits SIGINT ignored; check.sh stops the benchmark with
    `timeout -s INT`, which then did nothing until the SIGKILL 20 s later (and the figures went with it)."""
    import presto.runner.run

    sample_chain, calls = presto.runner.run.sample_chain, []

    def interrupted_by_timeout(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return sample_chain(*args, **kwargs)

    monkeypatch.setattr(presto.runner.run, "sample_chain", interrupted_by_timeout)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = tmp_path / "b.json"
    try:
        status = interrupted_status(benchmark, "--n-pf", "2", *small(table), "--out", out)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 130  # was 0: the signal was ignored and the benchmark ran to the end
    assert json.loads(out.read_text())["complete"] is False


def test_the_benchmarks_oracle_replay_shows_progress(table, tmp_path, monkeypatch, capsys):
    # At 1024 logged nodes a round replays in ~0.2 s: minutes without a line after a paper-scale sampler.
    monkeypatch.setattr(benchmark, "REPLAY_PROGRESS_DELAY_S", 0.0, raising=False)  # at once, not after 2 s
    out = tmp_path / "b.json"
    assert call_script(benchmark, "--n-pf", "2", *small(table), "--out", out) == 0
    rounds = json.loads(out.read_text())["rows"][1]["rounds"]  # the BFS run's, which the replay reads
    err = capsys.readouterr().err
    assert rounds > 0 and "oracle replay powermh n_pf=2: 100%|" in err and f"| {rounds}/{rounds} [" in err, err
    # run.progress=false (scripts/device/check.sh passes it) turns the bar off
    assert call_script(benchmark, "--n-pf", "2", *small(table), "run.progress=false", "--out", out) == 0
    assert "oracle replay" not in capsys.readouterr().err


def test_benchmark_figures_recomputed_from_its_chains(table, tmp_path, monkeypatch):
    """Every figure of a row, recomputed from the chain records it came from: ratios of sums over
    all chains, each PreSTO chain paired with the sequential chain of its prompt and index."""
    import presto.runner.run

    sample_chain, chains = presto.runner.run.sample_chain, []

    def kept(*args, **kwargs):
        chains.append(sample_chain(*args, **kwargs))
        return chains[-1]

    monkeypatch.setattr(presto.runner.run, "sample_chain", kept)
    out = tmp_path / "b.json"
    argv = ("--n-pf", "2", "5", *toy_overrides(table, steps=3), "--out", out)  # 2 prompts x 2 chains
    assert call_script(benchmark, *argv) == 0
    figures = json.loads(out.read_text())
    assert figures["complete"] is True and figures["partial_rows"] == []
    rows = figures["rows"]
    assert len(chains) == 4 * len(rows)  # each chain ran in every setting, settings in row order
    by_setting = [chains[i :: len(rows)] for i in range(len(rows))]
    sequential = by_setting[0]
    assert [(r["prompt_id"], r["chain"]) for r in sequential] == [(c["prompt_id"], c["chain"]) for c in by_setting[2]]

    def total(records, key):
        return sum(r[key] for r in records)

    for row, records in zip(rows, by_setting, strict=True):
        assert row["chains"] == len(records) == 4
        assert row["model_calls"] == total(records, "model_calls")
        assert row["speedup"] == pytest.approx(total(sequential, "call_time_s") / total(records, "call_time_s"))
        assert row["call_reduction"] == pytest.approx(total(sequential, "model_calls") / total(records, "model_calls"))
        assert row["speedup"] == pytest.approx(row["call_reduction"] / row["time_per_call_ratio"])
        assert row["transitions_per_call"] == pytest.approx(
            total(records, "transitions") / total(records, "model_calls")
        )
        same = [
            r["tokens"].tolist() == s["tokens"].tolist() and r["accepts"] == s["accepts"]
            for r, s in zip(records, sequential, strict=True)
        ]
        assert row["identical_chains"] == sum(same) / 4
        if row["traversal"] != "sequential":
            # Every prefetch round counts, also one whose proposals were all reused (no model call).
            assert row["rounds"] == total(records, "rounds")
            assert row["transitions_per_round"] == pytest.approx(
                total(records, "transitions") / total(records, "rounds")
            )

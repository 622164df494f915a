"""scripts/oracle_bound.py end to end: replay a toy run's trees; the bounds' order; bad input."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import PROJECT_ROOT, run_cli, toy_args

SCRIPT = PROJECT_ROOT / "scripts" / "oracle_bound.py"


def run_script(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_replay_orders_the_allocations_as_the_theory_says(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    settings = ("traversal=bfs", "budget.n_pf=5", "run.max_logged_nodes=1024")
    done = run_cli(*toy_args(toy_table, run_dir, *settings, steps=12))
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "oracle.json"
    done = run_script(str(run_dir), "--n-pf", "1", "3", "5", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["rounds"] > 0 and result["rounds_with_truncated_logs"] == 0
    value = {(r["method"], r["n_pf"]): r["transitions_per_call"] for r in result["rows"]}
    for method in ("bfs-paper", "bfs", "predictive", "oracle", "shared-bfs"):
        assert value[(method, 1)] == 1.0  # depth 0 is always decided
    for n_pf in (3, 5):
        # One request per depth serves every feasible node there, so it bounds the node-level
        # oracle, which bounds every node-level allocation; the paper's BFS wastes requests.
        assert value[("shared-bfs", n_pf)] >= value[("oracle", n_pf)] - 1e-9
        assert value[("oracle", n_pf)] >= max(value[("bfs", n_pf)], value[("predictive", n_pf)]) - 1e-9
        assert value[("bfs", n_pf)] >= value[("bfs-paper", n_pf)] - 1e-9
        assert value[("shared-bfs", n_pf)] <= n_pf
    assert value[("oracle", 5)] > value[("oracle", 1)]
    # The logged walk decided between one and N_pf transitions per round.
    assert 1.0 <= result["realized_transitions_per_round_in_the_logged_run"] <= 5.0
    assert "shared-bfs" in done.stdout


def test_the_logged_run_is_told_per_round_and_truncated_logs_say_how_to_rerun(toy_table, tmp_path):
    """The realized figure is per prefetch round: the summary's transitions_per_call also counts
    each block's extension call, so it is lower. A capped log names the option to raise."""
    run_dir = tmp_path / "run"
    done = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=5", "run.max_logged_nodes=3", steps=12))
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "oracle.json"
    done = run_script(str(run_dir), "--n-pf", "5", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert "realized_transitions_per_call_in_the_logged_run" not in result
    per_round = result["realized_transitions_per_round_in_the_logged_run"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert per_round > summary["transitions_per_call"]
    assert f"logged run realized {per_round:.2f} per round" in done.stdout and "per call)" not in done.stdout
    assert result["rounds_with_truncated_logs"] > 0
    warning = next(line for line in done.stdout.splitlines() if "missing from the log" in line)
    assert warning.startswith("warning: ") and "rerun with a larger run.max_logged_nodes" in warning
    assert f"replay written to {out} (JSON)" in done.stdout and "figures written" not in done.stdout


def test_missing_or_empty_runs_are_one_line_errors(tmp_path):
    done = run_script(str(tmp_path / "missing"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().startswith("error: no such run directory")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "trees.jsonl").write_text("")
    done = run_script(str(tmp_path / "empty"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == "error: no rounds to replay in the given trees.jsonl files"


def test_an_unusable_predictor_is_a_one_line_error_naming_the_flag(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    done = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=3"))
    assert done.returncode == 0, done.stderr[-2000:]
    done = run_script(str(run_dir), "--predictor", str(tmp_path / "none.ckpt"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == f"error: --predictor: no such checkpoint {tmp_path / 'none.ckpt'}\n"
    # Trees logged without a feature the predictor needs (an older version's trees).
    trees = run_dir / "trees.jsonl"
    records = [json.loads(line) for line in trees.read_text().splitlines()]
    for record in records:
        for node in record["nodes"]:
            (node.get("features") or {}).pop("cut_fraction", None)
    trees.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_script(str(run_dir), "--predictor", "default", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: --predictor ") and "'cut_fraction'" in done.stderr


def test_the_replay_says_when_its_predictor_is_not_the_one_the_run_planned_with(toy_table, tmp_path):
    from tests.test_predictive_traversal import write_predictor

    planned, other = tmp_path / "planned.ckpt", tmp_path / "other.ckpt"
    write_predictor(planned, [0.0, 2.0, 0.0])
    write_predictor(other, [2.0, 0.0, 0.0])
    run_dir = tmp_path / "run"
    settings = ("traversal=predictive", f"traversal.predictor={planned}", "budget.n_pf=4")
    done = run_cli(*toy_args(toy_table, run_dir, *settings, steps=8))
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "oracle.json"
    own = run_script(str(run_dir), "--n-pf", "4", "--predictor", str(planned), "--out", str(out), cwd=tmp_path)
    assert own.returncode == 0, own.stderr[-2000:]
    logged = json.loads(out.read_text())["logged_predictors"]
    assert len(logged) == 1 and "note: the predictive row" not in own.stdout  # the run's own predictor
    replaced = run_script(str(run_dir), "--n-pf", "4", "--predictor", str(other), cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    note = next(line for line in replaced.stdout.splitlines() if line.startswith("note: the predictive row"))
    assert str(other) in note and logged[0] in note and "--predictor" in note


def test_the_default_predictor_is_the_one_shipped_for_the_runs_sampler(toy_table, tmp_path):
    """--predictor default replays with the checkpoint shipped for the sampler that logged the trees
    (one per sampler, as runs are served); runs of several samplers have no one default."""
    from presto.predictor import default_checkpoint
    from presto.predictor.hotload import load_predictor

    runs = {}
    for sampler in ("entropycut", "multitry"):
        runs[sampler] = tmp_path / sampler
        done = run_cli(*toy_args(toy_table, runs[sampler], "traversal=bfs", "budget.n_pf=3", f"sampler={sampler}"))
        assert done.returncode == 0, done.stderr[-2000:]
    for sampler, run_dir in runs.items():
        out = tmp_path / f"{sampler}.json"
        done = run_script(str(run_dir), "--n-pf", "3", "--out", str(out), cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        replayed = json.loads(out.read_text())["predictor"]
        shipped = load_predictor(default_checkpoint(sampler))
        assert replayed == {"path": str(default_checkpoint(sampler)), "fingerprint": shipped.fingerprint}
    done = run_script(*map(str, runs.values()), "--n-pf", "3", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: --predictor default: the trees come from runs of entropycut, multitry")
    # A checkpoint named by path replays runs of any samplers together.
    done = run_script(*map(str, runs.values()), "--n-pf", "3", "--predictor", "null", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


def test_trees_without_their_run_directory_need_a_named_predictor(toy_table, tmp_path):
    """A trees.jsonl copied away from its run's summary.json and config.yaml does not say its
    sampler, so no shipped predictor can be chosen for it: one line, and a PATH replays it."""
    import shutil

    run_dir = tmp_path / "run"
    done = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=3"))
    assert done.returncode == 0, done.stderr[-2000:]
    (tmp_path / "copy").mkdir()
    shutil.copyfile(run_dir / "trees.jsonl", tmp_path / "copy" / "trees.jsonl")
    done = run_script(str(tmp_path / "copy"), "--n-pf", "3", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: --predictor default: the runs do not say their sampler")
    done = run_script(str(tmp_path / "copy"), "--n-pf", "3", "--predictor", "null", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    # Beside a run that does say its sampler, the copy still does not: the same line, not "runs of
    # powermh, unknown".
    done = run_script(str(run_dir), str(tmp_path / "copy"), "--n-pf", "3", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: --predictor default: the runs do not say")


def test_choosing_the_default_predictor_does_not_warn_twice_about_a_damaged_line(toy_table, tmp_path):
    """The sampler is looked up quietly; the replay warns once about a line that is not JSON."""
    run_dir = tmp_path / "run"
    done = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=3"))
    assert done.returncode == 0, done.stderr[-2000:]
    trees = run_dir / "trees.jsonl"
    trees.write_text("{not json\n" + trees.read_text())
    done = run_script(str(run_dir), "--n-pf", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("line 1 is not JSON; skipped") == 1


def test_a_budget_beyond_the_tree_replays_as_the_whole_tree(toy_table, tmp_path):
    """The DP is sized by the budget; no selection holds more nodes than the tree's candidates,
    so a budget past them (a typo, 10**20) must give the figures of any budget that covers the
    tree, not a MemoryError or an hour-long replay."""
    run_dir = tmp_path / "run"
    done = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=5", "run.max_logged_nodes=1024"))
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "oracle.json"
    done = run_script(str(run_dir), "--n-pf", "5", "64", str(10**20), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    value = {(r["method"], r["n_pf"]): r["transitions_per_call"] for r in json.loads(out.read_text())["rows"]}
    for method in ("bfs-paper", "bfs", "predictive", "oracle", "shared-bfs"):
        assert value[(method, 10**20)] == value[(method, 64)] >= value[(method, 5)]

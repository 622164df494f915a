"""The predictor's lifecycle across commands, as a researcher runs it: log trees with BFS runs of each
sampler, train on them, serve the checkpoint to a predictive run (chains equal to the sequential ones,
every round naming the trained fingerprint), replay the trees with scripts/oracle_bound.py (its realized
transitions per round against summary.json), replace, corrupt and delete the served file during a run
and between a run and its resume, and install or repoint it through a symlink.

Runs are in-process on the toy engine (conftest's small setting, 4 prompts x 2 chains); one BFS run,
one sequential run and one trained checkpoint per sampler are made once for the module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.conftest import (
    PROJECT_ROOT,
    call_script,
    compose_run,
    load_script,
    toy_overrides,
    training_config,
    write_toy_table,
)

SAMPLERS = ("powermh", "entropycut", "multitry")


def run_toy(table: Path, run_dir: Path, *extra: str, prompts: int = 4) -> dict:
    """One toy run of ``prompts`` prompts x 2 chains into ``run_dir``, in this process; its summary."""
    from presto.runner.run import run

    cfg = compose_run(*toy_overrides(table), f"dataset.num_prompts={prompts}", *extra)
    return run(cfg, run_dir)


def chains_of(run_dir: Path) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
    chains = {}
    for line in (run_dir / "chains.jsonl").read_text().splitlines():
        record = json.loads(line)
        chains[record["prompt_id"], record["chain"]] = (record["tokens"], record["accepts"])
    return chains


def planned_by(run_dir: Path) -> list[str | None]:
    """The fingerprint each logged round was planned with, in order."""
    rounds = (json.loads(line) for line in (run_dir / "trees.jsonl").read_text().splitlines())
    return [record["plan"]["predictor"] for record in rounds]


def runs_of(planned: list) -> list:
    """Consecutive equal entries collapsed: the order in which predictors served."""
    return [value for k, value in enumerate(planned) if k == 0 or planned[k - 1] != value]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """The toy table; per sampler a BFS run, a sequential run and a checkpoint trained on the BFS run."""
    from presto.predictor.train import run_training

    root = tmp_path_factory.mktemp("lifecycle")
    out: dict = {"root": root, "table": write_toy_table(root / "table.json", vocab=6, seed=3)}
    for sampler in SAMPLERS:
        for traversal in ("bfs", "sequential"):
            run_toy(out["table"], root / f"{traversal}_{sampler}", f"sampler={sampler}", f"traversal={traversal}")
        checkpoint = root / f"{sampler}.ckpt"
        metrics = run_training(
            training_config([root / f"bfs_{sampler}"], output=str(checkpoint), folds=2), root / f"train_{sampler}"
        )
        out[sampler] = checkpoint
        out[f"{sampler}_metrics"] = metrics
    return out


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_trees_logged_by_bfs_train_a_predictor_that_a_predictive_run_serves_exactly(made, sampler, tmp_path):
    metrics = made[f"{sampler}_metrics"]
    assert sum(metrics["class_counts"].values()) == metrics["examples"] > 0
    assert abs(sum(metrics["class_shares"].values()) - 1.0) < 1e-9
    assert [(p["sampler"], p["traversal"], p["runs"]) for p in metrics["composition"]] == [(sampler, "bfs", 1)]
    assert metrics["cross_validation"]["folds"] == 2 and metrics["checkpoint"] == str(made[sampler])
    served = tmp_path / "predictive"
    run_toy(made["table"], served, f"sampler={sampler}", "traversal=predictive", f"traversal.predictor={made[sampler]}")
    assert chains_of(served) == chains_of(made["root"] / f"sequential_{sampler}")
    assert set(planned_by(served)) == {metrics["fingerprint"]}  # what training printed is what every round names


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_oracle_replay_of_each_samplers_trees_agrees_with_its_summary(made, sampler, capsys):
    run_dir = made["root"] / f"bfs_{sampler}"
    summary = json.loads((run_dir / "summary.json").read_text())
    # summary: transitions per call also counts each chain's n/B block-extension calls (8 chains x 2 blocks)
    assert summary["model_calls"] == summary["prefetch_rounds"] + summary["chains"] * 2
    assert call_script(load_script("oracle_bound"), run_dir, "--n-pf", "4", "20") == 0
    out = capsys.readouterr().out
    assert f"{summary['prefetch_rounds']} logged rounds" in out
    assert f"logged run realized {summary['transitions'] / summary['prefetch_rounds']:.2f} per round" in out


def test_a_checkpoint_replaced_corrupted_and_deleted_mid_run_changes_plans_never_chains(made, tmp_path, monkeypatch):
    from presto.predictor.hotload import load_predictor
    from presto.runner.outputs import RunWriter

    live = tmp_path / "live.ckpt"
    shutil.copyfile(made["powermh"], live)

    def put(data: bytes) -> None:  # as training installs: a sibling renamed over the file
        (tmp_path / "next").write_bytes(data)
        os.replace(tmp_path / "next", live)

    actions = {
        4: lambda: put(made["entropycut"].read_bytes()),  # a retraining job installs another model
        8: lambda: put(made["multitry"].read_bytes()[:300]),  # a half-written file
        12: lambda: live.unlink(),  # deleted
        16: lambda: put(made["powermh"].read_bytes()),  # the first model back
    }
    logged, rounds = RunWriter.append_tree, [0]

    def append_tree(self, record):  # after the round is logged: the next round plans with what is there then
        logged(self, record)
        rounds[0] += 1
        if rounds[0] in actions:
            actions[rounds[0]]()

    monkeypatch.setattr(RunWriter, "append_tree", append_tree)
    run_dir = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_toy(made["table"], run_dir, "sampler=powermh", "traversal=predictive", f"traversal.predictor={live}")
    assert rounds[0] > 16
    assert chains_of(run_dir) == chains_of(made["root"] / "sequential_powermh")
    first, second = (load_predictor(made[name]).fingerprint for name in ("powermh", "entropycut"))
    assert runs_of(planned_by(run_dir)) == [first, second, first]
    kept = [str(w.message) for w in caught if "keeping the previous predictor" in str(w.message)]
    assert len(kept) == 2 and "not a readable checkpoint" in kept[0] and "no longer exists" in kept[1]


def test_a_resumed_predictive_run_plans_with_the_checkpoint_that_replaced_its_first(made, tmp_path):
    from presto.predictor.hotload import load_predictor

    live = tmp_path / "live.ckpt"
    shutil.copyfile(made["powermh"], live)
    run_dir = tmp_path / "run"
    served = ("sampler=powermh", "traversal=predictive", f"traversal.predictor={live}")
    run_toy(made["table"], run_dir, *served, prompts=2)
    shutil.copyfile(made["entropycut"], tmp_path / "next")
    os.replace(tmp_path / "next", live)
    summary = run_toy(made["table"], run_dir, *served, "run.resume=true")  # extended to 4 prompts
    assert summary["complete"] and summary["chains"] == 8
    assert chains_of(run_dir) == chains_of(made["root"] / "sequential_powermh")
    first, second = (load_predictor(made[name]).fingerprint for name in ("powermh", "entropycut"))
    assert runs_of(planned_by(run_dir)) == [first, second]


def test_a_symlinked_predictor_repointed_mid_run_is_picked_up(made, tmp_path):
    from presto.predictor.hotload import load_predictor
    from presto.prefetch.predictive import PredictiveTraversal

    (tmp_path / "v1.ckpt").write_bytes(made["powermh"].read_bytes())
    (tmp_path / "v2.ckpt").write_bytes(made["entropycut"].read_bytes())
    link = tmp_path / "current.ckpt"
    link.symlink_to("v1.ckpt")
    traversal = PredictiveTraversal.from_options({"predictor": str(link)}, "powermh")
    assert traversal.current_predictor().fingerprint == load_predictor(made["powermh"]).fingerprint
    (tmp_path / "next").symlink_to("v2.ckpt")  # ln -sfn v2.ckpt current.ckpt, atomically
    os.replace(tmp_path / "next", link)
    assert traversal.current_predictor().fingerprint == load_predictor(made["entropycut"]).fingerprint


def test_training_into_a_symlinked_output_installs_its_metrics_as_path_metrics_json(made, tmp_path):
    from presto.predictor.hotload import load_predictor
    from presto.predictor.install import metrics_path
    from presto.predictor.train import run_training

    (tmp_path / "v1.ckpt").write_bytes(made["entropycut"].read_bytes())
    link = tmp_path / "current.ckpt"
    link.symlink_to("v1.ckpt")
    cfg = training_config([made["root"] / "bfs_powermh"], output=str(link), folds=2)
    metrics = run_training(cfg, tmp_path / "work")
    assert load_predictor(link).fingerprint == metrics["fingerprint"]
    installed = json.loads(metrics_path(link).read_text())  # "PATH.metrics.json always describes PATH"
    assert installed["fingerprint"] == metrics["fingerprint"]


HOT_FAILURES = """
import os, sys
from presto.prefetch.predictive import PredictiveTraversal
live, good = sys.argv[1], open(sys.argv[2], "rb").read()
traversal = PredictiveTraversal.from_options({"predictor": live}, "powermh")
for data in (b"garbage", good, b"garbage"):  # a bad install, the model back, the same bad install again
    open(live + ".next", "wb").write(data)
    os.replace(live + ".next", live)
    traversal.current_predictor()
"""


def test_each_unservable_replacement_during_a_run_is_reported(made, tmp_path):
    live = tmp_path / "live.ckpt"
    shutil.copyfile(made["powermh"], live)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, "-c", HOT_FAILURES, str(live), str(made["powermh"])],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("is not a readable checkpoint") == 2, done.stderr


def test_a_line_printed_while_the_progress_bar_is_shown_starts_on_a_line_of_its_own(capsys):
    """`notice: reloaded ...` (and any warning) printed mid-run was appended to the end of the bar's line;
    while the bar is shown, stderr goes through tqdm.write, which clears the bar's line first."""
    import sys

    from presto.runner.run import RunProgress

    before = sys.stderr
    progress = RunProgress(total=3, done=0, enabled=True)
    progress.chain_done(1.5)
    print("notice: reloaded predictor X", file=sys.stderr)
    print("partial line without newline", end="", file=sys.stderr)
    progress.chain_done(1.5)
    progress.close()
    assert sys.stderr is before
    err = capsys.readouterr().err
    head, _, _ = err.partition("notice: reloaded predictor X\n")
    assert head.endswith("\r"), repr(err)  # the bar's line cleared (tqdm: \r, blanks, \r) before the notice
    assert "partial line without newline" in err

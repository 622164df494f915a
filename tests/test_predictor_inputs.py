"""Predictor training on awkward inputs: one epsilon-class, bad settings, bad outputs, repeated runs."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from presto.config import ConfigError
from presto.predictor.data import Examples, collect_examples, tree_files
from presto.predictor.features import CLASSES
from presto.predictor.install import check_output
from presto.predictor.train import ModelSettings, cross_validate, improvement_warning, run_training, train_predictor
from tests.conftest import PROJECT_ROOT

TRAIN = PROJECT_ROOT / "src" / "train_predictor.py"
REJECT, ACCEPT = math.log(0.001), 0.0  # log A of a certain rejection and of a certain acceptance
FLAT = [(0.5, ACCEPT), (0.5, REJECT)] * 4  # one cut for every node: nothing to learn from it


def root_node(i: int, cut: float, log_accept: float) -> dict:
    features = {"cut_fraction": cut}
    return {"id": i, "parent": None, "depth": 0, "feasible": True, "features": features, "log_accept": log_accept}


def write_trees(run_dir: Path, prompts: dict[str, list[tuple[float, float]]]) -> Path:
    """A trees.jsonl with one round per prompt, its nodes given as (cut_fraction, log A)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "trees.jsonl").open("w") as handle:
        for prompt, nodes in prompts.items():
            logged = [root_node(i, cut, log_accept) for i, (cut, log_accept) in enumerate(nodes)]
            handle.write(json.dumps({"prompt_id": prompt, "chain": 0, "round": 0, "nodes": logged}) + "\n")
    return run_dir


def separable(prompts: int, nodes: int = 12) -> dict[str, list[tuple[float, float]]]:
    """Late cuts accepted, early cuts rejected: learnable, both classes in every prompt."""
    cuts = np.linspace(0.05, 0.95, nodes)
    return {f"p{i}": [(float(c), ACCEPT if c > 0.5 else REJECT) for c in cuts] for i in range(prompts)}


def examples_of(labels_by_prompt: dict[str, list[int]]) -> Examples:
    """Examples with one feature that follows the label (plus a little spread)."""
    labels = [y for ys in labels_by_prompt.values() for y in ys]
    groups = [g for g, ys in labels_by_prompt.items() for _ in ys]
    x = np.array([[y + 0.1 * (i % 5)] for i, y in enumerate(labels)])
    return Examples(x, np.array(labels), np.array(groups), ("cut_fraction",), ("synthetic",))


def training_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose("train_predictor", overrides=list(overrides))


def train_cli(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TRAIN), *overrides], capture_output=True, text=True, timeout=300, cwd="/"
    )


def test_one_class_everywhere_is_a_one_line_error_naming_epsilon(tmp_path):
    accept_only = {f"p{i}": [(c, ACCEPT) for c in (0.2, 0.5, 0.8)] for i in range(3)}
    run = write_trees(tmp_path / "run", accept_only)
    examples = collect_examples([run], ("cut_fraction",), 0.01)
    with pytest.raises(ValueError, match=r"epsilon=0\.01.*'accept': 9"):
        train_predictor(examples, ModelSettings(), tmp_path / "work", None)
    done = train_cli(f"runs=[{run}]", f"hydra.run.dir={tmp_path / 'cli'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "epsilon=0.01" in done.stderr and "class counts" in done.stderr


def test_a_training_fold_with_one_class_gets_a_constant_reference():
    accept, reject = CLASSES.index("accept"), CLASSES.index("reject")
    # Prompt a holds only acceptances: the fold that trains on a alone has one class.
    examples = examples_of({"a": [accept] * 10, "b": [accept, reject] * 5})
    cv = cross_validate(examples, ModelSettings(), folds=2, seed=0, epsilon=0.01)
    reference = cv["sklearn_logistic"]
    assert len(reference["constant_folds"]) == 1 and math.isfinite(reference["log_loss"])
    assert math.isfinite(cv["model"]["log_loss"])


def test_the_sklearn_reference_does_not_depend_on_the_chosen_model():
    accept, reject, uncertain = (CLASSES.index(c) for c in ("accept", "reject", "uncertain"))
    examples = examples_of({f"p{i}": [accept, reject, uncertain, accept, reject] for i in range(4)})
    logistic = cross_validate(examples, ModelSettings(), folds=2, seed=0, epsilon=0.01)
    mlp = ModelSettings("mlp", (4,), 1e-3, "adam", 1e-2, max_epochs=2, batch_size=8)
    other = cross_validate(examples, mlp, folds=2, seed=0, epsilon=0.01)
    assert other["sklearn_logistic"] == logistic["sklearn_logistic"]
    assert logistic["sklearn_logistic"]["C"] == 1.0  # the paper's lambda = 1


def test_settings_are_checked_before_any_tree_is_read(tmp_path):
    missing = f"runs=[{tmp_path / 'missing'}]"
    with pytest.raises(ConfigError, match="runs is empty"):
        run_training(training_config("runs=[]"), tmp_path)
    with pytest.raises(ConfigError, match=r"unknown 'foo'.*cut, tree.*cut_fraction"):
        run_training(training_config(missing, "features=[cut,foo]"), tmp_path)
    with pytest.raises(ConfigError, match=r"predictor\.batch_size must be a positive integer"):
        run_training(training_config(missing, "predictor.batch_size=0"), tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=re.escape(f"{blocker} is not a directory")):
        run_training(training_config(missing, f"output={blocker / 'sub' / 'p.ckpt'}"), tmp_path)
    with pytest.raises(ConfigError, match="is a directory"):
        run_training(training_config(missing, f"output={tmp_path}"), tmp_path)
    done = train_cli(missing, f"output={blocker / 'p.ckpt'}", f"hydra.run.dir={tmp_path / 'cli'}")
    assert done.returncode == 2 and done.stderr.startswith("error: output=") and "Traceback" not in done.stderr


def test_a_failed_checkpoint_write_still_leaves_metrics(tmp_path):
    examples = collect_examples([write_trees(tmp_path / "run", separable(3))], ("cut_fraction",), 0.01)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(OSError, match="cannot write the checkpoint") as caught:
        train_predictor(examples, ModelSettings(), tmp_path / "work", blocker / "p.ckpt", folds=3)
    assert "\n" not in str(caught.value)
    metrics = json.loads((tmp_path / "work" / "metrics.json").read_text())
    assert metrics["checkpoint"] is None and "checkpoint_error" in metrics
    assert not list(tmp_path.glob("**/.*.tmp"))


def test_the_checkpoint_and_its_metrics_are_installed_together(tmp_path):
    run = write_trees(tmp_path / "run", separable(3))
    examples = collect_examples([run], ("cut_fraction",), 0.01)
    out = tmp_path / "live" / "p.ckpt"
    metrics = train_predictor(examples, ModelSettings(), tmp_path / "work", out, folds=3)
    assert metrics["checkpoint"] == str(out) and metrics["beats_class_frequencies"]
    assert json.loads(Path(f"{out}.metrics.json").read_text()) == metrics
    # A rejected model touches neither the checkpoint nor the metrics that describe it.
    before = (out.read_bytes(), Path(f"{out}.metrics.json").read_bytes())
    flat = write_trees(tmp_path / "flat", {"a": FLAT, "b": FLAT})
    useless = collect_examples([flat], ("cut_fraction",), 0.01)
    rejected = train_predictor(useless, ModelSettings(), tmp_path / "work2", out, folds=2, require_improvement=True)
    assert rejected["checkpoint"] is None
    assert (out.read_bytes(), Path(f"{out}.metrics.json").read_bytes()) == before


def test_a_model_no_better_than_the_frequencies_is_saved_with_a_warning(tmp_path):
    run = write_trees(tmp_path / "run", {"a": FLAT, "b": FLAT})
    out = tmp_path / "p.ckpt"
    done = train_cli(f"runs=[{run}]", "folds=2", f"output={out}", f"hydra.run.dir={tmp_path / 'work'}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.is_file() and Path(f"{out}.metrics.json").is_file()
    assert "warning: the saved model is no better than the class frequencies" in done.stderr
    metrics = json.loads((tmp_path / "work" / "metrics.json").read_text())
    assert improvement_warning(metrics) and not improvement_warning({**metrics, "beats_class_frequencies": True})


def test_a_run_given_twice_or_inside_a_given_sweep_counts_once(tmp_path):
    sweep = tmp_path / "sweep"
    write_trees(sweep / "0", separable(2))
    write_trees(sweep / "budget.n_pf=8", separable(3))
    once = collect_examples([sweep], ("cut_fraction",), 0.01)
    assert len(tree_files([sweep / "0", sweep / "0"])) == 1
    same_file = sweep / ".." / "sweep" / "0" / "trees.jsonl"
    again = collect_examples([sweep, sweep / "0", same_file], ("cut_fraction",), 0.01)
    assert len(again) == len(once) == 5 * 12


def test_a_directory_on_the_metrics_name_installs_nothing(tmp_path):
    """The pair goes live whole or not at all: a directory squatting PATH.metrics.json was found
    only after the new checkpoint had replaced the old one (and the error said nothing was written)."""
    examples = collect_examples([write_trees(tmp_path / "run", separable(3))], ("cut_fraction",), 0.01)
    out = tmp_path / "live" / "p.ckpt"
    out.parent.mkdir()
    out.write_bytes(b"the serving checkpoint")
    Path(f"{out}.metrics.json").mkdir()
    with pytest.raises(ConfigError, match=r"metrics\.json is a directory"):
        check_output(out)
    with pytest.raises(OSError, match="cannot write the checkpoint"):
        train_predictor(examples, ModelSettings(), tmp_path / "work", out, folds=3)
    assert out.read_bytes() == b"the serving checkpoint"
    assert not list(tmp_path.glob("**/.*.tmp"))


def test_a_metrics_rename_that_fails_after_the_checkpoint_says_the_checkpoint_is_live(tmp_path, monkeypatch):
    from presto.predictor import install

    examples = collect_examples([write_trees(tmp_path / "run", separable(3))], ("cut_fraction",), 0.01)
    out = tmp_path / "p.ckpt"
    replace = install.os.replace

    def failing(src, dst):
        if str(dst).endswith(".metrics.json"):
            raise PermissionError(13, "Permission denied", str(dst))
        return replace(src, dst)

    monkeypatch.setattr(install.os, "replace", failing)
    with pytest.raises(OSError, match=r"the checkpoint .*p\.ckpt was installed, but not its metrics file") as caught:
        train_predictor(examples, ModelSettings(), tmp_path / "work", out, folds=3)
    assert "\n" not in str(caught.value)
    assert out.is_file() and not list(tmp_path.glob("**/.*.tmp"))
    metrics = json.loads((tmp_path / "work" / "metrics.json").read_text())
    assert metrics["checkpoint"] == str(out) and "PermissionError" in metrics["metrics_error"]

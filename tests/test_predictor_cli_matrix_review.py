"""Training, hot-loading and retraining the epsilon-certainty predictor across the combinations
a researcher tries (an adversarial user review; the table of everything tried is at the end).

Each test of a defect failed on the code before its fix; the others pin behaviour that was
already right. Toy engine only; the runs are made once per module.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import PROJECT_ROOT, load_script, run_cli, toy_args, training_config, write_toy_table

TRAIN = PROJECT_ROOT / "src" / "train_predictor.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Toy runs of one setting (2 prompts x 2 chains, n = 8, B = 4, K = 6) and a few variations."""
    root = tmp_path_factory.mktemp("matrix")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    variants = {
        "bfs": ("traversal=bfs",),
        "bfs_alpha2": ("traversal=bfs", "sampler.alpha=2"),
        "bfs_alpha2_tau": ("traversal=bfs", "sampler.alpha=2", "sampler.tau=0.5"),  # tau null: 1/alpha, the same
        "bfs_alpha4_int": ("traversal=bfs", "sampler.alpha=4", "budget.n_pf=4"),
        "truncated": ("traversal=bfs", "run.max_logged_nodes=3"),
        "sequential": ("traversal=sequential",),
        "lowtemp": ("sampler=lowtemp",),
    }
    made = {}
    for name, extra in variants.items():
        done = run_cli(*toy_args(table, root / name, *extra))
        assert done.returncode == 0, done.stderr[-2000:]
        made[name] = root / name
    return made


def train_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(TRAIN), *args], capture_output=True, text=True, timeout=300, cwd="/", env=env
    )


# --- model settings ------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["l2", "learning_rate"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_l2_or_learning_rate_is_refused_at_once(key, value):
    """predictor.l2=nan passed `l2 < 0` (NaN compares false) and ended in an L-BFGS traceback after
    the trees were read; inf ran the whole cross-validation to a diverged model."""
    from presto.predictor.train import ModelSettings

    with pytest.raises(ValueError, match=f"predictor.{key} must be a finite number"):
        ModelSettings(**{key: value})


def test_an_overflowing_lbfgs_step_is_a_diverged_fit_not_a_traceback():
    """A huge but finite learning_rate (or l2) made L-BFGS raise "value cannot be converted to type
    float without overflow" out of train_predictor.py: a traceback, and metrics.json never written.
    The fit is now a diverged one (NaN weights): metrics.json with nulls, nothing installed."""
    from presto.predictor.hotload import PredictorError
    from presto.predictor.module import fingerprint, fit_classifier
    from presto.predictor.train import ModelSettings, accuracy

    rng = np.random.default_rng(0)
    x = rng.random((40, 1))
    y = (x[:, 0] > 0.5).astype(np.int64)
    module = fit_classifier(x, y, ["cut_fraction"], ModelSettings(learning_rate=1e30, max_epochs=2))
    probabilities = module.predict_proba(x)
    assert np.isnan(probabilities).all()
    with pytest.raises(PredictorError, match="non-finite weights"):  # so train_predictor installs nothing
        fingerprint(module)
    # A diverged model's accuracy is no number: argmax of NaN rows is class 0, which scored the
    # share of class 0 (here the rejections) as if the model had predicted it.
    assert math.isnan(accuracy(y, probabilities))
    assert accuracy(y, np.eye(3)[y]) == 1.0


def test_a_seed_out_of_range_is_a_config_error_naming_seed(runs, tmp_path):
    """seed=-1 passed the checks and failed in scikit-learn with "Seed must be between 0 and
    2**32 - 1" (no key named); seed + fold beyond 2**32 - 1 failed in Lightning after some folds."""
    from presto.config import ConfigError
    from presto.predictor.train import run_training

    for seed in (-1, 2**32 - 2):
        with pytest.raises(ConfigError, match=r"^seed must be in \[0, 4294967291\]"):
            run_training(training_config([runs["bfs"]], seed=seed), out_dir=tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_folds_of_very_few_nodes_are_dealt_without_stratifying():
    """Two prompts with one node each: StratifiedGroupKFold refused with "n_splits=2 cannot be
    greater than the number of members in each class", a setting the user never gave."""
    from presto.predictor.train import prompt_folds

    folds = prompt_folds(np.array(["a", "b", "c"]), 5, 0, labels=np.array([0, 1, 2]))
    assert len(folds) == 3 and sorted(int(test[0]) for _, test in folds) == [0, 1, 2]


# --- the trees given -----------------------------------------------------------------------


def damaged_records(good: dict) -> dict[str, object]:
    node = good["nodes"][0]
    return {
        "not an object": [1, 2],
        "nodes not a list": {**good, "nodes": "abc"},
        "node without id": {**good, "nodes": [{k: v for k, v in node.items() if k != "id"}]},
        "features not an object": {**good, "nodes": [{**node, "features": [1, 2]}]},
        "log_accept a string": {**good, "nodes": [{**node, "log_accept": "abc"}]},
    }


@pytest.mark.parametrize("case", list(damaged_records({"nodes": [{}]})))
def test_a_record_that_is_not_a_round_is_one_error_naming_file_and_record(runs, tmp_path, case):
    """Valid JSON of the wrong shape (another tool's file, a damaged one) ended in a TypeError or
    AttributeError traceback, or, for a node without an id, in the one-line "error: id"."""
    from presto.predictor.data import collect_examples

    lines = (runs["bfs"] / "trees.jsonl").read_text().splitlines()
    bad = damaged_records(json.loads(lines[0]))[case]
    trees = tmp_path / "run" / "trees.jsonl"
    trees.parent.mkdir()
    trees.write_text("\n".join([lines[1], json.dumps(bad), *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"trees.jsonl: record 2 is not a prefetch round") as err:
        collect_examples([trees.parent], ("cut_fraction",), 0.01, "reach")
    assert str(trees) in str(err.value) and "\n" not in str(err.value)


def test_a_damaged_record_is_one_error_line_from_the_cli(runs, tmp_path):
    lines = (runs["bfs"] / "trees.jsonl").read_text().splitlines()
    good = json.loads(lines[0])
    trees = tmp_path / "run" / "trees.jsonl"
    trees.parent.mkdir()
    trees.write_text(json.dumps(damaged_records(good)["node without id"]) + "\n" + "\n".join(lines[1:]) + "\n")
    done = train_cli(f"runs=[{trees.parent}]", f"hydra.run.dir={tmp_path / 'work'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {trees}: record 1 is not a prefetch round") and done.stderr.count("\n") == 1
    assert not (tmp_path / "work").exists()


def test_a_run_file_that_is_not_a_trees_file_is_refused(runs):
    """runs=[RUN/summary.json] warned "line N is not JSON" for each of its lines, then found no nodes."""
    from presto.predictor.data import tree_files

    with pytest.raises(ValueError, match=r"is not a trees\.jsonl file; give its run directory"):
        tree_files([runs["bfs"] / "summary.json"])
    assert tree_files([runs["bfs"] / "trees.jsonl"]) == [runs["bfs"] / "trees.jsonl"]


def test_runs_without_trees_say_that_sequential_runs_and_baselines_prefetch_nothing(runs):
    """They said only "no feasible tree nodes in .../trees.jsonl", which reads like damaged data."""
    from presto.predictor.data import collect_examples

    with pytest.raises(ValueError) as err:
        collect_examples([runs["sequential"], runs["lowtemp"]], ("cut_fraction",), 0.01)
    message = str(err.value)
    assert message.startswith("no feasible tree nodes in ") and "(traversal: none, sequential;" in message
    assert "sequential runs and baselines prefetch nothing: train on bfs or predictive runs" in message


def test_pooled_runs_of_different_alpha_are_reported(runs, tmp_path):
    """Runs of two alphas were pooled without a word (only mixed samplers warned), though their
    acceptance probabilities differ as much; metrics.json now lists the sampler settings."""
    from presto.predictor import train
    from presto.predictor.data import collect_examples

    examples = collect_examples([runs["bfs"], runs["bfs_alpha2"], runs["truncated"]], ("cut_fraction",), 0.01)
    alphas = sorted((s["alpha"], s["runs"]) for s in examples.sampler_settings)
    assert alphas == [(2, 1), (4, 2)]  # max_logged_nodes is no sampler setting
    settings = train.ModelSettings(max_epochs=2)
    train.train_predictor(examples, settings, tmp_path / "work", None, folds=2, weighting="uniform")
    saved = json.loads((tmp_path / "work" / "metrics.json").read_text())
    assert [s["alpha"] for s in saved["sampler_settings"]] == [2, 4]
    warning = train.setting_warning(saved)
    assert warning.startswith("warning: pooled powermh runs of 2 settings (sampler.alpha: 2, 4)")
    one = collect_examples([runs["bfs"]], ("cut_fraction",), 0.01)
    assert train.setting_warning({"sampler_settings": list(one.sampler_settings)}) is None


def test_a_fast_training_shows_no_bar(runs, tmp_path, capsys, monkeypatch):
    """The bar was drawn at once: refresh() and set_postfix_str() ignore tqdm's delay (the test below
    once set it to 0, which hid that). Never counted as shown, it was closed without a newline, so the
    next output was glued to it (`... 3/4 [... final fit, 1076 nodes]data: powermh/bfs: 3 runs ...`).
    A training shorter than the delay now shows nothing. (The delay is raised from its 2 s to 60 s,
    longer than this training takes even on a loaded machine: a few seconds here.)"""
    from presto.predictor import train
    from presto.predictor.data import collect_examples

    examples = collect_examples([runs["bfs"]], ("cut_fraction",), 0.01)
    assert train.PROGRESS_DELAY_S == 2.0
    monkeypatch.setattr(train, "PROGRESS_DELAY_S", 60.0)
    start = time.perf_counter()
    train.train_predictor(examples, train.ModelSettings(max_epochs=2), tmp_path / "work", None, folds=2)
    took = time.perf_counter() - start
    err = capsys.readouterr().err
    assert took < train.PROGRESS_DELAY_S, f"not a fast training ({took:.1f} s)"
    assert "training" not in err and "fit" not in err, err


def test_training_shows_its_progress_on_lines_of_its_own(runs, tmp_path, monkeypatch):
    """Training printed nothing until it ended: a minute for mlp16 on 1235 toy nodes, far more on
    real trees. A bar on stderr now counts the fits (folds, then the final fit) once training has run
    PROGRESS_DELAY_S, and its last line ends before what is printed next (stdout and stderr together)."""
    from presto.predictor import module, train
    from presto.predictor.data import collect_examples

    examples = collect_examples([runs["bfs"]], ("cut_fraction",), 0.01)
    real_fit = module.fit_classifier

    def slow_fit(*args, **kwargs):  # each fit longer than the delay and tqdm's mininterval (0.1 s)
        time.sleep(0.3)
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(module, "fit_classifier", slow_fit)
    monkeypatch.setattr(train, "PROGRESS_DELAY_S", 0.2)
    both = io.StringIO()  # a terminal: stdout and stderr in one stream
    monkeypatch.setattr(sys, "stdout", both)
    monkeypatch.setattr(sys, "stderr", both)
    metrics = train.train_predictor(examples, train.ModelSettings(max_epochs=2), tmp_path / "work", None, folds=2)
    print(train.format_metrics(metrics))  # as src/train_predictor.py does next
    monkeypatch.undo()
    text = both.getvalue()
    fits = metrics["cross_validation"]["folds"] + 1
    assert "fold 1/" in text and "final fit" in text
    bar, found, _ = text.partition(train.format_metrics(metrics))
    assert found and bar.endswith("\n"), repr(text[-300:])  # "data:" starts a line of its own
    last = bar[:-1].split("\r")[-1]  # the bar's last state, as the terminal keeps it
    assert last.startswith("training: 100%") and f"{fits}/{fits}" in last and "final fit" in last, repr(last)
    assert any(line.startswith("data: ") for line in text.split("\n"))


def test_alpha_given_as_an_integer_is_the_same_setting_as_the_default(runs):
    """sampler.alpha=4 was another setting than the default 4.0 (config.yaml writes 4 and 4.0), so
    the copies of the same decisions in an N_pf sweep given that way were all kept, twice."""
    from presto.predictor.data import collect_examples

    alone = collect_examples([runs["bfs"]], ("cut_fraction",), 0.01)
    both = collect_examples([runs["bfs"], runs["bfs_alpha4_int"]], ("cut_fraction",), 0.01)
    assert both.duplicates > 0 and len(both) - len(alone) < both.duplicates
    assert [(s["alpha"], s["runs"]) for s in both.sampler_settings] == [(4, 2)]


def test_tau_null_and_tau_one_over_alpha_are_one_setting(runs, tmp_path):
    """sampler.tau=0.5 at alpha 2 is the default proposal (tau null = 1/alpha), but it was reported as
    a second setting ("sampler.tau: 0.5, None") and its copies of the same decisions were all kept."""
    import shutil

    from presto.predictor import train
    from presto.predictor.data import collect_examples

    copy = tmp_path / "copy"
    shutil.copytree(runs["bfs_alpha2"], copy)
    copies = collect_examples([runs["bfs_alpha2"], copy], ("cut_fraction",), 0.01)  # two copies of one setting
    both = collect_examples([runs["bfs_alpha2"], runs["bfs_alpha2_tau"]], ("cut_fraction",), 0.01)
    assert copies.duplicates > 0
    assert (len(both), both.duplicates) == (len(copies), copies.duplicates)
    assert [(s["alpha"], s["runs"]) for s in both.sampler_settings] == [(2, 2)]  # tau as the first run logged it
    assert train.setting_warning({"sampler_settings": list(both.sampler_settings)}) is None


# --- where the checkpoint goes -------------------------------------------------------------


def test_output_naming_an_existing_file_that_is_not_a_checkpoint_is_refused(runs, tmp_path):
    """output=RUN/trees.jsonl (or any other file) was trained into and overwritten: the data lost."""
    from presto.config import ConfigError
    from presto.predictor.train import run_training

    victim = tmp_path / "copy" / "trees.jsonl"
    victim.parent.mkdir()
    victim.write_bytes((runs["bfs"] / "trees.jsonl").read_bytes())
    before = victim.read_bytes()
    cfg = training_config([victim.parent], output=str(victim), folds=2)
    with pytest.raises(ConfigError, match="exists and is not a predictor checkpoint: training would replace it"):
        run_training(cfg, out_dir=tmp_path / "work")
    assert victim.read_bytes() == before


def test_one_output_for_every_job_of_a_sweep_is_refused(runs, tmp_path):
    """-m predictor=logistic,mlp16 output=PATH trained both and installed whichever ran last."""
    out = tmp_path / "live" / "p.ckpt"
    done = train_cli(
        "-m",
        f"runs=[{runs['bfs']}]",
        "predictor=logistic,mlp16",
        "predictor.max_epochs=1",
        "folds=2",
        f"output={out}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: output={out} with -m: every job of the sweep would write this one")
    assert done.stderr.count("\n") == 1 and not out.exists()


def sweep_cli(runs, tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`train_predictor.py -m` on the toy BFS run: small and quick (logistic, 2 folds, 1 epoch)."""
    return train_cli(
        "-m",
        f"runs=[{runs['bfs']}]",
        "folds=2",
        "predictor.max_epochs=1",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *args,
    )


def test_output_interpolating_no_swept_key_is_refused(runs, tmp_path):
    """-m folds=2,3 'output=DIR/${predictor.name}.ckpt' passed (an interpolation was taken for one file
    per job), and both jobs wrote DIR/logistic.ckpt, the second over the first."""
    done = sweep_cli(runs, tmp_path, "folds=2,3", f"output={tmp_path}/live/${{predictor.name}}.ckpt")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: output={tmp_path}/live/${{predictor.name}}.ckpt with -m: every job")
    assert "the sweep varies folds" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "live").exists() and not (tmp_path / "sweep").exists()  # nothing trained


def test_a_swept_output_is_one_checkpoint_per_job(runs, tmp_path):
    """-m output=A.ckpt,B.ckpt was refused ("every job of the sweep would write this one checkpoint")."""
    a, b = tmp_path / "A.ckpt", tmp_path / "B.ckpt"
    done = sweep_cli(runs, tmp_path, f"output={a},{b}")
    assert done.returncode == 0 and "error:" not in done.stderr, done.stderr[-2000:]
    assert a.is_file() and b.is_file()


def test_a_sweep_of_one_job_may_name_its_output(runs, tmp_path):
    """-m with nothing swept is one job: its output=PATH was refused as if several would write it."""
    out = tmp_path / "one.ckpt"
    done = sweep_cli(runs, tmp_path, f"output={out}")
    assert done.returncode == 0 and "error:" not in done.stderr, done.stderr[-2000:]
    assert out.is_file() and (tmp_path / "sweep" / "0").is_dir()


def test_output_interpolating_a_swept_group_names_one_checkpoint_per_job(runs, tmp_path):
    done = sweep_cli(runs, tmp_path, "predictor=logistic,mlp16", f"output={tmp_path}/live/${{predictor.name}}.ckpt")
    assert done.returncode == 0 and "error:" not in done.stderr, done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "live").glob("*.ckpt")) == ["logistic.ckpt", "mlp16.ckpt"]


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["-m", "folds=2,3", "output=p.ckpt"], True),
        (["--multirun", "seed=range(3)", "output=p.ckpt"], True),
        (["hydra.mode=MULTIRUN", "folds=2,3", "+output=p.ckpt"], True),
        (["-m", "folds=2,3", "output=d/${seed}.ckpt"], True),  # seed is not swept
        (["-m", "predictor=logistic,mlp16", "output=d/${hydra:runtime.cwd}.ckpt"], True),  # one for all
        (["-m", "folds=2,3", "output=d/${folds}.ckpt"], False),
        (["-m", "predictor=logistic,mlp16", "output=d/${predictor.name}.ckpt"], False),
        (["-m", "predictor.l2=0.1,1", "output=d/${predictor}.ckpt"], False),
        (["-m", "runs=[a],[b]", "output=a.ckpt,b.ckpt"], False),
        (["-m", "folds=2,3", "output=choice(a.ckpt,b.ckpt)"], False),
        (["-m", "folds=2,3", "output=d/${hydra:job.num}.ckpt"], False),
        (["-m", "runs=[a,b]", "output=p.ckpt"], False),  # nothing swept: one job
        (["folds=2,3", "output=p.ckpt"], False),  # no sweep: a run of folds 2,3 (refused later as not an integer)
        (["-m", "folds=2,3"], False),
        (["-m", "folds=2,3", "output=null"], False),
    ],
)
def test_which_sweeps_give_every_job_one_output(argv, refused):
    from presto.predictor.train import sweep_output_error

    error = sweep_output_error(argv)
    assert (error is not None) == refused, error
    if refused:
        assert error.startswith("output=") and "with -m: every job of the sweep would write this one" in error


def test_replacing_a_served_checkpoint_is_atomic_and_any_model_swaps_in(tmp_path, monkeypatch):
    """(Already right.) The checkpoint is written beside the served one and renamed over it; a
    watcher then swaps logistic for MLP and back between rounds, whatever epsilon they were trained at."""
    import torch

    from presto.predictor import module as module_file
    from presto.predictor.hotload import HotPredictor
    from presto.predictor.module import EpsilonClassifier, fingerprint, save_checkpoint

    live = tmp_path / "not" / "yet" / "p.ckpt"  # directories that do not exist are made
    logistic = EpsilonClassifier(["cut_fraction"], mean=[0.5], std=[0.2])
    save_checkpoint(logistic, live)
    watcher = HotPredictor(live)
    assert watcher.current().fingerprint == fingerprint(logistic) and len(watcher.current().layers) == 1

    mlp = EpsilonClassifier(["cut_fraction", "depth"], hidden=[4], mean=[0.5, 1.0], std=[0.2, 1.0], epsilon=0.2)
    written: list[tuple[Path, bytes]] = []
    real_save = torch.save

    def spying_save(obj, path):
        written.append((Path(path), live.read_bytes()))  # what a reader of `live` sees meanwhile
        real_save(obj, path)

    old = live.read_bytes()
    monkeypatch.setattr(module_file.torch, "save", spying_save)
    save_checkpoint(mlp, live)
    [(staged, seen)] = written
    assert staged != live and staged.parent == live.parent and seen == old
    assert sorted(p.name for p in live.parent.iterdir()) == ["p.ckpt"]  # nothing staged left behind
    served = watcher.current()
    assert served.fingerprint == fingerprint(mlp) and len(served.layers) == 2 and served.epsilon == 0.2
    save_checkpoint(logistic, live)
    assert watcher.current().fingerprint == fingerprint(logistic) and watcher.swaps == 2


# --- scripts/oracle_bound.py ---------------------------------------------------------------


def test_the_truncated_log_warning_says_rows_can_come_out_too_high(runs, tmp_path, capsys):
    """It said truncation counted nodes as unavailable, "lowering every row"; but the log always keeps
    the walk's own path, on which BFS then spends its requests: its row came out higher."""
    oracle = load_script("oracle_bound")
    replays = {}
    for name in ("bfs", "truncated"):
        out = tmp_path / f"{name}.json"
        assert oracle.main([str(runs[name]), "--n-pf", "4", "8", "--predictor", "null", "--out", str(out)]) == 0
        rows = json.loads(out.read_text())["rows"]
        replays[name] = {(r["method"], r["n_pf"]): r["transitions_per_call"] for r in rows}
    printed = capsys.readouterr().out
    assert any(replays["truncated"][("bfs", n)] > replays["bfs"][("bfs", n)] + 1e-9 for n in (4, 8))
    assert "rounds have candidate nodes missing from the log" in printed
    assert "lowering every row" not in printed and "can come out higher than a full log gives" in printed


# Combinations tried (toy engine; 6-prompt runs unless said): what happened before -> verdict.
# fixed: a defect, fixed with the test above that failed on the old code; OK: already right;
# left: not changed here (why: in the review's report).
#
# train_predictor.py runs=...
#   PowerMH BFS                           trains; metrics, checkpoint, fingerprint right  OK
#   EntropyCut BFS, features=[cut,entropy] trains                                         OK
#   MultiTryMH BFS / a predictive run      trains (predictive: requested depths only)     OK
#   sequential run, baseline (lowtemp)     "no feasible tree nodes", no why               fixed: says why
#   3 samplers pooled                      warning: pooled the trees of 3 samplers        OK
#   alpha 4 with alpha 2 (or another n)    pooled silently                                fixed: warning
#   alpha=4 given vs default 4.0           two settings: sweep copies kept twice          fixed: one setting
#   tau=0.5 at alpha 2 vs default null     two settings: copies kept, a false warning     fixed: one setting
#   a multirun root (n_pf=2,6)             both jobs read, 97 copies dropped              OK
#   1 prompt / 2 prompts                   one-line error / 2-fold CV, absent-class warn  OK
#   every node one class                   one-line error naming epsilon                  OK
#   torn last line, damaged middle line    skipped / warned                               OK
#   valid JSON of the wrong shape          traceback, or "error: id"                      fixed: one line
#   runs=[RUN/summary.json]                a warning per line, then no nodes              fixed: refused
#   missing path, dir without trees        one-line errors                                OK
#   truncated trees (max_logged_nodes=3)   trains on what was logged                      OK
# models x feature sets
#   6 conf/predictor x {cut,tree,likelihood,entropy} on PowerMH, entropy on EntropyCut,
#   likelihood on MultiTry: each fits; served = module probabilities (< 1e-6)             OK
#   entropy stats on PowerMH trees         logged by every sampler                        OK
#   l2 / learning_rate nan or inf          traceback / a whole CV, then "diverged"        fixed: refused
#   l2=1e300, learning_rate=1e30 (L-BFGS)  RuntimeError traceback, no metrics.json        fixed: diverged
#   a diverged model's accuracy            share of class 0 (argmax of NaN rows)          fixed: null
#   l2<0, epochs/batch 0 or -1, hidden [0] one-line config errors                         OK
#   batch_size 1e12, max_epochs 1e9        accepted (capped by the data; runs as asked)   OK
#   val_fraction with too few prompts/rows node split + warning / no early stopping       OK
#   seed -1, seed near 2**32               error not naming seed, mid-CV                  fixed: refused
#   folds > prompts; 1 node per class      capped; sklearn "n_splits" error               fixed: fallback
#   long training (mlp16, 1235 nodes: 1 min) silent until the end                         fixed: progress
#   short training (< 2 s)                 bar drawn at once, next output glued to it     fixed: no bar
# output
#   default                                <run dir>/predictor.ckpt + metrics.json        OK
#   output=PATH in missing directories     made; PATH.metrics.json beside it              OK
#   output= an existing other file         overwritten (a run's trees.jsonl lost)         fixed: refused
#   output=PATH with -m over two models    the last job's model installed                 fixed: refused
#   -m folds=2,3 output=DIR/${predictor.name}.ckpt  both jobs wrote DIR/logistic.ckpt    fixed: refused
#   -m output=A.ckpt,B.ckpt; -m, one job   refused                                        fixed: allowed
#   -m predictor=a,b output=DIR/${predictor.name}.ckpt  one per job                       OK
#   replacing a served checkpoint          staged sibling, renamed; the watcher swaps     OK
#   read-only directory                    not testable as root                           left
# hot-load (traversal=predictive traversal.predictor=...)
#   EntropyCut-trained, all-feature MLP, eps=0.4 models in PowerMH runs; null; default
#   from cwd=/                             served; named at start                         OK
#   missing path, a directory, not a ckpt  one-line errors at start                       OK
#   logistic <-> MLP, other eps, mid-run   swapped between rounds                         OK
# scripts/retrain_predictor.sh
#   no run dirs, missing dir, no trees, sequential + baseline runs: one-line errors       OK
#   --out in missing directories           installed with PATH.metrics.json               OK
# scripts/oracle_bound.py
#   BFS, predictive, MultiTry runs         tables; predictive: fewer-depths note          OK
#   sequential, baseline                   error: no rounds to replay                     OK
#   truncated (max_logged_nodes=3)         warned "lowering every row"; bfs row higher    fixed: wording

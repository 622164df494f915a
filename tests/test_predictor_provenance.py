"""A predictor checkpoint says what it was trained on, and a run warns when it serves one trained on
another sampler or setting (the paper trains one predictor per setting).

Training stores the training trees' samplers, composition and sampler settings in the checkpoint's
plain hyperparameters (``provenance``); a predictive run compares them with its own sampler when it
names the predictor at start and at each hot swap, and prints one ``warning:`` line naming what
differs. Serving goes on either way. Old checkpoints carry no provenance: they load as before and
are never warned about. The shipped predictors (one per sampler) carry theirs. Toy engine only; the runs and
checkpoints are made once per module.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from presto.config import SamplerSettings
from presto.engines.toy import ToyEngine
from presto.predictor import SHIPPED_SAMPLERS, default_checkpoint
from presto.predictor.hotload import HotPredictor, load_predictor
from presto.predictor.provenance import provenance_mismatch
from presto.prefetch.predictive import PredictiveTraversal
from presto.prefetch.presto import PrefetchStepper
from presto.samplers import build_kernel
from presto.samplers.chain import BlockSchedule, run_chain
from presto.samplers.randomness import ChainKey
from tests.conftest import compose_run, run_cli, toy_args, training_config, write_toy_table

POWERMH = SamplerSettings("powermh", 4.0, 0.25, 8, 4, 6, {})
"""The sampler of the toy runs' PowerMH setting (conftest's toy_overrides: n = 8, B = 4, K = 6)."""


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """The toy table, BFS runs of EntropyCut and PowerMH, and a checkpoint trained on each."""
    from presto.predictor.train import run_training

    root = tmp_path_factory.mktemp("provenance")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    out = {"table": table}
    for name, sampler in (("entropycut", "sampler=entropycut"), ("powermh", "sampler=powermh")):
        done = run_cli(*toy_args(table, root / f"{name}_bfs", "traversal=bfs", sampler))
        assert done.returncode == 0, done.stderr[-2000:]
        checkpoint = root / f"{name}.ckpt"
        cfg = training_config([root / f"{name}_bfs"], output=str(checkpoint), folds=2)
        run_training(cfg, root / f"{name}_training")
        out[name] = checkpoint
    # What a checkpoint written before provenance holds: the same file less that hyperparameter.
    old = torch.load(out["entropycut"], map_location="cpu", weights_only=True)
    old["hyper_parameters"].pop("provenance", None)
    out["old"] = root / "old.ckpt"
    torch.save(old, out["old"])
    return out


def predictive_run(made, run_dir: Path, checkpoint: Path, *extra: str):
    served = ("traversal=predictive", f"traversal.predictor={checkpoint}")
    done = run_cli(*toy_args(made["table"], run_dir, *served, *extra))
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr.splitlines()


def warnings_in(lines) -> list[str]:
    return [line for line in lines if line.startswith("warning:")]


def test_the_checkpoint_holds_the_samplers_and_settings_it_was_trained_on(made):
    from presto.predictor.module import EpsilonClassifier

    hp = torch.load(made["entropycut"], map_location="cpu", weights_only=True)["hyper_parameters"]
    provenance = hp["provenance"]
    assert provenance["samplers"] == ["entropycut"]
    assert [(part["sampler"], part["traversal"], part["runs"]) for part in provenance["composition"]] == [
        ("entropycut", "bfs", 1)
    ]
    [setting] = provenance["sampler_settings"]
    assert setting["name"] == "entropycut" and setting["runs"] == 1 and "steps" not in setting
    expected = {"alpha": 4, "tau": None, "max_new_tokens": 8, "block_size": 4, "beta": 4, "uniform_mix": 0.1}
    assert {key: setting[key] for key in expected} == expected
    # Hot-loading reads it back (without Lightning), and so does Lightning without Hydra.
    assert load_predictor(made["entropycut"]).provenance == provenance
    assert EpsilonClassifier.load_from_checkpoint(made["entropycut"]).hparams.provenance == provenance
    # ... and the metrics installed beside it say the same.
    metrics = OmegaConf.to_container(OmegaConf.load(made["entropycut"].with_name("entropycut.ckpt.metrics.json")))
    assert metrics["samplers"] == provenance["samplers"]
    assert metrics["sampler_settings"] == provenance["sampler_settings"]


def test_an_entropycut_predictor_served_to_a_powermh_run_warns_once_naming_the_samplers(made, tmp_path):
    lines = predictive_run(made, tmp_path / "run", made["entropycut"])
    served = load_predictor(made["entropycut"])
    [warning] = warnings_in(lines)
    assert f"predictor {made['entropycut']} (fingerprint {served.fingerprint})" in warning
    assert "trained on entropycut trees" in warning and "this run samples with powermh" in warning
    assert "planning goes on with it" in warning
    # Serving went on: the run names the predictor, and its rounds were planned with it.
    assert f"notice: planning with predictor {made['entropycut']} (fingerprint {served.fingerprint})" in lines
    assert served.fingerprint in (tmp_path / "run" / "trees.jsonl").read_text()


def test_a_predictor_of_the_runs_own_sampler_and_setting_does_not_warn(made, tmp_path):
    lines = predictive_run(made, tmp_path / "run", made["powermh"])
    assert warnings_in(lines) == []
    assert any(line.startswith("notice: planning with predictor ") for line in lines)


def test_a_predictor_trained_at_another_alpha_warns_naming_alpha(made, tmp_path):
    lines = predictive_run(made, tmp_path / "run", made["powermh"], "sampler.alpha=2")
    [warning] = warnings_in(lines)
    assert "trained on powermh trees of another setting" in warning
    assert "sampler.alpha (trained 4, this run 2)" in warning
    # tau=null is 1/alpha on both sides: the proposal temperature differs too, and is named as such.
    assert "sampler.tau (trained 0.25, this run 0.5)" in warning
    assert "max_new_tokens" not in warning and "block_size" not in warning


def test_an_old_checkpoint_without_provenance_loads_and_does_not_warn(made, tmp_path, capsys):
    from presto.predictor.module import EpsilonClassifier
    from presto.runner.run import announce_predictor

    old = made["old"]
    assert load_predictor(old).provenance is None
    assert EpsilonClassifier.load_from_checkpoint(old).hparams.get("provenance") is None
    traversal = PredictiveTraversal(HotPredictor(old))
    announce_predictor(traversal, POWERMH)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"notice: planning with predictor {old} (fingerprint {load_predictor(old).fingerprint})"]
    # A provenance of another shape (a hand-edited file) is not trusted, and does not stop serving either.
    odd = torch.load(made["entropycut"], map_location="cpu", weights_only=True)
    odd["hyper_parameters"]["provenance"] = {"samplers": "entropycut", "sampler_settings": [{"runs": "x"}]}
    torch.save(odd, tmp_path / "odd.ckpt")
    assert load_predictor(tmp_path / "odd.ckpt").provenance is None
    announce_predictor(PredictiveTraversal(HotPredictor(tmp_path / "odd.ckpt")), POWERMH)
    assert warnings_in(capsys.readouterr().err.splitlines()) == []
    # The same weights with their provenance do warn: the silence above is the missing provenance's.
    announce_predictor(PredictiveTraversal(HotPredictor(made["entropycut"])), POWERMH)
    assert len(warnings_in(capsys.readouterr().err.splitlines())) == 1


def test_a_hot_swap_to_a_mismatched_checkpoint_warns_between_rounds(made, tmp_path, capsys):
    from presto.runner.run import announce_predictor

    live = tmp_path / "live.ckpt"
    shutil.copyfile(made["powermh"], live)
    traversal = PredictiveTraversal(HotPredictor(live))
    announce_predictor(traversal, POWERMH)
    assert warnings_in(capsys.readouterr().err.splitlines()) == []
    fingerprints = {name: load_predictor(made[name]).fingerprint for name in ("powermh", "entropycut", "old")}
    # Two models told apart by fingerprint (weights only: "old" is the EntropyCut model less its provenance).
    assert fingerprints["powermh"] != fingerprints["entropycut"] == fingerprints["old"]
    swaps = {2: "entropycut", 4: "powermh", 6: "old"}  # after round r, a retraining job replaces the file
    planned: list[str] = []

    def on_round(record):
        planned.append(traversal.last_plan["predictor"])
        if len(planned) in swaps:
            shutil.copyfile(made[swaps[len(planned)]], tmp_path / "next.ckpt")
            os.replace(tmp_path / "next.ckpt", live)
        print(f"-- after round {len(planned)}", file=sys.stderr)

    engine = ToyEngine(made["table"])
    kernel = build_kernel(POWERMH)
    run_chain(kernel, engine, PrefetchStepper(traversal, 2, on_round), [], ChainKey(0, 0, 0), BlockSchedule(8, 4, 10))
    assert len(planned) > 6, planned
    assert planned[2] == fingerprints["entropycut"] and planned[4] == fingerprints["powermh"]
    lines = capsys.readouterr().err.splitlines()
    # The swap to the EntropyCut model is warned about once, right after its reload notice and before
    # the next round's marker; swapping back, or to a model without provenance, is not.
    reload = f"notice: reloaded predictor {live} (fingerprint {fingerprints['entropycut']})"
    at = lines.index(reload)
    [warning] = warnings_in(lines)
    assert lines[at + 1] == warning and lines[at + 2] == "-- after round 3"
    assert "trained on entropycut trees" in warning and "this run samples with powermh" in warning
    assert sum(line.startswith("notice: reloaded") for line in lines) == 3


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        # pooled settings that include the run's: nothing to say
        (POWERMH, None),
        # tau given as 1/alpha is the same as tau=null
        (SamplerSettings("powermh", 2.0, 0.5, 8, 4, 6, {}), None),
        # a longer horizon at the same alpha: named, and nothing else
        (SamplerSettings("powermh", 4.0, 0.25, 16, 4, 6, {}), "sampler.max_new_tokens (trained 8, this run 16)"),
        # a multitry run: the sampler is named, whatever its settings
        (SamplerSettings("multitry", 4.0, 0.25, 8, 4, 6, {"num_candidates": 2}), "this run samples with multitry"),
    ],
)
def test_the_comparison_takes_pooled_settings_and_effective_temperatures(run, expected):
    setting = {"name": "powermh", "tau": None, "max_new_tokens": 8, "block_size": 4}
    provenance = {
        "samplers": ["entropycut", "powermh"],
        "composition": [{"sampler": "powermh", "traversal": "bfs", "runs": 2}],
        "sampler_settings": [{**setting, "alpha": 2, "runs": 1}, {**setting, "alpha": 4.0, "runs": 1}],
    }
    found = provenance_mismatch(provenance, run)
    assert found is None if expected is None else expected in found, found


def test_runs_of_unknown_setting_or_sampler_are_not_held_against_the_run():
    run = SamplerSettings("powermh", 3.0, 1 / 3, 8, 4, 6, {})
    known = {"name": "powermh", "alpha": 4, "tau": None, "max_new_tokens": 8, "block_size": 4, "runs": 1}
    provenance = {
        "samplers": ["powermh"],
        "composition": [{"sampler": "powermh", "traversal": "bfs", "runs": 1}],
        "sampler_settings": [known],
    }
    assert "sampler.alpha (trained 4, this run 3)" in provenance_mismatch(provenance, run)
    # A second run without config.yaml: its setting may be this run's.
    provenance["composition"][0]["runs"] = 2
    assert provenance_mismatch(provenance, run) is None
    # Counts that are not numbers are none (a hand-edited file): compared, never a crash.
    provenance["composition"][0]["runs"] = "two"
    assert "sampler.alpha" in provenance_mismatch(provenance, run)
    # Runs whose sampler nobody recorded (no summary.json, no config.yaml) may be of any sampler.
    unknown = {"samplers": ["entropycut", "unknown"], "composition": [], "sampler_settings": []}
    assert provenance_mismatch(unknown, run) is None
    assert provenance_mismatch(None, run) is None


def quickstart_sampler(sampler: str, *overrides: str) -> SamplerSettings:
    """The sampler settings of ``python src/main.py sampler=NAME`` (the embedded default) with ``overrides``."""
    from presto.config import validate_sampler

    return validate_sampler(compose_run(f"sampler={sampler}", *overrides))


@pytest.mark.parametrize("sampler", SHIPPED_SAMPLERS)
def test_each_sampler_is_served_its_own_shipped_predictor_trained_at_the_embedded_default(sampler, capsys):
    """traversal.predictor=default names the checkpoint trained on the run's own sampler (the paper
    trains one per sampler), and its provenance says so: the embedded default's run is not warned,
    a run of another sampler or another alpha served the same file is."""
    from presto.runner.run import announce_predictor

    path = default_checkpoint(sampler)
    traversal = PredictiveTraversal.from_options({"predictor": "default"}, sampler)
    served = traversal.current_predictor()
    assert served is not None and Path(served.path) == path
    assert served.provenance["samplers"] == [sampler]
    assert [s["name"] for s in served.provenance["sampler_settings"]] == [sampler]
    announce_predictor(traversal, quickstart_sampler(sampler))
    assert capsys.readouterr().err.splitlines() == [
        f"notice: planning with predictor {path} (fingerprint {served.fingerprint})"
    ]
    for other in (s for s in SHIPPED_SAMPLERS if s != sampler):
        assert provenance_mismatch(served.provenance, quickstart_sampler(other)) == (
            f"trained on {sampler} trees, while this run samples with {other}"
        )
    assert "sampler.alpha (trained 4, this run 2)" in provenance_mismatch(
        served.provenance, quickstart_sampler(sampler, "sampler.alpha=2")
    )
    # The three are three models, not one file thrice.
    assert len({load_predictor(default_checkpoint(s)).fingerprint for s in SHIPPED_SAMPLERS}) == len(SHIPPED_SAMPLERS)


def test_default_names_no_predictor_without_a_sampler_that_has_one():
    from presto.config import ConfigError
    from presto.prefetch.predictive import resolve_predictor_path

    for sampler, why in ((None, "no sampler was given"), ("power_smc", "none ships for sampler power_smc")):
        with pytest.raises(ConfigError, match=f"--predictor=default names the shipped predictor .*{why}"):
            resolve_predictor_path("default", sampler, option="--predictor")
    assert resolve_predictor_path(None, None) is None
    assert resolve_predictor_path("default", "multitry") == default_checkpoint("multitry")


def test_a_predictive_run_plans_with_the_predictor_shipped_for_its_sampler(made):
    """End to end: ``python src/main.py sampler=multitry traversal=predictive`` names multitry.ckpt, and
    warns that the toy setting (n = 8, B = 4) is not the one it was trained at (n = B = 64)."""
    done = run_cli(*toy_args(made["table"], made["table"].parent / "mtm_predictive", "traversal=predictive",
                             "sampler=multitry", steps=3))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    shipped = load_predictor(default_checkpoint("multitry"))
    assert f"notice: planning with predictor {shipped.path} (fingerprint {shipped.fingerprint})" in done.stderr
    warning = next(line for line in done.stderr.splitlines() if line.startswith("warning: predictor"))
    assert "trained on multitry trees of another setting" in warning
    assert "sampler.max_new_tokens (trained 64, this run 8)" in warning and "sampler.block_size" in warning

"""traversal=predictive under degenerate inputs: checkpoints changed in every way a file can
change during a run, a run starting on a watched file that broke since, bad option values,
degenerate call timings, and adversarial timings that must not change a chain."""

from __future__ import annotations

import math
import os
import shutil
import types
import warnings

import numpy as np
import pytest

from presto.config import ConfigError
from presto.engines import base as engine_base
from presto.engines.toy import ToyEngine
from presto.predictor import hotload
from presto.predictor.hotload import HotPredictor, PredictorError, load_predictor
from presto.prefetch.predictive import CallCostModel, PredictiveTraversal, ReachCalibration
from presto.prefetch.presto import PrefetchStepper
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.randomness import ChainKey
from tests.conftest import write_toy_table
from tests.test_predictive_traversal import kernel_for, kernels, write_predictor


@pytest.fixture
def pair(tmp_path):
    """Two checkpoints of the same architecture (so the same file size) and a live copy of the first."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_predictor(tmp_path / "a" / "p.ckpt", [4.0, -4.0, 0.0])  # torch.save stores the name
    second = write_predictor(tmp_path / "b" / "p.ckpt", [-4.0, 4.0, 0.0])
    assert first.stat().st_size == second.stat().st_size
    live = tmp_path / "live.ckpt"
    shutil.copyfile(first, live)
    return live, load_predictor(first).fingerprint, second, load_predictor(second).fingerprint


def test_an_in_place_rewrite_that_keeps_mtime_and_size_is_picked_up(pair):
    """cp -p, rsync --inplace -t, touch -r: the content changes, mtime and size and inode do not."""
    live, old, second, new = pair
    hot = HotPredictor(live)
    assert hot.current().fingerprint == old
    before = os.stat(live)
    with open(live, "r+b") as handle:  # in place: same inode
        handle.write(second.read_bytes())
    os.utime(live, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(live)
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (before.st_mtime_ns, before.st_size, before.st_ino)
    assert hot.current().fingerprint == new and hot.swaps == 1


def test_a_rewrite_within_one_timestamp_tick_is_picked_up(pair, monkeypatch):
    """Two writes within the file system's timestamp granularity leave every stat field equal;
    a file that young is compared by content until it is old enough to be told apart by them."""
    live, old, second, new = pair
    monkeypatch.setattr(hotload, "_now_ns", lambda: os.stat(live).st_ctime_ns)  # just written, on a slow machine too
    hot = HotPredictor(live)
    frozen = hot._stat()
    monkeypatch.setattr(HotPredictor, "_stat", lambda self: frozen)  # stat cannot see the next write
    assert hot.current().fingerprint == old
    with open(live, "r+b") as handle:
        handle.write(second.read_bytes())
    assert hot.current().fingerprint == new


def test_a_settled_file_costs_one_stat_per_round(pair, monkeypatch):
    live, old, _, _ = pair
    monkeypatch.setattr(hotload, "_now_ns", lambda: os.stat(live).st_ctime_ns + 10**12)  # long after the write
    hot = HotPredictor(live)
    reads, read = [], hotload._read_bytes
    monkeypatch.setattr(hotload, "_read_bytes", lambda path, *args: reads.append(path) or read(path, *args))
    for _ in range(3):
        assert hot.current().fingerprint == old
    assert reads == []


def test_a_file_deleted_mid_run_warns_once_and_its_replacement_is_picked_up(pair):
    live, old, second, new = pair
    hot = HotPredictor(live)
    live.unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert hot.current().fingerprint == old
        assert hot.current().fingerprint == old
    assert [str(w.message) for w in caught] == [
        f"traversal.predictor: {live} no longer exists; keeping the previous predictor ({old})"
    ]
    shutil.copyfile(second, live)
    assert hot.current().fingerprint == new


@pytest.mark.parametrize("change", ["directory", "truncated", "half", "empty"])
def test_an_unservable_replacement_mid_run_warns_once_and_the_next_one_is_picked_up(pair, change):
    live, old, second, new = pair
    hot = HotPredictor(live)
    data = second.read_bytes()
    if change == "directory":
        live.unlink()
        live.mkdir()
    elif change == "truncated":
        os.truncate(live, 100)
    elif change == "half":
        live.write_bytes(data[: len(data) // 2])
    else:
        live.write_bytes(b"")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert hot.current().fingerprint == old
    assert len(caught) == 1 and "keeping the previous predictor" in str(caught[0].message)
    if change == "directory":
        live.rmdir()
    live.write_bytes(data)
    assert hot.current().fingerprint == new


def test_an_unreadable_replacement_mid_run_keeps_the_previous_predictor(pair, monkeypatch):
    """Permissions (root reads every file, so the refusal is simulated)."""
    live, old, second, _ = pair
    hot = HotPredictor(live)
    shutil.copyfile(second, live.with_name("staged"))
    os.replace(live.with_name("staged"), live)

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(hotload.Path, "open", refuse)
    with pytest.warns(RuntimeWarning, match="cannot read .*Permission denied.*keeping the previous predictor"):
        assert hot.current().fingerprint == old


def test_a_directory_at_start_is_named_as_such(tmp_path):
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(PredictorError, match="is a directory"):
        HotPredictor(tmp_path / "ckpt")
    with pytest.raises(PredictorError, match="is a directory"):
        load_predictor(tmp_path / "ckpt")


def test_a_later_run_checks_the_watched_file_at_its_start(pair):
    """A multirun's next job reuses the process's watcher; a checkpoint broken since the first
    job is still a start error, not a warning in the middle of the run."""
    live, old, second, new = pair
    options = {"predictor": str(live)}
    assert PredictiveTraversal.from_options(options).current_predictor().fingerprint == old
    live.write_bytes(b"not a checkpoint")
    with pytest.raises(PredictorError, match="not a readable checkpoint"):
        PredictiveTraversal.from_options(options)
    live.unlink()
    with pytest.raises(PredictorError, match="no such checkpoint"):
        PredictiveTraversal.from_options(options)
    shutil.copyfile(second, live)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PredictiveTraversal.from_options(options).current_predictor().fingerprint == new


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"min_calls": True}, "min_calls"),
        ({"min_calls": 3, "window": True}, "window"),
        ({"prior_calls": math.nan}, "prior_calls"),
        ({"prior_calls": math.inf}, "prior_calls"),
        ({"prior_calls": -1.0}, "prior_calls"),
        ({"min_calls": 2.0}, "min_calls"),
    ],
)
def test_bad_option_values_are_one_config_error(options, key):
    with pytest.raises(ConfigError, match=rf"traversal\.{key}"):
        PredictiveTraversal.from_options({"predictor": None, **options})


def test_a_cost_model_with_an_unusable_prior_is_refused():
    for prior in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="prior_calls"):
            CallCostModel(prior_calls=prior)


@pytest.mark.parametrize(
    "bad",
    [
        (640, 64, 2.0, math.nan),
        (640, 64, 2.0, math.inf),
        (640, 64, 2.0, 0.0),
        (math.inf, 64, 2.0, 4000.0),
        (640, math.inf, 2.0, 4000.0),
        (640, 64, 5e-324, 4000.0),
    ],
)
def test_the_cost_model_never_raises_and_never_holds_a_broken_fit(bad):
    """observe runs after every engine call of a run: a degenerate measurement is skipped, never a crash."""
    model = CallCostModel(min_calls=2)
    good = [(640, 64, 2.0, 4000.0), (320, 32, 1.0, 1000.0)]
    for row in good:
        model.observe(*row)
    fitted = model.coef.copy()
    for _ in range(3):
        model.observe(*bad)
    assert model.coef is not None and np.all(np.isfinite(model.coef)) and np.all(model.coef >= 0)
    if not all(np.isfinite(bad)):
        np.testing.assert_array_equal(model.coef, fitted)
    blank = CallCostModel(min_calls=1)
    blank.observe(*bad)
    assert blank.coef is None or np.all(np.isfinite(blank.coef))


def test_the_cost_model_on_degenerate_timings():
    equal = CallCostModel(min_calls=2)
    for _ in range(5):
        equal.observe(100, 10, 1.0, 1000.0)
    assert equal.predict(np.array([100.0]), np.array([10.0]), np.array([1000.0]))[0] == pytest.approx(1.0, rel=0.05)
    zero = CallCostModel(min_calls=2)
    for _ in range(5):
        zero.observe(100, 10, 0.0, 1000.0)
    np.testing.assert_array_equal(zero.coef, 0.0)
    for seconds in (math.nan, math.inf, -1.0):
        skipped = CallCostModel(min_calls=1)
        skipped.observe(100, 10, seconds, 1000.0)
        assert skipped.calls == 0 and skipped.coef is None


def test_reach_calibration_on_degenerate_outcomes():
    predicted = [1.0, 0.9, 0.5, 0.1]
    for realized, low, high in ((4, 0.0, 0.1), (1, 19.0, 20.0)):  # every depth reached; none past depth 0
        calibration = ReachCalibration(min_pairs=5)
        for _ in range(10):
            calibration.observe(predicted, realized)
        assert low <= calibration.gamma <= high
        applied = calibration.apply(np.array(predicted))
        assert applied[0] == 1.0 and np.all((applied >= 0) & (applied <= 1))
    certain = ReachCalibration(min_pairs=1)
    certain.observe([1.0, 0.0, 1.0, 0.0, math.nan], 2)  # no information about the exponent
    assert not certain.pairs and certain.gamma == 1.0


class AdversarialCost(CallCostModel):
    """Predictions of every broken kind: none, negative, NaN, infinite, huge."""

    def __init__(self, seed: int) -> None:
        super().__init__(min_calls=1)
        self.rng = np.random.default_rng(seed)

    def predict(self, tokens, longest, pairs=None):
        n, kind = len(tokens), int(self.rng.integers(0, 5))
        return [
            None,
            self.rng.normal(0.0, 1.0, n),
            np.where(self.rng.random(n) < 0.3, np.nan, self.rng.random(n)),
            self.rng.choice([np.inf, -np.inf, 0.0, 1.0], n),
            self.rng.random(n) * 1e300,
        ][kind]


class AdversarialClock:
    """engine call times that are random, zero, negative, huge, tiny or NaN."""

    def __init__(self, seed: int) -> None:
        self.rng, self.started = np.random.default_rng(seed), False

    def perf_counter(self) -> float:
        self.started = not self.started
        if self.started:
            return 0.0
        return float(self.rng.choice([0.0, -1.0, 1e9, 1e-300, 5e-324, math.nan, self.rng.exponential(1.0)]))


@pytest.mark.parametrize("sampler", kernels())
def test_chains_equal_sequential_whatever_the_timings(tmp_path, sampler, monkeypatch):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=11))
    kernel = kernel_for(sampler)
    predictor = load_predictor(write_predictor(tmp_path / "p.ckpt", [0.0, 0.0, 0.0], [[-3.0], [3.0], [0.0]]))
    partial = 0
    for seed, schedule in enumerate((BlockSchedule(12, 4, 6), BlockSchedule(16, 16, 20))):
        key = ChainKey(seed, prompt=seed, chain=0)
        reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
        for n_pf in (1, 3, 30):
            for cost_model in (CallCostModel(min_calls=1, prior_calls=0.0), AdversarialCost(seed + n_pf)):
                monkeypatch.setattr(
                    engine_base, "time", types.SimpleNamespace(perf_counter=AdversarialClock(n_pf).perf_counter)
                )
                traversal = PredictiveTraversal(
                    predictor, True, cost_model, ReachCalibration(min_pairs=3), warmup_rows=2
                )
                plans = []
                stepper = PrefetchStepper(traversal, n_pf, lambda r, out=plans: out.append(r["plan"]))
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # not even a numpy warning
                    state, trace = run_chain(kernel, engine, stepper, [], key, schedule)
                np.testing.assert_array_equal(state.tokens, reference.tokens)
                assert trace.accepts == reference_trace.accepts and trace.log_accepts == reference_trace.log_accepts
                partial += sum(plan["depths"] < plan["max_depths"] for plan in plans)
    assert partial  # some plans really stopped short of BFS

"""Tests that kill the mutants a hand mutation review of the predictive rule and its predictor found surviving.

Each test names the mutants it kills (ids of the review: P = prefetch/predictive.py, CV =
prefetch/clairvoyant.py, F = predictor/features.py, H = predictor/hotload.py, D =
predictor/data.py, MO = predictor/module.py, AL = prefetch/allocation.py as the rule uses it).
They check laws against independent reconstructions rather than how the code computes them:
the walk's reach by enumerating every accept/reject path, the call-cost law, the warm-up's
doubling row budget, the gradient of the paper's penalized log loss at the fitted optimum,
reach weights and copies on hand-written trees. The survivors judged equivalent are listed,
with the reason, at the end of the file.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from presto.engines.toy import ToyEngine
from presto.predictor.features import feature_matrix, label_of, logged_acceptance
from presto.predictor.hotload import load_predictor
from presto.prefetch.allocation import squared_row_steps
from presto.prefetch.predictive import CallCostModel, PredictiveTraversal
from presto.prefetch.tree import node_features
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.randomness import ChainKey
from tests.conftest import write_toy_table
from tests.test_predictive_traversal import FixedCost, kernel_for, write_predictor

DEPTHS = 8


class LinearCost(CallCostModel):
    """A call-cost model with all four coefficients set: t = a + b tokens + c longest + d pairs."""

    def __init__(self, a: float, b: float, c: float, d: float) -> None:
        super().__init__()
        self.coef = np.array([a, b, c, d], dtype=np.float64)

    def observe(self, tokens, longest, seconds, pairs=None):
        return None


def planning_root(tmp_path: Path, sampler: str, seed: int = 0, table_seed: int = 4):
    """A state three transitions into a toy chain, and the decision inputs of the depths below it."""
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=table_seed))
    kernel = kernel_for(sampler)
    key = ChainKey(seed, 0, 0)
    root, _ = run_chain(kernel, engine, SequentialStepper(), [], key, BlockSchedule(16, 16, 3))

    def inputs(depth: int):
        return key.decision(0, 3 + depth)

    return kernel, root, inputs


def enumerated_cut_level_reach(cuts, length, h) -> np.ndarray:
    """P(the walk decides depth d) by enumerating every accept/reject path (no repeats of the root's suffix).

    A path's state is (node cut m, agreement L, accepts a): it decides depth d when c_d <= L; an
    accept moves to (c_d, c_d, a + 1), a reject keeps it; ``h(d, m, a)`` is P(accept).
    """
    reach = np.zeros(len(cuts))
    for pattern in itertools.product((True, False), repeat=len(cuts)):
        p, m, agree, a = 1.0, length, length, 0
        for d, accepted in enumerate(pattern):
            if cuts[d] > agree:
                break
            # Each path of d decisions is counted once: by the pattern whose entries from d on are all True.
            if all(pattern[d:]):
                reach[d] += p
            hh = h(d, m, a)
            if accepted:
                p, m, agree, a = p * hh, cuts[d], cuts[d], a + 1
            else:
                p *= 1.0 - hh
    return reach


# --- predictive.py: the realization DP as the rule calls it ------------------------------------


def test_without_a_predictor_multitry_plans_on_the_cut_level_walk_at_one_half(tmp_path):
    """P20 (h = 0.4 instead of 1/2 without a predictor), P2 (MultiTryMH's candidates, drawn at
    other temperatures, credited with repeats of the root's suffix from its stored log q): the
    reach of a MultiTryMH plan without a predictor is the cut-level walk with h = 1/2."""
    kernel, root, inputs = planning_root(tmp_path, "multitry")
    traversal = PredictiveTraversal(None, True, FixedCost(1.0, 0.1))
    traversal.plan(kernel, root, inputs, DEPTHS, DEPTHS)
    plan = traversal.last_plan
    cuts = [kernel.cut(root, inputs(d)) for d in range(DEPTHS)]
    assert plan["h_root"] == 0.5
    expected = enumerated_cut_level_reach(cuts, root.length, lambda d, m, a: 0.5)
    assert 0 < expected[-1] < expected[0] == 1.0  # the root's walk can stop on the way: a real test
    np.testing.assert_allclose(plan["realize_raw"], expected, atol=1e-12)


def test_powermh_repeats_only_add_reach_to_the_cut_level_walk(tmp_path):
    """P3 (repeats never credited) and the law the repeats obey: a proposal that repeats the root's
    tokens keeps more depths feasible, never fewer, so the PowerMH reach is at least the cut-level
    walk's, and at a low proposal temperature (alpha = 4) strictly more somewhere."""
    kernel, root, inputs = planning_root(tmp_path, "powermh")
    traversal = PredictiveTraversal(None, True, FixedCost(1.0, 0.1))
    traversal.plan(kernel, root, inputs, DEPTHS, DEPTHS)
    cuts = [kernel.cut(root, inputs(d)) for d in range(DEPTHS)]
    bound = enumerated_cut_level_reach(cuts, root.length, lambda d, m, a: 0.5)
    realize = np.asarray(traversal.last_plan["realize_raw"])
    assert np.all(realize >= bound - 1e-12) and np.any(realize > bound + 1e-3)


@pytest.mark.parametrize("sampler", ["multitry", "powermh"])
def test_a_path_dependent_predictor_plans_with_each_paths_own_features(tmp_path, sampler):
    """P5 (path_dependent forced off: every state featurized as the root's, m = T and a = 0),
    P22 (node cut and accepts swapped in the features): the reach equals the enumeration of every
    accept/reject path with the predictor's h on that path's (node cut, accepts). PowerMH's root
    gets a log q that rules out repeats of its suffix, so its walk is the cut-level one too."""
    import dataclasses

    write_predictor(
        tmp_path / "path.ckpt",
        [0.0, 0.0, 0.0],
        [[-2.0, 1.5, 0.0], [2.0, -1.5, 0.8], [0.0, 0.0, 0.0]],
        features=("cut_fraction", "parent_cut_fraction", "accepts_on_path"),
    )
    predictor = load_predictor(tmp_path / "path.ckpt")
    kernel, root, inputs = planning_root(tmp_path, sampler)
    if sampler == "powermh":
        root = dataclasses.replace(root, logq=np.full(root.length, -60.0))  # P(repeat) = 0
    traversal = PredictiveTraversal(predictor, True, FixedCost(1.0, 0.1))
    traversal.plan(kernel, root, inputs, DEPTHS, DEPTHS)
    cuts = [kernel.cut(root, inputs(d)) for d in range(DEPTHS)]

    def h(d, m, a):
        row = node_features(root, cuts[d], d, m, a)
        return float(predictor.branch_probability(feature_matrix([row], predictor.feature_names))[0])

    expected = enumerated_cut_level_reach(cuts, root.length, h)
    root_only = enumerated_cut_level_reach(cuts, root.length, lambda d, m, a: h(d, root.length, 0))
    assert np.abs(expected - root_only).max() > 1e-3  # the path features matter here
    np.testing.assert_allclose(traversal.last_plan["realize_raw"], expected, rtol=1e-9, atol=1e-12)


# --- predictive.py: what a plan is predicted to cost -------------------------------------------


def new_rows(kernel, root, inputs, depths: int) -> list[list[int]]:
    """Suffix lengths of the distinct requests of each depth (what the call would generate)."""
    cuts = [kernel.cut(root, inputs(d)) for d in range(depths)]
    return [[r.num_new_tokens for r in set(kernel.requests((), root, cuts[d], inputs(d)))] for d in range(depths)]


def test_a_plans_cost_counts_every_pair_of_rows_it_decodes_together(tmp_path):
    """P9 (the pairs of depths 0..m-2 priced for a plan of m depths), and the pairs term dropped
    from the prediction: with only an intercept and a per-pair cost, a plan of m depths costs
    a + d * squared_row_steps(all rows of depths 0..m-1) (nothing is prepaid: b = c = 0)."""
    kernel, root, inputs = planning_root(tmp_path, "multitry")
    traversal = PredictiveTraversal(None, True, LinearCost(1.0, 0.0, 0.0, 0.01))
    traversal.plan(kernel, root, inputs, DEPTHS, DEPTHS)
    rows = new_rows(kernel, root, inputs, DEPTHS)
    expected = [1.0 + 0.01 * squared_row_steps([n for group in rows[:m] for n in group]) for m in range(1, DEPTHS + 1)]
    np.testing.assert_allclose(traversal.last_plan["costs"], expected, rtol=1e-12)


def test_the_prepaid_credit_prices_a_depths_tokens_and_its_longest_row_apart(tmp_path):
    """P12 (token and step costs swapped in the credit of requests the chain still makes later):
    PowerMH has one row per depth, so its tokens equal its longest row and the swap is invisible;
    a MultiTryMH depth has 2M - 1 rows. Credit of depth j: (usable - realize)[j] times
    (b * tokens of depth j + c * longest row of depth j)."""
    kernel, root, inputs = planning_root(tmp_path, "multitry")
    b, c = 0.1, 1.0
    traversal = PredictiveTraversal(None, True, LinearCost(1.0, b, c, 0.0))
    traversal.plan(kernel, root, inputs, DEPTHS, DEPTHS)
    plan = traversal.last_plan
    rows = new_rows(kernel, root, inputs, DEPTHS)
    later = np.asarray(plan["usable"]) - np.asarray(plan["realize_raw"])
    assert later.max() > 0.1  # some request is left undecided but still needed later
    tokens, longest = np.array([sum(g) for g in rows], float), np.array([max(g) for g in rows], float)
    assert np.any(tokens != longest)  # several rows per depth: tokens and steps differ
    prepaid = np.cumsum(later * (b * tokens + c * longest))
    np.testing.assert_allclose(plan["prepaid"], prepaid, rtol=1e-12)
    raw = 1.0 + b * np.cumsum(tokens) + c * np.maximum.accumulate(longest)
    np.testing.assert_allclose(plan["costs"], raw - prepaid, rtol=1e-12)


def test_the_warm_up_row_budget_doubles_with_every_measured_call(tmp_path):
    """P16 (the warm-up budget never doubles): before the cost model predicts, a PowerMH plan (one
    new row per depth) carries warmup_rows * 2**k depths after k measured calls."""
    kernel, root, inputs = planning_root(tmp_path, "powermh")
    traversal = PredictiveTraversal(None, True, CallCostModel(min_calls=4), warmup_rows=2)
    depths = []
    for calls in range(4):
        traversal.plan(kernel, root, inputs, 12, 12)
        assert traversal.last_plan["warmup"]
        depths.append(traversal.last_plan["depths"])
        traversal.observe_round(1)
        traversal.observe_call({"generated_tokens": 40 + calls, "longest_suffix": 9, "call_time_s": 0.5})
    assert depths == [2, 4, 8, 12]
    traversal.plan(kernel, root, inputs, 12, 12)
    assert not traversal.last_plan["warmup"]  # min_calls measured: the cost model predicts


def test_the_reach_calibration_is_fitted_on_the_raw_predictions_it_is_applied_to(tmp_path):
    """P17 (a round's walk carries the calibrated reach, so once gamma != 1 the exponent is fitted
    on already-calibrated numbers and then applied to raw ones again). P26 (a round judged on
    depths it did not request): without states, only the requested depths are outcomes."""
    kernel, root, inputs = planning_root(tmp_path, "multitry")
    traversal = PredictiveTraversal(None, True, FixedCost(1.0, 0.05))
    traversal.reach_calibration.gamma = 0.5
    traversal.plan(kernel, root, inputs, DEPTHS, DEPTHS)
    plan = traversal.last_plan
    raw, calibrated = np.asarray(plan["realize_raw"]), np.asarray(plan["realize"])
    np.testing.assert_allclose(calibrated, raw**0.5)
    requested = raw[: plan["depths"]]
    assert 1 < plan["depths"] < DEPTHS and np.any((requested > 0) & (requested < 1))  # gamma changes them
    traversal.observe_round(plan["depths"])  # no states: the requested depths are all it judges
    assert [p for p, _ in traversal.reach_calibration.pairs] == [p for p in requested if 0 < p < 1]


def test_a_tie_in_transitions_per_second_goes_to_the_longer_plan():
    """AL12 (ties to the shorter plan): depths the walk will not decide and that cost nothing (their
    proposals reused) leave the rate unchanged; the documented rule takes the larger m, and a
    near-tie within rounding (1e-9 relative) is a tie."""
    from presto.prefetch.allocation import best_depth_count

    assert best_depth_count(np.array([1.0, 0.0, 0.0]), np.array([2.0, 2.0, 2.0])) == 3
    assert best_depth_count(np.array([1.0, 0.5, 0.0, 0.0]), np.array([1.0, 1.5, 1.5, 1.6])) == 3
    assert best_depth_count(np.array([1.0, 1.0]), np.array([1.0, 2.0 * (1 + 1e-12)])) == 2
    assert best_depth_count(np.array([1.0, 1.0]), np.array([1.0, 2.2])) == 1


# --- predictor/features.py ---------------------------------------------------------------------


def test_feature_columns_follow_the_names_asked_for():
    """F7 (columns written in reverse): column j is the feature names[j], whatever the dict order;
    a served predictor standardizes and weighs its columns by name order."""
    rows = [{"b": 2.0, "a": 1.0, "c": 3.0}, {"a": -1.0, "c": 0.5, "b": 7.0}]
    np.testing.assert_array_equal(feature_matrix(rows, ["c", "a", "b"]), [[3.0, 1.0, 2.0], [0.5, -1.0, 7.0]])
    np.testing.assert_array_equal(feature_matrix(rows, ["b"]), [[2.0], [7.0]])


@pytest.mark.parametrize("epsilon", [0.0, 0.5, 0.7, -0.1, math.nan])
def test_epsilon_outside_the_open_half_interval_is_refused(epsilon):
    """F6 (epsilon = 1/2 admitted): at 1/2 "A <= eps" and "A >= 1 - eps" meet, the uncertain class is
    empty and A = 1/2 is called a certain reject; eq. 10 needs eps in (0, 1/2)."""
    with pytest.raises(ValueError, match="epsilon"):
        label_of(math.log(0.3), epsilon)
    assert label_of(math.log(0.5), 0.49) == 2  # just inside: A = 1/2 is uncertain


def test_an_acceptance_is_a_probability_even_from_a_positive_log():
    """F4 (log A not clipped at 0): A = min(1, exp(log A)), so the reach weights of a hand-edited or
    foreign trees.jsonl with log A > 0 stay probabilities (a reject child's 1 - A would be < 0)."""
    from presto.predictor.data import reaching_probabilities

    assert logged_acceptance(0.4) == 1.0 and logged_acceptance(None) == 0.0
    assert logged_acceptance(math.log(0.25)) == pytest.approx(0.25)
    nodes = [
        {"id": 0, "parent": None, "branch": "root", "log_accept": 0.4},
        {"id": 1, "parent": 0, "branch": "accept", "log_accept": math.log(0.5)},
        {"id": 2, "parent": 0, "branch": "reject", "log_accept": None},
        {"id": 3, "parent": 1, "branch": "reject", "log_accept": None},
    ]
    assert reaching_probabilities(nodes) == {0: 1.0, 1: 1.0, 2: 0.0, 3: 0.5}


def test_the_first_plan_of_a_swapped_in_model_is_not_calibrated_by_the_old_ones_exponent(tmp_path):
    """P52 (the calibration switched to the new model only after applying the old one's gamma):
    the first round a retrained checkpoint plans uses its raw reach (gamma = 1)."""
    from presto.prefetch.predictive import ReachCalibration

    kernel, root, inputs = planning_root(tmp_path, "multitry")
    calibration = ReachCalibration()
    calibration.use("the model before")
    calibration.gamma = 0.5  # what the old model's rounds had fitted
    traversal = PredictiveTraversal(None, True, FixedCost(1.0, 0.05), calibration)
    traversal.plan(kernel, root, inputs, DEPTHS, DEPTHS)
    plan = traversal.last_plan
    assert plan["reach_gamma"] == 1.0 and calibration.model is None
    assert np.any((np.asarray(plan["realize_raw"]) > 0) & (np.asarray(plan["realize_raw"]) < 1))
    np.testing.assert_array_equal(plan["realize"], plan["realize_raw"])


def test_the_reach_calibration_waits_for_min_pairs_outcomes():
    """P40 (min_pairs ignored: gamma fitted from the first outcome): fewer than ``min_pairs``
    fractional outcomes leave gamma = 1; the ``min_pairs``-th fits it. Depth 0 (p = 1) is no outcome."""
    from presto.prefetch.predictive import ReachCalibration

    calibration = ReachCalibration(min_pairs=6)
    predicted = [1.0, 0.9, 0.8, 0.7]  # three outcomes a round, all reached: reality beats the prediction
    calibration.observe(predicted, 4)
    assert len(calibration.pairs) == 3 and calibration.gamma == 1.0
    calibration.observe(predicted[:3], 4)
    assert len(calibration.pairs) == 5 and calibration.gamma == 1.0
    calibration.observe(predicted[:2], 4)
    assert len(calibration.pairs) == 6 and calibration.gamma < 1.0


def test_the_rule_fits_its_call_cost_law_to_the_calls_it_is_told_about():
    """P30 (a call's generated tokens and longest suffix swapped on the way to the cost model):
    calls whose time follows t = 0.2 + 0.001 tokens + 0.02 longest + 1e-5 pairs, reported as the
    PrefetchStepper reports them, give a model that predicts that law for new calls."""
    traversal = PredictiveTraversal(None, True, CallCostModel(min_calls=3, prior_calls=0.0))
    rng = np.random.default_rng(3)

    def seconds(tokens, longest, pairs):
        return 0.2 + 0.001 * tokens + 0.02 * longest + 1e-5 * pairs

    for _ in range(60):
        lengths = rng.integers(1, 60, size=int(rng.integers(1, 12))).tolist()
        tokens, longest, pairs = sum(lengths), max(lengths), squared_row_steps(lengths)
        traversal.observe_call(
            {
                "call_time_s": seconds(tokens, longest, pairs),
                "generated_tokens": tokens,
                "unique_requests": len(lengths),
                "longest_suffix": longest,
                "row_pairs": pairs,
            }
        )
    lengths = [50, 5, 5, 5, 5, 5, 5, 5]
    tokens, longest, pairs = sum(lengths), max(lengths), squared_row_steps(lengths)
    predicted = traversal.cost_model.predict(np.array([tokens]), np.array([longest]), np.array([pairs]))[0]
    assert predicted == pytest.approx(seconds(tokens, longest, pairs), rel=1e-3)
    assert traversal.cost_model.token_cost == pytest.approx(0.001, rel=1e-3)
    assert traversal.cost_model.step_cost == pytest.approx(0.02, rel=1e-3)


# --- predictor/hotload.py: the served forward pass ---------------------------------------------


def test_a_predictor_sure_of_a_class_by_a_thousand_logits_is_still_a_distribution(tmp_path):
    """H6 (softmax shifted by the smallest logit instead of the largest): exp overflows and the
    class probabilities come out NaN; a confident model must give h_hat = 0 or 1 (eq. 14)."""
    path = write_predictor(tmp_path / "sure.ckpt", [0.0, 0.0, 0.0], [[-900.0], [900.0], [0.0]])
    predictor = load_predictor(path)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        p = predictor.predict_proba(np.array([[-1.0], [1.0]]))
    np.testing.assert_allclose(p, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    np.testing.assert_allclose(predictor.branch_probability(np.array([[-1.0], [1.0]])), [0.0, 1.0])


def test_a_deep_mlp_is_served_with_its_layers_in_network_order(tmp_path):
    """H7 (layers ordered by their key as text: net.10 before net.2): an MLP of five hidden layers
    (Linear modules net.0, net.2, ..., net.10) is served as the same function torch computes."""
    import torch

    from presto.predictor.hotload import CHECKPOINT_FORMAT

    torch.manual_seed(0)
    widths = [2, 7, 6, 5, 4, 3]
    layers: list[torch.nn.Module] = []
    for i, o in itertools.pairwise(widths):
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(widths[-1], 3))
    net = torch.nn.Sequential(*layers).double()
    mean, std = torch.tensor([0.3, -1.0]), torch.tensor([2.0, 0.5])
    state = {f"net.{k}": v.float() for k, v in net.state_dict().items()}
    checkpoint = {
        "state_dict": {"feature_mean": mean, "feature_std": std, **state},
        "hyper_parameters": {
            "feature_names": ["cut_fraction", "depth"],
            "hidden": widths[1:],
            "classes": ["reject", "accept", "uncertain"],
            "epsilon": 0.01,
            "checkpoint_format": CHECKPOINT_FORMAT,
        },
    }
    torch.save(checkpoint, tmp_path / "deep.ckpt")
    predictor = load_predictor(tmp_path / "deep.ckpt")
    x = np.random.default_rng(0).normal(size=(16, 2))
    with torch.no_grad():
        reference = torch.softmax(
            net(torch.from_numpy((x - mean.double().numpy()) / std.double().numpy())), dim=1
        ).numpy()
    np.testing.assert_allclose(predictor.predict_proba(x), reference, rtol=1e-5, atol=1e-7)


def test_without_a_predictor_option_the_shipped_predictor_plans():
    """P46 (no ``predictor`` key read as null): traversal.predictor defaults to the sampler's shipped checkpoint."""
    from presto.predictor import default_checkpoint

    served = PredictiveTraversal.from_options({}, "entropycut").current_predictor()
    assert served is not None and served.fingerprint == load_predictor(default_checkpoint("entropycut")).fingerprint


def plain_checkpoint(std: list[float], outputs: int = 3) -> dict:
    import torch

    from presto.predictor.hotload import CHECKPOINT_FORMAT

    return {
        "state_dict": {
            "feature_mean": torch.zeros(len(std)),
            "feature_std": torch.tensor(std),
            "net.0.weight": torch.ones(outputs, len(std)),
            "net.0.bias": torch.zeros(outputs),
        },
        "hyper_parameters": {
            "feature_names": ["cut_fraction", "depth"][: len(std)],
            "hidden": [],
            "classes": ["reject", "accept", "uncertain"],
            "epsilon": 0.01,
            "checkpoint_format": CHECKPOINT_FORMAT,
        },
    }


@pytest.mark.parametrize(("std", "outputs"), [([1.0, 0.0], 3), ([1.0, -2.0], 3), ([1.0, 1.0], 4), ([1.0, 1.0], 2)])
def test_a_checkpoint_that_cannot_give_three_class_probabilities_is_refused(tmp_path, std, outputs):
    """H8 (a zero feature std admitted: every standardized value inf or NaN), H17 (any number of
    outputs admitted: a 4-output softmax served as if its first three were the classes)."""
    import torch

    from presto.predictor.hotload import PredictorError

    torch.save(plain_checkpoint(std, outputs), tmp_path / "p.ckpt")
    with pytest.raises(PredictorError):
        load_predictor(tmp_path / "p.ckpt")
    torch.save(plain_checkpoint([1.0, 1.0]), tmp_path / "good.ckpt")
    assert load_predictor(tmp_path / "good.ckpt").predict_proba(np.ones((1, 2))).shape == (1, 3)


def test_a_file_written_with_an_old_mtime_is_watched_by_its_ctime(tmp_path, monkeypatch):
    """H11 (the racy window judged by the mtime): a checkpoint copied with its mtime restored to
    long ago (cp -p, rsync -t) was written just now; a second in-place write within the same
    timestamp tick changes no stat field, so the content must still be compared."""
    import os

    from presto.predictor import hotload
    from presto.predictor.hotload import HotPredictor

    first = write_predictor(tmp_path / "first.ckpt", [4.0, -4.0, 0.0])
    second = write_predictor(tmp_path / "second.ckpt", [-4.0, 4.0, 0.0])
    live = tmp_path / "live.ckpt"
    live.write_bytes(first.read_bytes())
    long_ago = os.stat(live).st_ctime_ns - 10**13
    os.utime(live, ns=(long_ago, long_ago))
    monkeypatch.setattr(hotload, "_now_ns", lambda: os.stat(live).st_ctime_ns)  # read right after the write
    hot = HotPredictor(live)
    frozen = hot._stat()
    monkeypatch.setattr(HotPredictor, "_stat", lambda self: frozen)  # the next write leaves every stat field
    assert hot.current().fingerprint == load_predictor(first).fingerprint
    with open(live, "r+b") as handle:
        handle.write(second.read_bytes())
    assert hot.current().fingerprint == load_predictor(second).fingerprint


def test_a_checkpoint_with_its_classes_in_another_order_is_refused(tmp_path):
    """H18 (classes compared as a set): a model whose outputs are (accept, reject, uncertain) would be
    served as (reject, accept, uncertain), turning h_hat into 1 - h_hat."""
    import torch

    from presto.predictor.hotload import PredictorError

    checkpoint = plain_checkpoint([1.0, 1.0])
    checkpoint["hyper_parameters"]["classes"] = ["accept", "reject", "uncertain"]
    torch.save(checkpoint, tmp_path / "p.ckpt")
    with pytest.raises(PredictorError, match="classes"):
        load_predictor(tmp_path / "p.ckpt")


def test_a_failed_read_of_an_unchanged_young_file_keeps_watching_its_content(tmp_path, monkeypatch):
    """H20 (a read failure of the file as last seen taken for a new unreadable file): it warned, and
    remembered the file as settled, so a rewrite in place within the same timestamp tick was missed.
    A transient failure on a file whose stat fields did not change keeps the predictor silently."""
    import os
    import warnings

    from presto.predictor import hotload
    from presto.predictor.hotload import HotPredictor, PredictorError

    first = write_predictor(tmp_path / "first.ckpt", [4.0, -4.0, 0.0])
    second = write_predictor(tmp_path / "second.ckpt", [-4.0, 4.0, 0.0])
    live = tmp_path / "live.ckpt"
    live.write_bytes(first.read_bytes())
    monkeypatch.setattr(hotload, "_now_ns", lambda: os.stat(live).st_ctime_ns)  # young: within the tick
    hot = HotPredictor(live)
    frozen = hot._stat()
    monkeypatch.setattr(HotPredictor, "_stat", lambda self: frozen)
    read = hotload._read_bytes
    failures = [PredictorError("transient")]

    def flaky(path, *args):
        if failures:
            raise failures.pop()
        return read(path, *args)

    monkeypatch.setattr(hotload, "_read_bytes", flaky)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hot.current().fingerprint == load_predictor(first).fingerprint
    with open(live, "r+b") as handle:
        handle.write(second.read_bytes())
    assert hot.current().fingerprint == load_predictor(second).fingerprint


# --- predictor/module.py: the objective the classifier is fitted to ----------------------------


def paper_objective(module, x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float):
    """The paper's objective written out: weighted mean log loss + l2 / (2 n) * sum of squared
    weights (biases excluded), on features standardized by the module's own mean and std."""
    import torch

    z = (torch.as_tensor(x, dtype=torch.float64) - module.feature_mean.double()) / module.feature_std.double()
    linears = [m for m in module.net if isinstance(m, torch.nn.Linear)]
    params = [
        (m.weight.detach().double().clone().requires_grad_(), m.bias.detach().double().clone().requires_grad_())
        for m in linears
    ]
    for i, (weight, bias) in enumerate(params):
        z = z @ weight.T + bias
        if i + 1 < len(params):
            z = torch.relu(z)
    log_loss = torch.nn.functional.cross_entropy(z, torch.as_tensor(y), reduction="none")
    weights = torch.as_tensor(w / w.mean(), dtype=torch.float64)
    penalty = sum((weight**2).sum() for weight, _ in params) * l2 / (2.0 * len(y))
    objective = (weights * log_loss).mean() + penalty
    objective.backward()
    return objective, params


@pytest.mark.parametrize("val_fraction", [0.0, 0.25])
def test_the_logistic_classifier_is_fitted_to_the_optimum_of_the_papers_objective(val_fraction):
    """MO1 (biases penalized), MO2 (l2 / n instead of l2 / (2 n)), MO3 (l2 / 2, not divided by n),
    MO4 (example weights ignored), MO6 (features not divided by their std), and with prompts held
    out for early stopping MO7 (weights scaled to mean 1 over all examples, not the training ones)
    and MO8 (n counting the held-out examples): the L-BFGS fit of the logistic model is the
    minimum of the convex objective on its training examples, so its gradient vanishes there."""
    from presto.predictor.module import fit_classifier, validation_split
    from presto.predictor.train import ModelSettings

    rng = np.random.default_rng(0)
    n = 120
    x = np.column_stack([rng.normal(0.5, 0.2, n), rng.normal(8.0, 3.0, n)])
    score = 4.0 * (x[:, 0] - 0.5) + 0.3 * (x[:, 1] - 8.0) + rng.normal(0, 1.0, n)
    y = np.where(score < -0.5, 0, np.where(score > 0.5, 1, 2)).astype(np.int64)
    groups = np.repeat([f"p{i}" for i in range(8)], n // 8)
    heavy = np.isin(np.arange(n), validation_split(n, 0.25, 0, groups)[0])
    w = rng.uniform(0.2, 3.0, n) * np.where(heavy, 4.0, 1.0)  # the prompts held out weigh more
    l2 = 5.0  # strong enough that every penalty mutant moves the optimum
    settings = ModelSettings("logistic", (), l2, "lbfgs", 1.0, max_epochs=3, val_fraction=val_fraction)
    module = fit_classifier(x, y, ("cut_fraction", "depth"), settings, seed=0, weights=w, groups=groups)
    np.testing.assert_allclose(module.feature_std.numpy(), x.std(axis=0), rtol=1e-5)
    np.testing.assert_allclose(module.feature_mean.numpy(), x.mean(axis=0), rtol=1e-5)  # MO14
    val, train, made = validation_split(n, val_fraction, 0, groups)
    assert len(val) == (0 if val_fraction == 0 else 30) and made == module.validation
    if val_fraction:
        assert w[val].mean() > 1.5 * w[train].mean()  # the training weights' mean is not the overall one
    _, params = paper_objective(module, x[train], y[train], w[train], l2)
    gradient = max(float(g.abs().max()) for pair in params for g in (pair[0].grad, pair[1].grad))
    assert gradient < 1e-4
    # Not a vacuous optimum: the penalty matters at this l2 (its gradient alone is far from 0).
    weight = params[0][0].detach()
    assert float((weight * l2 / len(train)).abs().max()) > 1e-2


def test_the_checkpoint_carries_the_epsilon_and_classes_it_was_trained_for(tmp_path):
    """MO9 (epsilon not handed to the module: every checkpoint said 0.01): a model trained on the
    classes of epsilon = 0.05 is served as such, with the class order and the same probabilities."""
    from presto.predictor.features import CLASSES
    from presto.predictor.module import fit_classifier, save_checkpoint
    from presto.predictor.train import ModelSettings

    rng = np.random.default_rng(1)
    x = rng.random((60, 1))
    y = np.minimum((x[:, 0] * 3).astype(np.int64), 2)
    settings = ModelSettings("logistic", (), 1.0, "lbfgs", 1.0, max_epochs=2)
    module = fit_classifier(x, y, ("cut_fraction",), settings, seed=0, epsilon=0.05)
    served = load_predictor(save_checkpoint(module, tmp_path / "p.ckpt"))
    assert served.epsilon == 0.05 and module.hparams.epsilon == 0.05
    assert tuple(module.hparams.classes) == CLASSES and served.feature_names == ("cut_fraction",)
    np.testing.assert_allclose(served.predict_proba(x), module.predict_proba(x), rtol=1e-5, atol=1e-6)


# --- predictor/data.py: examples from hand-written trees ----------------------------------------


def write_run(run_dir: Path, records: list[dict], config: dict | None) -> Path:
    import json

    import yaml

    run_dir.mkdir(parents=True)
    (run_dir / "trees.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if config is not None:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def tree_node(i, parent, branch, log_accept, cut=3, feasible=True) -> dict:
    return {
        "id": i,
        "parent": parent,
        "branch": branch,
        "cut": cut,
        "feasible": feasible,
        "log_accept": log_accept,
        "features": {"cut_fraction": 0.1 * (i + 1), "depth": 0 if parent is None else 1},
    }


def hand_tree() -> list[dict]:
    """Root (A = 0.8); its accept child (A = 0.5) and reject child (A = 0.1); below the accept
    child, an infeasible accept child (no example) and a feasible reject child."""
    return [
        tree_node(0, None, "root", math.log(0.8)),
        tree_node(1, 0, "accept", math.log(0.5)),
        tree_node(2, 0, "reject", math.log(0.1)),
        tree_node(3, 1, "accept", None, feasible=False),
        tree_node(4, 1, "reject", None),
    ]


def setting(seed: int = 0, num_prompts: int = 5) -> dict:
    return {
        "seed": seed,
        "engine": {"name": "toy"},
        "model": {"name": "toy"},
        "dataset": {"name": "toy", "num_prompts": num_prompts},
        "sampler": {"name": "powermh", "alpha": 4.0},
        "traversal": {"name": "bfs"},
    }


def test_reach_weighting_weighs_each_example_by_the_walks_chance_to_visit_it(tmp_path):
    """D8 (reach weighting ignored: every example weighs 1), D2 (a node's weight not multiplied by
    its parent's): with ``weighting="reach"`` a node's weight is the product of A (accept) or
    1 - A (reject) along its path."""
    from presto.predictor.data import collect_examples

    record = {"prompt_id": "q", "chain": 0, "stage": 0, "transition": 0, "nodes": hand_tree()}
    run = write_run(tmp_path / "run", [record], setting())
    reach = collect_examples([run], ("cut_fraction",), 0.01, weighting="reach")
    np.testing.assert_allclose(reach.features[:, 0], [0.1, 0.2, 0.3, 0.5])  # the feasible nodes, in order
    np.testing.assert_allclose(reach.weights, [1.0, 0.8, 0.2, 0.8 * 0.5])
    np.testing.assert_array_equal(reach.labels, [2, 2, 2, 0])  # A = 0.8, 0.5, 0.1 uncertain; A = 0 reject
    # D11 (class shares unweighted): the shares weigh the examples, the counts count them once.
    assert reach.class_counts() == {"reject": 1, "accept": 0, "uncertain": 3}
    shares = reach.class_shares()
    assert shares["reject"] == pytest.approx(0.4 / 2.4) and shares["uncertain"] == pytest.approx(2.0 / 2.4)
    uniform = collect_examples([run], ("cut_fraction",), 0.01)
    np.testing.assert_array_equal(uniform.sample_weights, np.ones(4))
    assert uniform.class_shares() == {"reject": 0.25, "accept": 0.0, "uncertain": 0.75}


def test_runs_that_differ_only_in_how_many_prompts_they_ran_share_their_decisions(tmp_path):
    """D9 (dataset.num_prompts counted as part of the setting): a run over 5 prompts and one over
    10 make the same decisions on the prompts they share, so the second run's copies are dropped;
    another seed is another setting."""
    from presto.predictor.data import collect_examples

    record = {"prompt_id": "q", "chain": 0, "stage": 0, "transition": 0, "nodes": hand_tree()}
    five = write_run(tmp_path / "five", [record], setting(num_prompts=5))
    ten = write_run(tmp_path / "ten", [record], setting(num_prompts=10))
    other_seed = write_run(tmp_path / "seed", [record], setting(seed=1))
    pooled = collect_examples([five, ten], ("cut_fraction",), 0.01)
    assert (len(pooled), pooled.duplicates) == (4, 4)
    assert collect_examples([five, other_seed], ("cut_fraction",), 0.01).duplicates == 0


def test_rounds_without_a_transition_are_never_taken_for_copies(tmp_path):
    """D12 (a round's missing transition not checked): trees of an older version name no
    transition, so two rounds of one chain and stage cannot be told apart; nothing is dropped."""
    from presto.predictor.data import collect_examples

    record = {"prompt_id": "q", "chain": 0, "stage": 0, "nodes": hand_tree()}
    first = write_run(tmp_path / "first", [record, record], setting())
    second = write_run(tmp_path / "second", [record], setting())
    pooled = collect_examples([first, second], ("cut_fraction",), 0.01)
    assert (len(pooled), pooled.duplicates) == (12, 0)


def test_a_feature_constant_in_training_does_not_swing_the_served_model():
    """MO13 (a constant feature's std floored at 1e-8 instead of 1): a value unseen in training
    (the logged depth was always 0, the traversal asks at depth 3) was multiplied by 1e8."""
    from presto.predictor.module import fit_classifier
    from presto.predictor.train import ModelSettings

    rng = np.random.default_rng(2)
    x = np.column_stack([rng.random(80), np.zeros(80)])
    y = np.minimum((x[:, 0] * 3).astype(np.int64), 2)
    settings = ModelSettings("logistic", (), 1.0, "lbfgs", 1.0, max_epochs=2)
    module = fit_classifier(x, y, ("cut_fraction", "depth"), settings, seed=0)
    probe = np.array([[0.2, 0.0], [0.5, 0.0], [0.9, 0.0]])
    shifted = probe + np.array([0.0, 3.0])
    np.testing.assert_allclose(module.predict_proba(shifted), module.predict_proba(probe), atol=1e-2)


@pytest.mark.parametrize(
    ("n", "fraction", "groups"), [(20, 0.75, ["a"] * 10 + ["b"] * 10), (2, 0.5, None), (3, 0.5, None)]
)
def test_early_stopping_never_leaves_fewer_than_two_examples_or_no_prompt_to_train_on(n, fraction, groups):
    """MO12 (every prompt may be held out; the split then fell back to nodes of training prompts),
    MO15 (a node split leaving one training example): a split keeps >= 2 training examples, and
    whole prompts are held out while at least one prompt is left to train on."""
    from presto.predictor.module import validation_split

    val, train, made = validation_split(n, fraction, 0, None if groups is None else np.asarray(groups))
    assert len(train) >= 2 and len(val) + len(train) == n
    if groups is not None:
        assert made == {"split": "prompts", "prompts": 1, "nodes": 10}
        assert len({groups[i] for i in train}) == 1
    else:
        assert made["split"] is None and len(val) == 0


def test_early_stopping_returns_the_weights_of_the_best_validation_epoch(validation_losses):
    """MO10 (every epoch taken for the best), MO11 (the best epoch's weights not restored): the
    module returned has the lowest weighted validation loss of all epochs, not the last one's."""
    import torch

    from presto.predictor import module as module_py
    from presto.predictor.train import ModelSettings

    losses = validation_losses
    rng = np.random.default_rng(0)
    groups = np.repeat([f"p{i}" for i in range(10)], 20)
    x = rng.random((200, 1))
    y = rng.integers(0, 3, 200)  # noise: the validation loss rises as the MLP fits its training prompts
    w = rng.uniform(0.5, 2.0, 200)
    settings = ModelSettings("mlp", (16,), 1e-3, "adam", 0.3, max_epochs=12, batch_size=8, val_fraction=0.2, patience=3)
    fitted = module_py.fit_classifier(x, y, ("cut_fraction",), settings, seed=0, weights=w, groups=groups)
    val, _, _ = module_py.validation_split(200, 0.2, 0, groups)
    assert len(losses) >= 2 and min(losses) < losses[-1] - 1e-4  # the last epoch is not the best
    with torch.no_grad():
        logits = fitted(torch.as_tensor(x[val], dtype=torch.float32))
        returned = np.average(
            torch.nn.functional.cross_entropy(logits, torch.as_tensor(y[val]), reduction="none").numpy(),
            weights=w[val],
        )
    assert returned == pytest.approx(min(losses), rel=1e-5)


# --- Survivors judged equivalent (no test can or should kill them) -------------------------------
#
# P4  (path_dependent forced on): for a predictor without path features the branch gives every
#     state of a depth the same h, so splitting states by (node cut, accepts) only costs time;
#     the marginal reach and usable probabilities are the same sums.
# P21 (the non-path branch featurizes node cut = cut instead of T): only PATH_FEATURES read the
#     node cut or the accepts, and this branch serves predictors that use none of them.
# P25 (walks of every chain followed, not only this round's): the runner drives one chain at a
#     time, and a block's walks all end within it (a walk's depths stop at the block's last
#     transition, which the block's last round reaches), so _pending holds no other chain's walk.
# P28 (depth 0 also put to walk_decides): the state before depth 0 is the root, which shares its
#     own prefix and, for a state-dependent cut law, draws cut 0 from itself.
# CV1 (the clairvoyant also tests depth 0): the same argument on the recorded trajectory.
# P49 (a traversal built without a cost model gets min_calls=1): from_options, the only builder
#     in src/ and scripts/, always passes the model built from the options.
# D3  (a node whose parent is not logged weighs 1): log_tree logs nodes in BFS order and logs no
#     node below an infeasible or unlogged one, so every logged node's parent comes first.
# D16 (a node's place without its parent's cut): within one setting and place, the cut of
#     depth d is the round's, a function of the root (the same state: exactness) and of the
#     decision inputs of (stage, transition + d); the branch path alone already fixes it.
# MO5 (val_loss the plain mean of w * loss): it differs from the weighted mean by the held-out
#     examples' mean scaled weight, the same every epoch; EarlyStopping (min_delta 0) and
#     _KeepBest compare epochs only, so the same epoch is kept and the same weights returned.
# MO17 (hyperparameters saved without _plain): fit_classifier hands the module plain lists,
#     floats and strings already, and torch.load(weights_only=True) reads the tuple defaults.

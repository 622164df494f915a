"""traversal=predictive: exact for every sampler, BFS when not cost-aware, hot-loads its predictor."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from presto.config import ConfigError, SamplerSettings
from presto.engines.toy import ToyEngine
from presto.predictor import SHIPPED_SAMPLERS, default_checkpoint
from presto.predictor.features import feature_matrix
from presto.predictor.hotload import CHECKPOINT_FORMAT, HotPredictor, PredictorError, load_predictor
from presto.prefetch.allocation import warmup_depth_count
from presto.prefetch.predictive import CallCostModel, PredictiveTraversal, ReachCalibration
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import TRAVERSALS, BreadthFirst
from presto.prefetch.tree import node_features
from presto.samplers import build_kernel
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.randomness import ChainKey
from tests.conftest import run_cli, write_toy_table


def write_predictor(path: Path, bias: list[float], slope: list[float] | None = None, features=("cut_fraction",)):
    """A logistic checkpoint in the trained format, written atomically (no Lightning needed)."""
    import torch

    width = len(features)
    weight = torch.zeros(3, width) if slope is None else torch.tensor(slope, dtype=torch.float32).reshape(3, width)
    checkpoint = {
        "state_dict": {
            "feature_mean": torch.zeros(width),
            "feature_std": torch.ones(width),
            "net.0.weight": weight,
            "net.0.bias": torch.tensor(bias, dtype=torch.float32),
        },
        "hyper_parameters": {
            "feature_names": list(features),
            "hidden": [],
            "classes": ["reject", "accept", "uncertain"],
            "epsilon": 0.01,
            "checkpoint_format": CHECKPOINT_FORMAT,
        },
        "pytorch-lightning_version": "2.6.6",
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(checkpoint, tmp)
    os.replace(tmp, path)
    return path


class FixedCost(CallCostModel):
    """A call-cost model with set coefficients (toy-engine timings are noise)."""

    def __init__(self, a: float, b: float, c: float = 0.0) -> None:
        super().__init__()
        self.coef = np.array([a, b, c])

    def observe(self, tokens, longest, seconds, pairs=None):
        return None


def kernels():
    names = ["powermh"]
    for name, module in (("entropycut", "entropycut"), ("multitry", "multitry")):
        try:
            __import__(f"presto.samplers.{module}")
            names.append(name)
        except ImportError:
            pass
    return names


def kernel_for(name: str, alpha: float = 4.0):
    options = {"multitry": {"num_candidates": 2}}.get(name, {})
    return build_kernel(SamplerSettings(name, alpha, 1.0 / alpha, 8, 8, 8, options))


@pytest.fixture(scope="module")
def predictors(tmp_path_factory):
    root = tmp_path_factory.mktemp("predictors")
    return {
        # mostly certain accepts when the cut is late, rejects when early
        "sloped": write_predictor(root / "sloped.ckpt", [0.0, 0.0, 0.0], [[-3.0], [3.0], [0.0]]),
        "rejecting": write_predictor(root / "rejecting.ckpt", [4.0, -4.0, 0.0]),
        "accepting": write_predictor(root / "accepting.ckpt", [-4.0, 4.0, 0.0]),
        "path": write_predictor(
            root / "path.ckpt",
            [0.0, 0.0, 0.0],
            [[-1.0, 0.5, 0.0], [1.0, -0.5, 0.5], [0.0, 0.0, 0.0]],
            features=("cut_fraction", "parent_cut_fraction", "accepts_on_path"),
        ),
    }


@pytest.mark.parametrize("sampler", kernels())
def test_predictive_chains_equal_sequential_chains(tmp_path, predictors, sampler):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=11))
    kernel = kernel_for(sampler)
    schedules = [BlockSchedule(12, 4, 6), BlockSchedule(16, 16, 25)]
    costs = [FixedCost(1.0, 0.02), FixedCost(0.2, 0.05, 0.1), FixedCost(5.0, 0.0)]
    seeds = 12 if sampler == "powermh" else 4
    depth_counts: set[int] = set()
    for schedule in schedules:
        for seed in range(seeds):
            key = ChainKey(seed, prompt=seed % 3, chain=seed % 2)
            reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
            for i, n_pf in enumerate((1, 2, 5, 20)):
                predictor = load_predictor(predictors[("sloped", "path", "rejecting", "accepting")[(seed + i) % 4]])
                traversal = PredictiveTraversal(predictor, cost_model=costs[(seed + i) % 3])
                rounds = []
                stepper = PrefetchStepper(traversal, n_pf, lambda r, t=traversal, out=rounds: out.append(t.last_plan))
                state, trace = run_chain(kernel, engine, stepper, [], key, schedule)
                np.testing.assert_array_equal(state.tokens, reference.tokens)
                assert trace.accepts == reference_trace.accepts
                assert trace.log_accepts == reference_trace.log_accepts  # the same path, bit for bit
                np.testing.assert_array_equal(state.logp0, reference.logp0)
                depth_counts |= {(r["depths"], r["max_depths"]) for r in rounds}
    # The test is only worth something if plans really differ from BFS.
    assert any(depths < most for depths, most in depth_counts)


def test_not_cost_aware_is_bfs(tmp_path, predictors):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=2))
    kernel = kernel_for("powermh")
    schedule = BlockSchedule(16, 16, 30)
    for n_pf in (1, 3, 20):
        plans = {}
        for name, traversal in (
            ("bfs", BreadthFirst()),
            ("predictive", PredictiveTraversal(load_predictor(predictors["sloped"]), False, FixedCost(9.0, 1.0))),
        ):
            seen = []
            before = engine.stats.calls
            run_chain(kernel, engine, PrefetchStepper(traversal, n_pf, seen.append), [], ChainKey(3, 0, 0), schedule)
            plans[name] = ([r["requested_depths"] for r in seen], engine.stats.calls - before)
        assert plans["predictive"] == plans["bfs"]


@pytest.mark.parametrize("sampler", ["powermh", "multitry"])
def test_without_timings_it_warms_up_on_few_rows_then_learns_the_cost(tmp_path, sampler):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=4))
    kernel = kernel_for(sampler)
    traversal = PredictiveTraversal(None, True, CallCostModel(min_calls=3), warmup_rows=4)
    seen, calls = [], []
    original = engine.generate
    engine.generate = lambda batch: calls.append(len(batch)) or original(batch)
    stepper = PrefetchStepper(traversal, 12, lambda r: seen.append((dict(traversal.last_plan), r)))
    run_chain(kernel, engine, stepper, [], ChainKey(0, 0, 0), BlockSchedule(16, 16, 30))
    warmup = [(plan, record) for plan, record in seen if plan["max_depths"] > 1 and plan["costs"] is None]
    assert len(warmup) == 3 and all(plan["warmup"] for plan, _ in warmup)
    for observed, (plan, record) in enumerate(warmup):
        # The longest prefix of depths whose new rows fit in 4, 8, 16 rows (at least depth 0).
        assert plan["depths"] == 1 or record["generated_requests"] <= 4 << observed
    # Not BFS's first call: PowerMH's one row per depth stops at 4 depths of 12, and
    # MultiTryMH's 2M - 1 = 3 rows per depth (M = 2 here) at 1.
    assert warmup[0][0]["max_depths"] == 12
    assert warmup[0][0]["depths"] == {"powermh": 4, "multitry": 1}[sampler]
    assert calls[1] == {"powermh": 4, "multitry": 3}[sampler]  # calls[0]: the block's first tokens
    assert traversal.cost_model.coef is not None and traversal.cost_model.calls >= 3
    assert [plan for plan, _ in seen if plan["max_depths"] > 1][-1]["costs"] is not None


def test_warmup_depth_count_fits_the_doubling_row_budget():
    rows = [7, 7, 7, 7, 7]  # MultiTryMH: 2M - 1 new rows per depth
    assert [warmup_depth_count(rows, calls, first_rows=8) for calls in range(4)] == [1, 2, 4, 5]
    assert [warmup_depth_count([1] * 20, calls, first_rows=8) for calls in range(3)] == [8, 16, 20]
    assert warmup_depth_count([0, 0, 3, 9], 0, first_rows=8) == 3  # reused depths are free
    assert warmup_depth_count([12, 1], 0, first_rows=8) == 1  # depth 0 even when it alone overflows
    with pytest.raises(ValueError):
        warmup_depth_count([], 0)


def test_proposals_an_earlier_round_generated_cost_nothing(tmp_path):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=4))
    kernel = kernel_for("powermh")
    key = ChainKey(0, 0, 0)
    root, _ = run_chain(kernel, engine, SequentialStepper(), [], key, BlockSchedule(16, 16, 3))

    def inputs(depth):
        return key.decision(0, 3 + depth)

    cuts = [kernel.cut(root, inputs(d)) for d in range(6)]
    suffixes = np.array([root.length - cut for cut in cuts], dtype=float)
    traversal = PredictiveTraversal(None, True, FixedCost(1.0, 0.5))
    traversal.plan(kernel, root, inputs, 6, 6)
    np.testing.assert_allclose(traversal.last_plan["costs"], 1.0 + 0.5 * np.cumsum(suffixes))
    reused = {r for d in (0, 2) for r in kernel.requests((), root, cuts[d], inputs(d))}
    traversal.plan(kernel, root, inputs, 6, 6, reusable=reused)
    suffixes[[0, 2]] = 0.0
    np.testing.assert_allclose(traversal.last_plan["costs"], 1.0 + 0.5 * np.cumsum(suffixes))


def test_requests_still_needed_later_are_credited_what_they_save(tmp_path):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=4))
    kernel = kernel_for("powermh")
    key = ChainKey(5, 0, 0)  # a root whose walk may stop before requests the chain still makes later
    root, _ = run_chain(kernel, engine, SequentialStepper(), [], key, BlockSchedule(16, 16, 3))

    def inputs(depth):
        return key.decision(0, 3 + depth)

    suffixes = np.array([root.length - kernel.cut(root, inputs(d)) for d in range(8)], dtype=float)
    traversal = PredictiveTraversal(None, True, FixedCost(1.0, 0.1, 1.0))  # 0.1 s per token, 1 s per decode step
    traversal.plan(kernel, root, inputs, 8, 8)
    plan = traversal.last_plan
    later = np.asarray(plan["usable"]) - np.asarray(plan["realize_raw"])
    assert later.max() > 0.1  # some depth is left undecided but still needed
    prepaid = np.cumsum(later * (0.1 * suffixes + suffixes))
    np.testing.assert_allclose(plan["prepaid"], prepaid)
    raw = 1.0 + 0.1 * np.cumsum(suffixes) + np.maximum.accumulate(suffixes)
    np.testing.assert_allclose(plan["costs"], raw - prepaid)


def test_a_path_dependent_branch_featurizes_each_state_pair_once(tmp_path, predictors):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=4))
    root, _ = run_chain(
        kernel_for("powermh"), engine, SequentialStepper(), [], ChainKey(0, 0, 0), BlockSchedule(16, 16, 3)
    )
    predictor = load_predictor(predictors["path"])
    branch = PredictiveTraversal(predictor).branch_function(root, predictor)
    node_cuts, accepts = np.array([16, 9, 16, 4, 9, 16]), np.array([0, 1, 0, 2, 1, 3])  # repeated pairs
    one_by_one = [
        predictor.branch_probability(
            feature_matrix([node_features(root, 5, 2, int(m), int(a))], predictor.feature_names)
        )[0]
        for m, a in zip(node_cuts, accepts, strict=True)
    ]
    h = branch(2, 5, node_cuts, accepts)
    np.testing.assert_allclose(h, one_by_one, rtol=1e-6)
    assert len(set(np.round(h, 9))) == 4  # the four distinct (node cut, accepts) pairs differ


def test_a_prefetch_round_hands_the_planner_what_the_block_generated(tmp_path):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=4))
    kernel, prompt, seen = kernel_for("powermh"), [1, 2], []

    class Recording(BreadthFirst):
        def plan(self, kernel, root, inputs, depth_cap, budget, reusable=()):
            seen.append(set(reusable))
            return super().plan(kernel, root, inputs, depth_cap, budget, reusable)

    generated = []
    original = engine.generate
    engine.generate = lambda batch: generated.extend(batch) or original(batch)
    run_chain(kernel, engine, PrefetchStepper(Recording(), 3), prompt, ChainKey(1, 0, 0), BlockSchedule(16, 16, 12))
    assert len(seen) > 2 and seen[0] == set()
    relative = {r.prefix[len(prompt) :] for r in generated if r.prefix[: len(prompt)] == tuple(prompt)}
    assert seen[-1] and {r.prefix for r in seen[-1]} <= relative


def test_reach_calibration_recovers_how_much_farther_walks_go():
    rng = np.random.default_rng(0)
    predicted = 0.8 ** np.arange(12)  # the DP's reach probabilities, too pessimistic:
    calibration = ReachCalibration(min_pairs=20)  # the walk continues with probability 0.8 ** 0.5
    np.testing.assert_allclose(calibration.apply(predicted), predicted)  # no data, no change
    for _ in range(400):
        realized = 1
        while realized < len(predicted) and rng.random() < 0.8**0.5:
            realized += 1
        calibration.observe(predicted, realized)
    assert calibration.gamma == pytest.approx(0.5, abs=0.06)
    assert calibration.apply(predicted)[0] == 1.0


def test_predictive_rounds_feed_the_calibration(tmp_path):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=4))
    traversal = PredictiveTraversal(None, True, FixedCost(1.0, 0.01), ReachCalibration(min_pairs=5))
    run_chain(
        kernel_for("powermh"), engine, PrefetchStepper(traversal, 8), [], ChainKey(0, 0, 0), BlockSchedule(16, 16, 150)
    )
    assert len(traversal.reach_calibration.pairs) >= 5 and traversal.reach_calibration.gamma != 1.0
    assert traversal.last_plan["reach_gamma"] > 0


def test_reach_calibration_belongs_to_one_model():
    predicted = 0.8 ** np.arange(8)
    calibration = ReachCalibration(min_pairs=5)
    calibration.use("old")
    for _ in range(10):
        calibration.observe(predicted, 7, "old")
    assert calibration.gamma != 1.0
    calibration.use("new")  # a retrained checkpoint was swapped in
    assert calibration.gamma == 1.0 and not calibration.pairs
    calibration.observe(predicted, 7, "old")  # a round the old model planned: not the new one's data
    assert not calibration.pairs
    calibration.use("new")
    calibration.observe(predicted, 7, "new")
    assert len(calibration.pairs) == 7


def test_a_hot_swapped_predictor_starts_a_fresh_reach_calibration(tmp_path, predictors):
    path = tmp_path / "live.ckpt"
    path.write_bytes(Path(predictors["sloped"]).read_bytes())
    new = load_predictor(predictors["accepting"]).fingerprint
    traversal = PredictiveTraversal(HotPredictor(path), True, FixedCost(1.0, 0.01), ReachCalibration(min_pairs=5))
    plans: list[dict] = []
    swapped_at: list[float] = []

    def on_round(record):
        plans.append(dict(traversal.last_plan))
        gamma = traversal.reach_calibration.gamma
        if not swapped_at and gamma != 1.0:  # the old model's calibration has been fitted: retrain
            swapped_at.append(gamma)
            write_predictor(tmp_path / "next.ckpt", [-4.0, 4.0, 0.0])
            os.replace(tmp_path / "next.ckpt", path)

    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=4))
    kernel, key, schedule = kernel_for("powermh"), ChainKey(0, 0, 0), BlockSchedule(16, 16, 150)
    reference, _ = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
    state, _ = run_chain(kernel, engine, PrefetchStepper(traversal, 8, on_round), [], key, schedule)
    np.testing.assert_array_equal(state.tokens, reference.tokens)  # the planner never changes the chain
    assert swapped_at and swapped_at[0] != 1.0
    first_new = next(plan for plan in plans if plan["predictor"] == new and "reach_gamma" in plan)
    assert first_new["reach_gamma"] == 1.0  # fitted afresh, not on the old model's pairs
    assert traversal.reach_calibration.model == new and traversal.reach_calibration.gamma != swapped_at[0]


def test_cost_model_recovers_a_linear_law_and_leans_on_decode_steps_when_it_cannot():
    model = CallCostModel(min_calls=4, prior_calls=0.5)
    rng = np.random.default_rng(0)
    for _ in range(200):
        tokens, longest = rng.integers(10, 500), rng.integers(5, 64)
        model.observe(tokens, longest, 0.3 + 0.002 * tokens + 0.01 * longest + rng.normal(0, 1e-4))
    np.testing.assert_allclose(model.coef, [0.3, 0.002, 0.01, 0.0], rtol=0.1, atol=2e-3)  # no pairs seen: d = 0
    # BFS-like calls: the longest suffix never varies, so intercept and per-step cost are confounded.
    blind = CallCostModel(min_calls=3)
    for _ in range(20):
        tokens = rng.integers(300, 900)
        blind.observe(tokens, 64, 1.0 + 0.001 * tokens)
    a, _, c, _ = blind.coef
    assert c * 64 > a  # the prior puts the unidentified time into decode steps
    assert blind.predict(np.array([600]), np.array([64]))[0] == pytest.approx(1.6, rel=0.05)


def test_cost_model_prices_mid_width_calls_when_wide_ones_cost_more_per_row():
    """An engine whose per-row step cost grows with the batch (the transformers engine on a CPU):
    7-row and 140-row calls measured, 21-row calls predicted. Without the pairs term the wide
    calls push the fit onto the per-token cost and a 21-row call looks twice as dear as it is."""
    from presto.prefetch.allocation import squared_row_steps

    def seconds(rows: int, length: int) -> float:  # per step: 50 ms + 1 ms a row + 0.05 ms a pair
        return length * (0.05 + 0.001 * rows + 0.00005 * rows**2)

    rng = np.random.default_rng(1)
    full, blind = CallCostModel(min_calls=3), CallCostModel(min_calls=3)
    for rows in [140, 140] + [7, 7, 7, 14] * 10:  # the first BFS calls, then the rule's own narrow ones
        length = int(rng.integers(20, 64))
        lengths = [length] * rows
        measured = seconds(rows, length) * (1 + rng.normal(0, 0.02))
        full.observe(rows * length, length, measured, squared_row_steps(lengths))
        blind.observe(rows * length, length, measured)
    truth = seconds(21, 50)
    with_pairs = full.predict(np.array([21 * 50]), np.array([50]), np.array([squared_row_steps([50] * 21)]))[0]
    without = blind.predict(np.array([21 * 50]), np.array([50]))[0]
    assert with_pairs == pytest.approx(truth, rel=0.2)
    assert without > 1.5 * truth


def test_squared_row_steps_counts_pairs_of_rows_decoding_together():
    from presto.prefetch.allocation import squared_row_steps

    lengths = [5, 3, 3, 1, 0]
    by_step = sum(sum(1 for n in lengths if n > t) ** 2 for t in range(max(lengths)))
    assert squared_row_steps(lengths) == by_step == 36
    assert squared_row_steps([]) == 0.0


def test_hot_load_switches_between_rounds_and_survives_a_corrupted_file(tmp_path, predictors, capsys):
    path = tmp_path / "live.ckpt"
    path.write_bytes(Path(predictors["rejecting"]).read_bytes())
    fingerprints = {name: load_predictor(p).fingerprint for name, p in predictors.items()}
    traversal = PredictiveTraversal(HotPredictor(path), True, FixedCost(1.0, 0.01))
    used: list[str] = []
    h_root: list[float | None] = []

    def on_round(record):
        used.append(traversal.last_plan["predictor"])
        h_root.append(traversal.last_plan.get("h_root"))
        if len(used) == 2:  # a retraining job finished: atomic replacement
            write_predictor(tmp_path / "next.ckpt", [-4.0, 4.0, 0.0])
            os.replace(tmp_path / "next.ckpt", path)
        elif len(used) == 4:  # a broken write: the previous predictor must stay
            path.write_bytes(b"not a checkpoint at all")
        elif len(used) == 6:
            write_predictor(path, [0.0, 0.0, 0.0], [[-3.0], [3.0], [0.0]])

    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=6))
    kernel = kernel_for("powermh")
    key, schedule = ChainKey(2, 1, 0), BlockSchedule(16, 16, 40)
    reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
    with pytest.warns(RuntimeWarning, match="not a readable checkpoint"):
        state, trace = run_chain(kernel, engine, PrefetchStepper(traversal, 2, on_round), [], key, schedule)
    np.testing.assert_array_equal(state.tokens, reference.tokens)
    assert trace.accepts == reference_trace.accepts
    assert trace.log_accepts == reference_trace.log_accepts  # the same path, bit for bit
    assert len(used) >= 8
    assert used[:2] == [fingerprints["rejecting"]] * 2
    assert used[2:6] == [fingerprints["accepting"]] * 4  # from the round after the swap; the garbage is ignored
    assert used[6:] == [fingerprints["sloped"]] * (len(used) - 6)
    assert h_root[1] < 0.01 and h_root[2] > 0.99  # the new predictor is the one that planned
    assert traversal.predictor.swaps == 2
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("notice: reloaded")]
    assert notices == [
        f"notice: reloaded predictor {path} (fingerprint {fingerprints[name]})" for name in ("accepting", "sloped")
    ]


def test_from_options_checks_keys_and_checkpoints(tmp_path):
    assert TRAVERSALS["predictive"] is PredictiveTraversal
    with pytest.raises(ConfigError, match="no option"):
        PredictiveTraversal.from_options({"predictor": None, "budget": 3})
    with pytest.raises(PredictorError, match="no such checkpoint"):
        PredictiveTraversal.from_options({"predictor": str(tmp_path / "missing.ckpt")})
    broken = tmp_path / "broken.ckpt"
    broken.write_text("{}")
    with pytest.raises(PredictorError, match="not a readable checkpoint"):
        PredictiveTraversal.from_options({"predictor": str(broken)})
    json_like = tmp_path / "foreign.ckpt"
    write_predictor(json_like, [0.0, 0.0, 0.0], features=("cut_fraction",))
    assert PredictiveTraversal.from_options({"predictor": str(json_like)}).current_predictor() is not None
    assert PredictiveTraversal.from_options({"predictor": None}).current_predictor() is None
    assert PredictiveTraversal.from_options({"predictor": None, "warmup_rows": 3}).warmup_rows == 3
    for bad in (0, -2, 2.5, True, "8"):
        with pytest.raises(ConfigError, match=r"traversal\.warmup_rows"):
            PredictiveTraversal.from_options({"predictor": None, "warmup_rows": bad})


@pytest.mark.parametrize("sampler", SHIPPED_SAMPLERS)
def test_the_shipped_predictors_load(sampler):
    predictor = load_predictor(default_checkpoint(sampler))
    assert default_checkpoint(sampler).stat().st_size < 20_000
    h = predictor.branch_probability(np.array([[0.1], [0.5], [0.9]]))
    assert np.all((h > 0) & (h < 1))


def test_cli_predictive_run_equals_sequential_run(toy_table, tmp_path):
    chains = {}
    for traversal in ("sequential", "predictive"):
        run_dir = tmp_path / traversal
        result = run_cli(
            "engine=toy",
            "model=toy",
            f"engine.table={toy_table}",
            "dataset=toy",
            "experiment=none",
            "dataset.num_prompts=2",
            "sampler.max_new_tokens=8",
            "sampler.block_size=8",
            "sampler.steps=12",
            f"traversal={traversal}",
            "budget.n_pf=5",
            "run.progress=false",
            f"hydra.run.dir={run_dir}",
        )
        assert result.returncode == 0, result.stderr
        chains[traversal] = [
            (r["prompt_id"], r["tokens"], r["accepts"])
            for r in map(json.loads, (run_dir / "chains.jsonl").read_text().splitlines())
        ]
    assert chains["predictive"] == chains["sequential"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = run_cli(
            "engine=toy",
            "model=toy",
            f"engine.table={toy_table}",
            "dataset=toy",
            "traversal=predictive",
            f"traversal.predictor={tmp_path / 'nope.ckpt'}",
            f"hydra.run.dir={tmp_path / 'bad'}",
        )
    assert bad.returncode == 2 and "no such checkpoint" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()  # refused before the engine loads or anything is written


def test_what_the_rule_learns_belongs_to_one_traversal():
    """A second run in the same process (a multirun job, the benchmark's next sampler) starts afresh."""
    first = PredictiveTraversal.from_options({"predictor": None})
    first.reach_calibration.use(None)
    for _ in range(30):
        first.reach_calibration.observe([0.9, 0.8, 0.7], realized=1)
        first.observe_call({"generated_tokens": 640, "longest_suffix": 64, "call_time_s": 2.0})
    assert first.reach_calibration.gamma != 1.0 and first.cost_model.coef is not None
    second = PredictiveTraversal.from_options({"predictor": None})
    assert second.reach_calibration.gamma == 1.0 and not second.reach_calibration.pairs
    assert second.cost_model.coef is None and not second.cost_model.rows


class FollowedWalks(PredictiveTraversal):
    """Keeps every walk the rule follows past its round, to check their lengths."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.walks = []

    def plan(self, *args, **kwargs):
        plan = super().plan(*args, **kwargs)
        if self._planned is not None:
            self.walks.append(self._planned)
        return plan


@pytest.mark.parametrize("sampler", kernels())
def test_walks_are_followed_to_where_they_would_have_stopped(tmp_path, predictors, sampler):
    """The calibration learns each walk's length as if every depth had been requested: the
    clairvoyant's count (read off the sequential chain), not the count the plan cut short."""
    from presto.prefetch.clairvoyant import ClairvoyantTraversal, TrajectoryRecorder

    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=3))
    kernel, schedule = kernel_for(sampler), BlockSchedule(24, 12, 40)
    cut_short = 0
    for seed in range(3):
        key = ChainKey(seed, 0, 0)
        recorder = TrajectoryRecorder()
        run_chain(kernel, engine, recorder, [], key, schedule)
        clairvoyant = ClairvoyantTraversal(recorder.trajectory)
        traversal = FollowedWalks(load_predictor(predictors["sloped"]), True, FixedCost(0.1, 0.05))
        rounds = []
        run_chain(kernel, engine, PrefetchStepper(traversal, 10, rounds.append), [], key, schedule)
        assert traversal.walks and not traversal._pending  # every walk was followed to its end
        planned = {(r["stage"], r["transition"]): len(r["requested_depths"]) for r in rounds}
        for walk in traversal.walks:
            (_, stage), root = walk.chain, recorder.trajectory[(walk.chain[1], walk.start)]
            expected = clairvoyant.plan(kernel, root, walk.inputs, schedule.steps - walk.start, len(walk.cuts))
            assert walk.length == len(expected), (stage, walk.start)
            cut_short += walk.length > planned[(stage, walk.start)]
    assert cut_short  # some walks went past what their round requested: the case this is for


def test_a_rule_that_requests_few_depths_learns_that_walks_go_farther(tmp_path, predictors):
    """Judged only on the depths it requested, a rule with a pessimistic model never sees walks
    go farther; followed past its requests, its calibration lifts the reach and it plans deeper."""

    class Censored(PredictiveTraversal):
        def observe_round(self, realized, states=()):
            super().observe_round(realized)  # the requested depths only

    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=0))
    kernel, key, schedule = kernel_for("powermh"), ChainKey(0, 0, 0), BlockSchedule(16, 16, 200)
    depths, gammas = {}, {}
    for rule in (PredictiveTraversal, Censored):
        traversal = rule(load_predictor(predictors["accepting"]), True, FixedCost(0.1, 0.05), ReachCalibration(10))
        plans = []
        stepper = PrefetchStepper(traversal, 10, lambda r, t=traversal, out=plans: out.append(t.last_plan["depths"]))
        run_chain(kernel, engine, stepper, [], key, schedule)
        depths[rule], gammas[rule] = np.mean(plans[len(plans) // 2 :]), traversal.reach_calibration.gamma
    assert gammas[PredictiveTraversal] < 1.0 < gammas[Censored]
    assert depths[PredictiveTraversal] > 1.5 * depths[Censored]

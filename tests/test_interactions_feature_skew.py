"""Train/serve consistency of the epsilon-certainty predictor's features (Appendix E.7, eq. 14).

The predictor is trained on the feature vectors trees.jsonl logs per feasible node
(presto.predictor.data, src/train_predictor.py) and served at planning time by the predictive
traversal (presto.prefetch.predictive.branch_function, fed by the realization DP of
presto.prefetch.allocation.shared_request_walk), which computes the features of nodes not generated
yet and of the DP's hypothetical states. Any skew (normalisation, depth or cut off by one, parent_cut
meaning something else, accepts counted differently, other statistics windows, another feature order,
standardisation not applied) silently degrades the plans, so here, for each sampler and each feature
set train_predictor.yaml offers (sets, raw names, a non-canonical order):

- BFS runs log trees while the round's root state is captured; for every logged feasible node the
  serving code (branch_function, same root, same cut, same path) feeds the model exactly the logged
  vector;
- a checkpoint trained on those trees serves a predictive run; every row the DP fed the model is
  captured, and every logged feasible node of a round the DP planned finds its row there, equal to
  the logged vector; every row (hypothetical states too) equals the paper's definitions recomputed
  here from the root's arrays; the plan's h_root equals eq. 14 of the logged root's features;
- the standardisation saved in the checkpoint is the training data's and is applied at serving
  (served class probabilities equal the Lightning module's);
- the class encoding (reject, accept, uncertain at eps = 0.01) is the same in the logged eps_class,
  the training labels and eq. 14's h at serving;
- a checkpoint trained on one sampler's trees served to another sampler's run is handled: a
  ``warning:`` line, features computed for that run's root, chains unchanged.
- the predictors predictive.yaml names without training: ``default`` (the checkpoint shipped for
  the run's sampler, fed the logged vectors) and ``null`` (nothing fed, h = 1/2).

Runs are in-process on the toy engine (vocab 6, n = 12 in blocks of 6, K = 6, N_pf = 4,
3 prompts x 2 chains, tau = 1 so that all three classes occur).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import compose_run, toy_overrides, training_config, write_toy_table
from tests.conftest import paper_features as reference_features

SAMPLERS = ("powermh", "entropycut", "multitry")
FEATURE_SPECS = {
    "cut": ["cut"],
    "tree": ["tree"],
    "likelihood": ["likelihood"],
    "entropy": ["entropy"],
    "raw": ["gap", "parent_cut", "depth", "length"],
    "all_reordered": ["entropy", "likelihood", "tree", "length", "cut"],
}
SETTING = (
    "run.progress=false",
    "budget.n_pf=4",
    "sampler.max_new_tokens=12",
    "sampler.block_size=6",
    "dataset.num_prompts=3",
    "sampler.tau=1.0",
)


def rounds_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trees.jsonl").read_text().splitlines()]


def chains_of(run_dir: Path) -> dict:
    out = {}
    for line in (run_dir / "chains.jsonl").read_text().splitlines():
        record = json.loads(line)
        out[record["prompt_id"], record["chain"]] = (record["tokens"], record["accepts"])
    return out


def toy_run(table: Path, run_dir: Path, sampler: str, traversal: str, *extra: str) -> dict:
    from presto.runner.run import run

    cfg = compose_run(*toy_overrides(table, steps=6), *SETTING, f"sampler={sampler}", f"traversal={traversal}", *extra)
    return run(cfg, run_dir)


def feasible(record: dict) -> list[dict]:
    return [node for node in record["nodes"] if node.get("feasible")]


def paper_features(root, cut: int, depth: int, node_cut: int, accepts: int) -> dict[str, float]:
    """Appendix E.7's features of a request from the root state's arrays (tests.conftest's reference)."""
    assert len(root.logq) == len(root.entropy) == len(root.tokens)
    return reference_features(root.logq, root.entropy, cut, depth, node_cut, accepts)


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> dict:
    """Per sampler: a BFS run with trees.jsonl, and the root state of each logged round, in order."""
    import presto.prefetch.presto as stepper_module

    root_dir = tmp_path_factory.mktemp("feature_skew")
    out: dict = {"root": root_dir, "table": write_toy_table(root_dir / "table.json", vocab=6, seed=3, scale=2.0)}
    real = stepper_module.log_tree
    for sampler in SAMPLERS:
        roots: list = []

        def spy(kernel, root, *args, roots=roots):
            roots.append(root)
            return real(kernel, root, *args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(stepper_module, "log_tree", spy)
            toy_run(out["table"], root_dir / f"bfs_{sampler}", sampler, "bfs")
        rounds = rounds_of(root_dir / f"bfs_{sampler}")
        assert len(rounds) == len(roots) > 0
        out[sampler] = {"dir": root_dir / f"bfs_{sampler}", "rounds": rounds, "roots": roots}
    return out


@pytest.fixture(scope="module")
def checkpoints(logged) -> dict:
    """A logistic checkpoint per (sampler, feature spec), trained on that sampler's BFS trees."""
    from presto.predictor.train import run_training

    out = {}
    for sampler in SAMPLERS:
        for spec, features in FEATURE_SPECS.items():
            path = logged["root"] / f"{sampler}_{spec}.ckpt"
            cfg = training_config([logged[sampler]["dir"]], features=features, folds=2, output=str(path))
            out[sampler, spec] = (path, run_training(cfg, logged["root"] / f"train_{sampler}_{spec}"))
    return out


class Recorder:
    """A stand-in predictor with a checkpoint's feature names that records what serving feeds it."""

    def __init__(self, feature_names) -> None:
        self.feature_names = tuple(feature_names)
        self.fed: list[np.ndarray] = []

    def branch_probability(self, features: np.ndarray) -> np.ndarray:
        self.fed.append(np.array(features, copy=True))
        return np.full(len(features), 0.5)


# 1. Logged trees against the serving code, node by node


@pytest.mark.parametrize("spec", FEATURE_SPECS)
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_serving_feeds_each_logged_bfs_node_exactly_its_logged_features(logged, checkpoints, sampler, spec):
    """For every feasible node of every logged BFS round, branch_function on that round's root (the
    predictive traversal's serving code) with the node's depth, cut, parent cut and accepts feeds the
    model exactly the vector training reads from trees.jsonl, in the checkpoint's feature order."""
    from presto.predictor.features import feature_matrix, resolve_features
    from presto.predictor.hotload import load_predictor
    from presto.prefetch.predictive import PredictiveTraversal

    predictor = load_predictor(checkpoints[sampler, spec][0])
    assert predictor.feature_names == resolve_features(FEATURE_SPECS[spec])  # the order training was given
    compared = 0
    for record, root in zip(logged[sampler]["rounds"], logged[sampler]["roots"], strict=True):
        for node in feasible(record):
            recorder = Recorder(predictor.feature_names)
            branch = PredictiveTraversal(None).branch_function(root, recorder)
            features = node["features"]
            h = branch(
                node["depth"], node["cut"], np.array([features["parent_cut"]]), np.array([features["accepts_on_path"]])
            )
            assert len(h) == 1 and len(recorder.fed) == 1 and recorder.fed[0].shape == (1, len(predictor.feature_names))
            np.testing.assert_array_equal(recorder.fed[0][0], feature_matrix([features], predictor.feature_names)[0])
            # and the real model's h of that row is eq. 14 of the logged row
            served = PredictiveTraversal(None).branch_function(root, predictor)(
                node["depth"], node["cut"], np.array([features["parent_cut"]]), np.array([features["accepts_on_path"]])
            )
            assert served[0] == predictor.branch_probability(feature_matrix([features], predictor.feature_names))[0]
            compared += 1
    assert compared >= 100


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_logged_feature_is_the_papers_definition_of_its_round_root(logged, sampler):
    """The logged vectors (what training reads) follow Appendix E.7 from the round's root: c_j / T,
    c_i = the cut of the last accepted proposal on the path (T at the root, kept by a rejection
    child), depth from the round's root, accepts on the path, log q / entropy statistics at the cut."""
    checked = 0
    for record, root in zip(logged[sampler]["rounds"], logged[sampler]["roots"], strict=True):
        by_id = {node["id"]: node for node in record["nodes"]}
        for node in feasible(record):
            parent = by_id.get(node["parent"])
            if parent is None:
                node_cut, accepts, depth = len(root.tokens), 0, 0
            else:
                pf = parent["features"]
                depth = parent["depth"] + 1
                if node["branch"] == "accept":
                    node_cut, accepts = parent["cut"], pf["accepts_on_path"] + 1
                else:
                    node_cut, accepts = pf["parent_cut"], pf["accepts_on_path"]
            want = paper_features(root, node["cut"], depth, node_cut, accepts)
            got = node["features"]
            assert set(got) == set(want)
            for name, value in want.items():
                assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-12), (name, node["id"])
            checked += 1
    assert checked >= 100


# 2. A predictive run serving a checkpoint: what its DP fed the model, round by round


@pytest.fixture
def served_rows(monkeypatch):
    """Every row the predictive traversal feeds a model, per plan: (root, cuts, {(depth, cut, node cut,
    accepts): row}) in plan order, captured from presto.prefetch.predictive's own calls."""
    import presto.prefetch.predictive as predictive

    plans: list[dict] = []
    made: dict[int, tuple] = {}
    real_features, real_matrix = predictive.node_features, predictive.broadcast_feature_matrix
    real_plan = predictive.PredictiveTraversal.plan

    def node_features(root, cut, depth, node_cut, accepts):  # node cuts and accepts: one or one per state
        columns = real_features(root, cut, depth, node_cut, accepts)
        made[id(columns)] = (int(depth), int(cut), np.atleast_1d(node_cut), np.atleast_1d(accepts))
        return columns

    def broadcast_feature_matrix(columns, names, count):
        matrix = real_matrix(columns, names, count)
        depth, cut, node_cuts, accepts = made[id(columns)]
        states = zip(np.broadcast_to(node_cuts, (count,)), np.broadcast_to(accepts, (count,)), strict=True)
        for (node_cut, accepted), vector in zip(states, matrix, strict=True):
            plans[-1]["rows"][(depth, cut, int(node_cut), int(accepted))] = vector.copy()
        plans[-1]["names"] = tuple(names)
        return matrix

    def plan(self, kernel, root, inputs, depth_cap, budget, reusable=()):
        cuts = [kernel.cut(root, inputs(d)) for d in range(min(budget, depth_cap))]
        plans.append({"root": root, "cuts": cuts, "rows": {}, "names": None})
        return real_plan(self, kernel, root, inputs, depth_cap, budget, reusable)

    monkeypatch.setattr(predictive, "node_features", node_features)
    monkeypatch.setattr(predictive, "broadcast_feature_matrix", broadcast_feature_matrix)
    monkeypatch.setattr(predictive.PredictiveTraversal, "plan", plan)
    return plans


@pytest.mark.parametrize("spec", FEATURE_SPECS)
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_predictive_run_feeds_its_model_the_logged_features_of_every_node(
    logged, checkpoints, served_rows, sampler, spec, tmp_path
):
    """Serve the checkpoint trained on this sampler's trees with this feature spec to a predictive run.
    In every round its DP planned, each logged feasible node's row is among those the DP fed the model
    and equals the logged vector exactly; every fed row (the DP's hypothetical states included) is
    the paper's definition for its (depth, cut, node cut, accepts) and the state is one a path of the
    tree can have; the plan's h_root is eq. 14 of the logged root's features; the chains are BFS's."""
    from presto.predictor.features import feature_matrix
    from presto.predictor.hotload import load_predictor
    from presto.prefetch.tree import PATH_FEATURES

    path, _ = checkpoints[sampler, spec]
    predictor = load_predictor(path)
    names = predictor.feature_names
    path_dependent = not PATH_FEATURES.isdisjoint(names)
    run_dir = tmp_path / "predictive"
    toy_run(logged["table"], run_dir, sampler, "predictive", f"traversal.predictor={path}")
    assert chains_of(run_dir) == chains_of(logged[sampler]["dir"])
    rounds = rounds_of(run_dir)
    assert len(rounds) == len(served_rows)
    planned = matched = 0
    for record, plan in zip(rounds, served_rows, strict=True):
        assert record["plan"]["predictor"] == predictor.fingerprint
        if record["plan"]["realize"] is None:  # one plannable depth: nothing to predict
            assert not plan["rows"]
            continue
        planned += 1
        assert plan["names"] == names
        root, cuts, length = plan["root"], plan["cuts"], len(plan["root"].tokens)
        for (depth, cut, node_cut, accepts), row in plan["rows"].items():
            assert cut == cuts[depth]
            want = paper_features(root, cut, depth, node_cut, accepts)
            np.testing.assert_allclose(row, [want[n] for n in names], rtol=1e-12, atol=1e-12)
            if path_dependent:  # a state some path can have: c_i = T with no accept, else an earlier cut
                assert 0 <= accepts <= depth
                assert (node_cut == length) if accepts == 0 else (node_cut in cuts[:depth])
            else:
                assert (node_cut, accepts) == (length, 0)
        root_node = record["nodes"][0]
        h_root = predictor.branch_probability(feature_matrix([root_node["features"]], names))[0]
        assert record["plan"]["h_root"] == pytest.approx(h_root, rel=1e-12, abs=1e-15)
        for node in feasible(record):
            f = node["features"]
            key = (node["depth"], node["cut"], f["parent_cut"], f["accepts_on_path"])
            if not path_dependent:
                key = (node["depth"], node["cut"], length, 0)
            assert key in plan["rows"], (key, sorted(plan["rows"]))
            np.testing.assert_array_equal(plan["rows"][key], feature_matrix([f], names)[0])
            matched += 1
    assert planned >= 5 and matched >= 20


# 3. Standardisation and feature order saved in the checkpoint


@pytest.mark.parametrize("spec", ["all_reordered", "raw", "likelihood"])
def test_the_checkpoints_standardisation_is_the_training_datas_and_serving_applies_it(logged, checkpoints, spec):
    """The mean and std a checkpoint carries are those of the features it was fitted on (in its
    feature order), and the served class probabilities on the logged rows equal the Lightning
    module's (which standardises in forward): serving applies the saved scaling, in the saved order."""
    import torch

    from presto.predictor.data import collect_examples
    from presto.predictor.hotload import load_predictor
    from presto.predictor.module import EpsilonClassifier

    sampler = "entropycut"
    path, metrics = checkpoints[sampler, spec]
    predictor = load_predictor(path)
    examples = collect_examples([logged[sampler]["dir"]], predictor.feature_names, 0.01, "reach")
    assert metrics["features"] == list(predictor.feature_names) == list(examples.feature_names)
    x = examples.features.astype(np.float32)
    std = x.std(axis=0)
    np.testing.assert_allclose(predictor.mean, x.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(predictor.std, np.where(std > 1e-8, std, 1.0), rtol=1e-6, atol=1e-6)
    assert np.max(np.abs(predictor.std - 1.0)) > 0.05 or np.max(np.abs(predictor.mean)) > 0.05  # scaling matters
    module = EpsilonClassifier.load_from_checkpoint(path, map_location="cpu")
    assert list(module.hparams.feature_names) == list(predictor.feature_names)
    served = predictor.predict_proba(examples.features)
    np.testing.assert_allclose(served, module.predict_proba(examples.features), atol=2e-5)
    with torch.no_grad():  # the same layers without the scaling give other probabilities: the check can fail
        raw = torch.softmax(module.net(torch.as_tensor(x)).double(), dim=1).numpy()
    assert np.max(np.abs(raw - served)) > 1e-3


# 4. Class encoding: logged eps_class, training labels, eq. 14 at serving


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_training_labels_are_the_logged_eps_classes_in_the_servers_class_order(logged, sampler):
    from presto.predictor.data import collect_examples
    from presto.predictor.features import CLASSES, label_of
    from presto.predictor.hotload import CLASSES as SERVED_CLASSES
    from presto.prefetch.tree import EPSILON, epsilon_class

    assert CLASSES == SERVED_CLASSES == ("reject", "accept", "uncertain")
    examples = collect_examples([logged[sampler]["dir"]], ["cut_fraction"], EPSILON, "uniform")
    logged_classes = [n["eps_class"] for r in logged[sampler]["rounds"] for n in feasible(r)]
    assert [CLASSES[k] for k in examples.labels] == logged_classes
    for accept in (0.0, 1e-4, 0.0099, 0.0101, 0.5, 0.9899, 0.9901, 1.0):
        log_accept = math.log(accept) if accept > 0 else -math.inf
        assert CLASSES[label_of(None if accept == 0 else log_accept, EPSILON)] == epsilon_class(log_accept)


def _synthetic_trees(run_dir: Path) -> Path:
    """trees.jsonl whose class is a function of the cut fraction: low cuts accepted for sure, middle
    cuts uncertain, high cuts rejected for sure (one root node per round, 4 prompts)."""
    from presto.prefetch.tree import epsilon_class

    run_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    lines = []
    for prompt in range(4):
        for k in range(90):
            fraction = float(rng.uniform(0.0, 1.0))
            accept = 1.0 if fraction < 0.3 else 0.5 if fraction < 0.7 else 1e-3
            log_accept = math.log(accept)
            node = {
                "id": 0,
                "parent": None,
                "branch": "root",
                "depth": 0,
                "cut": int(fraction * 100),
                "feasible": True,
                "features": {"cut_fraction": fraction},
                "log_accept": log_accept,
                "eps_class": epsilon_class(log_accept),
            }
            lines.append(json.dumps({"prompt_id": f"p{prompt}", "chain": 0, "round": k, "nodes": [node]}))
    (run_dir / "trees.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def test_a_model_trained_on_known_classes_serves_h_by_eq_14_in_the_same_class_order(tmp_path):
    """Trained where low cut fractions are certain accepts and high ones certain rejects, the served
    model says so: h near 1 at low cuts, near 0 at high ones, about 1/2 in the uncertain band, and h is
    exactly 1/2 (1 + P(accept) - P(reject)) of the served class probabilities."""
    from presto.predictor.features import CLASSES
    from presto.predictor.hotload import load_predictor
    from presto.predictor.train import run_training

    runs = _synthetic_trees(tmp_path / "synthetic")
    path = tmp_path / "synthetic.ckpt"
    metrics = run_training(training_config([runs], weighting="uniform", folds=2, output=str(path)), tmp_path / "t")
    assert metrics["class_counts"]["reject"] > 0 and metrics["class_counts"]["accept"] > 0
    predictor = load_predictor(path)
    x = np.array([[0.05], [0.5], [0.95]])
    p = predictor.predict_proba(x)
    h = predictor.branch_probability(x)
    np.testing.assert_allclose(h, 0.5 * (1 + p[:, CLASSES.index("accept")] - p[:, CLASSES.index("reject")]))
    assert [CLASSES[k] for k in p.argmax(axis=1)] == ["accept", "uncertain", "reject"]
    assert h[0] > 0.75 and h[2] < 0.25 and abs(h[1] - 0.5) < 0.2


# 5. A checkpoint of one sampler served to a run of another


@pytest.mark.parametrize(
    ("trained_on", "served_to", "spec"),
    [
        ("entropycut", "powermh", "entropy"),
        ("multitry", "entropycut", "all_reordered"),
        ("powermh", "multitry", "tree"),
    ],
)
def test_a_checkpoint_of_another_sampler_is_served_with_a_warning_and_this_runs_features(
    logged, checkpoints, served_rows, trained_on, served_to, spec, tmp_path, capsys
):
    """Every sampler's roots carry log q and entropy, so any feature set is computable for any run:
    the other sampler's checkpoint is served (one warning line naming both samplers, no traceback),
    its rows are this run's root statistics, and the chains are the run's own."""
    path, _ = checkpoints[trained_on, spec]
    run_dir = tmp_path / "cross"
    capsys.readouterr()
    toy_run(logged["table"], run_dir, served_to, "predictive", f"traversal.predictor={path}")
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and trained_on in warnings[0] and served_to in warnings[0], err
    assert "Traceback" not in err
    assert chains_of(run_dir) == chains_of(logged[served_to]["dir"])
    fed = [plan for plan in served_rows if plan["rows"]]
    assert fed
    for plan in fed:
        for (depth, cut, node_cut, accepts), row in plan["rows"].items():
            want = paper_features(plan["root"], cut, depth, node_cut, accepts)
            np.testing.assert_allclose(row, [want[n] for n in plan["names"]], rtol=1e-12, atol=1e-12)


# 6. The predictors conf/traversal/predictive.yaml names without training: default and null


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_shipped_default_predictor_is_fed_the_logged_features_of_its_own_sampler(
    logged, served_rows, sampler, tmp_path, capsys
):
    """traversal.predictor=default serves the checkpoint shipped for the run's sampler: it was trained
    on that sampler's trees (a warning names only the setting keys that differ, never another sampler),
    and every logged feasible node of a planned round was fed to it as logged."""
    from presto.predictor import default_checkpoint
    from presto.predictor.features import feature_matrix
    from presto.predictor.hotload import load_predictor

    shipped = load_predictor(default_checkpoint(sampler))
    assert sampler in shipped.provenance["samplers"] and len(shipped.provenance["samplers"]) == 1
    run_dir = tmp_path / "default"
    capsys.readouterr()
    toy_run(logged["table"], run_dir, sampler, "predictive", "traversal.predictor=default")
    err = capsys.readouterr().err
    assert all("another setting" in line for line in err.splitlines() if line.startswith("warning:")), err
    assert chains_of(run_dir) == chains_of(logged[sampler]["dir"])
    compared = 0
    for record, plan in zip(rounds_of(run_dir), served_rows, strict=True):
        assert record["plan"]["predictor"] == shipped.fingerprint
        if record["plan"]["realize"] is None:
            continue
        length = len(plan["root"].tokens)
        for node in feasible(record):
            row = plan["rows"][node["depth"], node["cut"], length, 0]
            np.testing.assert_array_equal(row, feature_matrix([node["features"]], shipped.feature_names)[0])
            compared += 1
    assert compared >= 20


def test_a_null_predictor_feeds_nothing_and_plans_with_h_one_half(logged, served_rows, tmp_path):
    run_dir = tmp_path / "null"
    toy_run(logged["table"], run_dir, "powermh", "predictive", "traversal.predictor=null")
    planned = [record["plan"] for record in rounds_of(run_dir) if record["plan"]["realize"] is not None]
    assert planned and all(plan["predictor"] is None and plan["h_root"] == 0.5 for plan in planned)
    assert not any(plan["rows"] for plan in served_rows)
    assert chains_of(run_dir) == chains_of(logged["powermh"]["dir"])

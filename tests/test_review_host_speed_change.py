"""Review of the host-speed change (16d7f8b..): the numpy reach DP, batched path features, the
per-block DecisionInputs cache, dumps' fast path, the verbatim trees.jsonl resume and machine_load.

The four defects the review found are fixed, and their tests are ordinary ones: a -inf log q before
a cut, bool/None keys in dumps' two paths, the benchmark's load window, and windows too short to
flag. The other tests cover equivalences the change relies on that no test checked yet (the DP
against following every path at edge cuts, certain repeats and 0/1 branches; array node_features
against per-pair rows; the resume's copy of odd trees.jsonl lines).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from presto.predictor.features import broadcast_feature_matrix, feature_matrix
from presto.prefetch.allocation import shared_request_walk
from presto.prefetch.tree import node_features
from presto.runner.outputs import RunWriter, _plain, dumps, read_jsonl
from presto.samplers.state import ChainState
from tests.conftest import call_script, load_script, toy_overrides
from tests.test_allocation import walk_by_paths

# --- (1) shared_request_walk against following every path -------------------------------------


def branches(length: int, w: np.ndarray):
    """Path-dependent branches h(depth, cut, node cut, accepts) for scalars and arrays alike."""

    def logistic(depth, cut, m, a):
        m, a = np.asarray(m, dtype=float), np.asarray(a, dtype=float)
        return 1 / (1 + np.exp(-(w[0] + w[1] * m / length + w[2] * a + w[3] * cut / length + depth / 4)))

    def zero(depth, cut, m, a):
        return np.zeros_like(np.asarray(m, dtype=float))

    def one(depth, cut, m, a):
        return np.ones_like(np.asarray(m, dtype=float))

    def step(depth, cut, m, a):  # 0 or 1 by the path: states with equal (L) but other (m, a) split
        return ((np.asarray(m) + np.asarray(a) + depth) % 2).astype(float)

    return {"logistic": logistic, "zero": zero, "one": one, "step": step}


def logq_variants(rng, length: int) -> dict:
    partial = np.log(rng.uniform(0.4, 1.0, size=length))
    partial[rng.random(length) < 0.5] = 0.0  # q = 1 at some tokens: certain repeats over stretches
    return {
        "none": None,
        "random": np.log(rng.uniform(0.4, 1.0, size=length)),
        "zeros": np.zeros(length),  # every proposal repeats the root: P(repeat) = 1, differ = 0
        "partial": partial,
    }


def as_array_branch(h):
    return lambda depth, cut, node_cuts, accepts: np.broadcast_to(
        np.asarray(h(depth, cut, node_cuts, accepts), dtype=float), (len(node_cuts),)
    )


@pytest.mark.parametrize("seed", range(8))
def test_walk_matches_every_path_at_edge_cuts_certain_repeats_and_zero_one_branches(seed):
    """Cut 0, cut T - 1 and repeated cuts; log q None, random, all 0 (certain repeat) or partly 0; branches
    that are logistic in (m, a), constant 0, constant 1 or 0/1 by path: the DP's states, merged by key and
    with accepted moves summed by destination, give what following each path one by one gives."""
    rng = np.random.default_rng(900 + seed)
    length = int(rng.integers(2, 8))
    depths = int(rng.integers(1, 6))
    pool = [0, length - 1, int(rng.integers(length))]
    cuts = [int(rng.choice(pool)) for _ in range(depths)]
    if depths > 1:
        cuts[1] = cuts[0]  # a repeated cut
    for (name, h), (lq_name, logq) in itertools.product(
        branches(length, rng.normal(size=4)).items(), logq_variants(rng, length).items()
    ):
        dp = shared_request_walk(cuts, length, as_array_branch(h), repeat_logq=logq)
        expected = walk_by_paths(cuts, length, h, logq)
        np.testing.assert_allclose(dp, expected, atol=1e-10, err_msg=f"{name}, logq {lq_name}, cuts {cuts}")
        # path_dependent=False: the branch read at the root state, whatever the path.
        flat = shared_request_walk(cuts, length, as_array_branch(h), repeat_logq=logq, path_dependent=False)
        at_root = walk_by_paths(cuts, length, lambda d, c, m, a, h=h: float(h(d, c, length, 0)), logq)
        np.testing.assert_allclose(flat, at_root, atol=1e-10, err_msg=f"flat {name}, logq {lq_name}, cuts {cuts}")


@pytest.mark.parametrize(
    ("length", "cuts"),
    [
        (6, [5, 5, 0, 5, 3]),  # cut T - 1 repeated
        (3, [1, 1, 2, 1, 0]),  # a stopped walk and a walking one meet in one (m, L, a): kept apart by the flag
    ],
)
def test_walk_by_hand_picked_cuts_matches_every_path(length, cuts):
    realize, usable = shared_request_walk([], length, as_array_branch(lambda d, c, m, a: 0.5))
    assert realize.shape == usable.shape == (0,)
    for w in (np.array([0.3, -1.0, 0.5, 0.2]), np.array([1.0, 2.0, -1.0, 0.0])):
        h = branches(length, w)["logistic"]
        for logq in (None, np.log(np.full(length, 0.8))):
            np.testing.assert_allclose(
                shared_request_walk(cuts, length, as_array_branch(h), repeat_logq=logq),
                walk_by_paths(cuts, length, h, logq),
                atol=1e-10,
            )


def test_walk_with_a_zero_probability_token_before_the_cut_matches_every_path():
    length, cuts = 8, [3, 5, 2, 0, 7]
    logq = np.log(np.full(length, 0.9))
    logq[2] = -np.inf  # a root token q gave no mass (truncated or underflowed proposal law)
    h = branches(length, np.array([0.2, 0.5, -0.3, 0.1]))["logistic"]
    with np.errstate(invalid="ignore"):
        dp = shared_request_walk(cuts, length, as_array_branch(h), repeat_logq=logq)
    np.testing.assert_allclose(dp, walk_by_paths(cuts, length, h, logq), atol=1e-10)


# --- (2) node features of many DP states at once ------------------------------------------------


def test_array_node_features_give_the_rows_of_each_pair():
    rng = np.random.default_rng(3)
    length = 9
    root = ChainState(
        rng.integers(50, size=length),
        rng.normal(size=length),
        np.log(rng.uniform(0.2, 1.0, size=length)),
        rng.uniform(0, 3, size=length),
        np.zeros((length, 0)),
    )
    names = sorted(node_features(root, 0, 0, length, 0))
    node_cuts, accepts = np.array([9, 4, 0, 8, 4]), np.array([0, 1, 3, 2, 5])
    for cut, depth in ((0, 0), (length - 1, 3), (4, 7)):
        columns = node_features(root, cut, depth, node_cuts, accepts)
        batched = broadcast_feature_matrix(columns, names, len(node_cuts))
        rows = [node_features(root, cut, depth, int(m), int(a)) for m, a in zip(node_cuts, accepts, strict=True)]
        np.testing.assert_array_equal(batched, feature_matrix(rows, names))
    with pytest.raises(KeyError, match="no_such_feature"):
        broadcast_feature_matrix(columns, [*names, "no_such_feature"], len(node_cuts))


# --- (4) dumps and the resume's verbatim copy ------------------------------------------------------


@pytest.mark.parametrize("record", [{True: 1}, {None: 1}, {False: np.int64(2)}])
def test_dumps_writes_a_bool_or_none_key_as_the_plain_conversion_does(record):
    assert dumps(record) == json.dumps(_plain(record), allow_nan=False)
    # and the key does not depend on whether another value of the record is finite
    assert json.loads(dumps(record)).keys() == json.loads(dumps({**record, "x": float("nan")})).keys() - {"x"}


def test_a_resume_copies_kept_rounds_through_odd_lines(tmp_path):
    """CRLF, non-ASCII text, a last line without its newline, a torn line, JSON that is no record (once a
    crash in _chain_key): the finished chain's rounds are kept, one per line, and appends start on a clean line."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "chains.jsonl").write_text(dumps({"prompt_id": "p", "chain": 0}) + "\n")
    lines = [
        '{"prompt_id": "p", "chain": 0, "round": 0, "s": "\u00e9\u2028\u4e2d"}\r\n',
        "[1, 2]\n",
        '"a string"\n',
        '{"prompt_id": "p", "chain": 1, "round": 0}\n',  # an unfinished chain's round
        '{"prompt_id": "p", "chain": 0, "ro\n',  # torn, then followed by a line
        '{"prompt_id": "p", "chain": 0, "round": 1}',  # no newline at the end
    ]
    (run_dir / "trees.jsonl").write_bytes("".join(lines).encode("utf-8"))
    writer = RunWriter(run_dir, resume=True)
    writer.append_tree({"prompt_id": "p", "chain": 0, "round": 2})
    writer.close()
    text = (run_dir / "trees.jsonl").read_bytes().decode("utf-8")
    assert "\r" not in text and text.endswith("\n") and text.count("\n") == 3
    trees = read_jsonl(run_dir / "trees.jsonl")
    assert [t["round"] for t in trees] == [0, 1, 2] and {t["chain"] for t in trees} == {0}
    assert trees[0]["s"] == "\u00e9\u2028\u4e2d"


# --- (5) machine load in the scripts -----------------------------------------------------------------


def test_the_benchmark_divides_others_cpu_by_the_window_it_was_measured_over(toy_table, tmp_path, monkeypatch, capsys):
    import presto.eval.machine_load as machine_load
    import presto.runner.run as runner

    benchmark = load_script("benchmark")
    steps = iter(range(10**6))

    def snapshot():  # 4 s of wall time between two snapshots, 0.8 CPU seconds of it others': 0.2 CPUs
        step = next(steps)
        return machine_load.CpuSnapshot(wall_s=4.0 * step, machine_busy_s=0.8 * step, own_s=0.0)

    real_sample_chain = runner.sample_chain

    def graded_slowly(*args, **kwargs):  # the chain itself took 2 s, its grading the other 2 s of the window
        return {**real_sample_chain(*args, **kwargs), "wall_time_s": 2.0}

    monkeypatch.setattr(machine_load, "cpu_snapshot", snapshot)
    monkeypatch.setattr(runner, "sample_chain", graded_slowly)
    out = tmp_path / "figures.json"
    args = ("--samplers", "powermh", "--traversals", "bfs", "--n-pf", "3", *toy_overrides(toy_table))
    assert call_script(benchmark, *args, "--out", str(out)) == 0
    captured = capsys.readouterr()
    rows = json.loads(out.read_text())["rows"]
    assert [round(row["others_cores"], 9) for row in rows] == [0.2, 0.2]
    assert "(other processes kept" not in captured.out  # 0.2 < BUSY_OTHERS_CORES: no chain flagged
    assert "warning: other processes kept" not in captured.err


def test_call_cost_does_not_flag_a_window_too_short_to_measure(toy_table, monkeypatch, capsys):
    import presto.eval.machine_load as machine_load

    steps = iter(range(10**6))

    def snapshot():  # 50 ms between the two snapshots, two 10 ms ticks of another process: "0.40 CPUs"
        step = next(steps)
        return machine_load.CpuSnapshot(wall_s=0.05 * step, machine_busy_s=0.02 * step, own_s=0.0)

    monkeypatch.setattr(machine_load, "cpu_snapshot", snapshot)
    toy = ("engine=toy", "model=toy", f"engine.table={toy_table}")
    assert call_script(load_script("call_cost"), "--rows", "1", "--tokens", "2", "--prompt-tokens", "3", *toy) == 0
    assert "other processes kept" not in capsys.readouterr().err

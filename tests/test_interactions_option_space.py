"""Exactness and law across the option space, on the toy engine.

The existing exactness tests cover the default options of each sampler with BFS; here the corners:
every sampler at edge options (alpha near 1, far above 1 and below 1, tau != 1/alpha, beta = 0,
uniform_mix 0 and 1, M = 1, one temperature, duplicated temperatures), schedules at their edges
(B = n, B = 1, K = 0, K = 1, K far above N_pf), every traversal (BFS at N_pf 1..64, predictive with
h = 1/2, with the shipped checkpoint, with one trained here on a tiny toy run using path features,
cost_aware=false, extreme cost-model options), several prompts and chains, wide seeds, a toy engine
with an EOS id, and resumed runs. A PreSTO chain must equal the sequential chain token for token, with
the same accept flags and log A bit for bit, and the run's figures (transitions, calls, rounds) must
add up. For tiny enumerable settings the final states of many chains (half of them through PreSTO)
must follow the exact K-step law computed by enumeration (chi-square), which rejects wrong laws.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from presto.engines.toy import ToyEngine
from presto.prefetch.predictive import PredictiveTraversal
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.entropycut import EntropyCut
from presto.samplers.multitry import MultiTryMH
from presto.samplers.powermh import PowerMH
from presto.samplers.randomness import ChainKey
from tests.conftest import compose_run, run_cli, toy_args, toy_overrides, training_config, write_toy_table
from tests.test_entropycut import reference_matrix
from tests.test_law import chi_square_pvalue
from tests.toy_model import CachedToyEngine, ToyModel

# --- helpers ------------------------------------------------------------------------------------


class CountingToyEngine(ToyEngine):
    """ToyEngine that records the size of every batched call (to check the N_pf budget)."""

    def __init__(self, table) -> None:
        super().__init__(table)
        self.batches: list[int] = []
        self.stopping = 0  # requests that asked to stop at EOS (the MH samplers never may)

    def generate(self, requests):
        if requests:
            self.batches.append(len(requests))
            self.stopping += sum(r.stop_at_eos for r in requests)
        return super().generate(requests)


class EosToyEngine(CountingToyEngine):
    """The toy engine with an EOS id (token 2): MH chains must still run to the fixed horizon."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({2})


def assert_same_chain(reference, reference_trace, state, trace, what) -> None:
    np.testing.assert_array_equal(state.tokens, reference.tokens, err_msg=what)
    assert trace.accepts == reference_trace.accepts, what
    assert trace.log_accepts == reference_trace.log_accepts, what  # the same path, bit for bit
    for field in ("logp0", "logq", "entropy", "logq_extra"):
        np.testing.assert_array_equal(getattr(state, field), getattr(reference, field), err_msg=f"{what}: {field}")


def requests_per_decision(kernel) -> int:
    return kernel.num_requests if isinstance(kernel, MultiTryMH) else 1


KERNELS = {
    "powermh-alpha-near-1": lambda: PowerMH(1.0001, 1 / 1.0001),
    "powermh-alpha-1-tau-1": lambda: PowerMH(1.0, 1.0),
    "powermh-alpha-50": lambda: PowerMH(50.0, 0.02),
    "powermh-alpha-half": lambda: PowerMH(0.5, 2.0),
    "powermh-tau-ne-1/alpha": lambda: PowerMH(4.0, 0.7),
    "entropycut-beta0-mix0": lambda: EntropyCut(4.0, 0.25, beta=0.0, uniform_mix=0.0),
    "entropycut-mix0": lambda: EntropyCut(2.0, 0.5, beta=4.0, uniform_mix=0.0),
    "entropycut-mix1": lambda: EntropyCut(4.0, 0.25, beta=4.0, uniform_mix=1.0),
    "entropycut-beta-large-tau1": lambda: EntropyCut(3.0, 1.0, beta=50.0, uniform_mix=0.3),
    "multitry-M1": lambda: MultiTryMH(4.0, 0.25, num_candidates=1),
    "multitry-one-temperature": lambda: MultiTryMH(4.0, 0.25, num_candidates=2, temperatures=[0.5]),
    "multitry-duplicate-temperatures": lambda: MultiTryMH(
        2.0, 0.7, num_candidates=3, temperatures=[0.5, 0.5, 1.0, 0.5]
    ),
    "multitry-M1-tau-only": lambda: MultiTryMH(4.0, 0.25, num_candidates=1, temperatures=[0.25, 0.25]),
}

# n, B, K: B = n, B = 1, K = 0, K = 1; LONG: K = 70 above every budget but 64 and close to it.
SCHEDULES = [BlockSchedule(8, 8, 10), BlockSchedule(5, 1, 3), BlockSchedule(8, 4, 0), BlockSchedule(8, 4, 1)]
LONG = BlockSchedule(6, 6, 70)
KEYS = [ChainKey(0, 0, 0), ChainKey(2**40 + 3, 2, 1)]  # a wide seed too (128-bit key encoding)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    return write_toy_table(tmp_path_factory.mktemp("optionspace") / "table.json", vocab=6, seed=3)


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory, table) -> Path:
    """A predictor trained on a tiny toy BFS run, with path-dependent features (parent cut, accepts on
    path: the predictive DP then featurizes every (node cut, accepts) state, not one row per depth)."""
    from presto.predictor.train import run_training
    from presto.runner.run import run

    root = tmp_path_factory.mktemp("trained")
    run(compose_run(*toy_overrides(table, steps=12), "run.progress=false", "budget.n_pf=5"), root / "bfs")
    checkpoint = root / "tiny.ckpt"
    config = training_config([root / "bfs"], output=str(checkpoint), folds=2, features=["cut", "tree", "likelihood"])
    run_training(config, root / "train")
    assert checkpoint.is_file()
    return checkpoint


def steppers(kernel, checkpoint: Path):
    """(name, stepper, budget) for every rule and budget checked; the predictive rules are shared by
    the chains, as a run shares its traversal (what they learn only moves call boundaries)."""
    budgets = [(f"bfs{n}", PrefetchStepper(BreadthFirst(), n), n) for n in (1, 2, 3, 5, 20, 64)]
    predictive = [
        ("predictive-h-half-2", PrefetchStepper(PredictiveTraversal(None), 2), 2),
        ("predictive-h-half-20", PrefetchStepper(PredictiveTraversal(None), 20), 20),
        ("predictive-shipped-5", PrefetchStepper(PredictiveTraversal.from_options({}, kernel.name), 5), 5),
        (
            "predictive-trained-20",
            PrefetchStepper(PredictiveTraversal.from_options({"predictor": str(checkpoint)}, kernel.name), 20),
            20,
        ),
        (
            "predictive-eager-cost-model-20",
            PrefetchStepper(
                PredictiveTraversal.from_options(
                    {"predictor": None, "min_calls": 1, "window": 1, "prior_calls": 0, "warmup_rows": 1}, kernel.name
                ),
                20,
            ),
            20,
        ),
    ]
    return budgets + predictive


# --- exactness of the kernels' chains ------------------------------------------------------------


@pytest.mark.parametrize("kernel_name", list(KERNELS))
def test_presto_chains_equal_sequential_chains_at_edge_options(table, trained_checkpoint, kernel_name):
    kernel = KERNELS[kernel_name]()
    engine = CountingToyEngine(table)
    rules = steppers(kernel, trained_checkpoint)
    per_decision = requests_per_decision(kernel)
    for schedule in [*SCHEDULES, LONG]:
        for key in KEYS:
            before = engine.stats.calls
            reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
            sequential_calls = engine.stats.calls - before
            assert sequential_calls == schedule.stages * (1 + schedule.steps)
            assert len(reference_trace.accepts) == schedule.stages * schedule.steps
            for name, stepper, budget in rules:
                if schedule == LONG and name not in ("bfs1", "bfs3", "bfs64", "predictive-trained-20"):
                    continue  # the long schedule for the budgets below, at and near its K only (runtime)
                what = f"{kernel_name} {schedule} {key} {name}"
                before, first_batch = engine.stats.calls, len(engine.batches)
                state, trace = run_chain(kernel, engine, stepper, [], key, schedule)
                calls = engine.stats.calls - before
                assert_same_chain(reference, reference_trace, state, trace, what)
                assert len(trace.log_accepts) == len(trace.accepts) == len(reference_trace.accepts), what
                # A round makes at most one call and realizes at least one transition.
                assert calls <= sequential_calls, what
                assert trace.rounds <= len(trace.accepts), what
                if name == "bfs1":  # one decision per round: the sequential chain's calls exactly
                    assert calls == sequential_calls and trace.rounds == len(trace.accepts), what
                    assert trace.discarded_requests == 0, what
                assert max(engine.batches[first_batch:], default=1) <= budget * per_decision, what
                if not kernel.state_depends_cut:
                    assert trace.discarded_requests == 0, what
    assert engine.stopping == 0  # the MH samplers keep the fixed horizon


def test_entropycut_with_uniform_mix_1_is_powermh_decision_for_decision(table):
    """uniform_mix = 1 is documented as PowerMH's uniform law: with the same random inputs the same cuts,
    proposals and accept decisions (log A equal up to rounding: the cut-law ratio adds an exact 0)."""
    engine = ToyEngine(table)
    compared = 0
    for chain in range(60):
        key = ChainKey(5, chain % 3, chain)
        for schedule in (BlockSchedule(8, 4, 10), BlockSchedule(6, 1, 3)):
            a, trace_a = run_chain(PowerMH(4.0, 0.25), engine, SequentialStepper(), [], key, schedule)
            stepper = PrefetchStepper(BreadthFirst(), 4)
            b, trace_b = run_chain(EntropyCut(4.0, 0.25, uniform_mix=1.0), engine, stepper, [], key, schedule)
            np.testing.assert_array_equal(a.tokens, b.tokens)
            assert trace_a.accepts == trace_b.accepts
            np.testing.assert_allclose(trace_a.log_accepts, trace_b.log_accepts, rtol=0, atol=1e-12)
            assert trace_b.discarded_requests == 0  # the uniform law never changes with the state
            compared += 1
    assert compared == 120


def test_an_eos_token_does_not_stop_mh_chains_and_presto_stays_exact(tmp_path):
    """With an EOS id in the vocabulary the MH chains keep the fixed horizon n (no request stops at
    EOS), PreSTO still equals the sequential chain, and only the text for graders is cut at EOS."""
    from presto.runner.run import cut_at_eos

    engine = EosToyEngine(write_toy_table(tmp_path / "eos.json", vocab=4, seed=5, scale=1.0))
    schedule = BlockSchedule(8, 4, 6)
    eos_inside = 0
    for kernel in (PowerMH(2.0, 0.5), EntropyCut(2.0, 0.5, uniform_mix=0.0), MultiTryMH(2.0, 0.5, num_candidates=2)):
        for chain in range(8):
            key = ChainKey(1, 0, chain)
            reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
            for stepper in (PrefetchStepper(BreadthFirst(), 5), PrefetchStepper(PredictiveTraversal(None), 5)):
                state, trace = run_chain(kernel, engine, stepper, [], key, schedule)
                assert_same_chain(reference, reference_trace, state, trace, f"{kernel.name} {chain}")
            assert reference.length == 8
            hits = np.flatnonzero(reference.tokens == 2)
            if hits.size and hits[0] < 7:
                eos_inside += 1
                assert len(cut_at_eos(reference.tokens, engine.eos_token_ids)) == hits[0]
    assert engine.stopping == 0
    assert eos_inside > 0, "no chain held an EOS before its last token: the fixed horizon was not exercised"


# --- exactness and figures through the runner ------------------------------------------------------


def run_toy(table: Path, run_dir: Path, *extra: str, steps: int = 6) -> dict:
    from presto.runner.run import run

    return run(compose_run(*toy_overrides(table, steps=steps), "run.progress=false", *extra), run_dir)


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def chains_of(run_dir: Path) -> dict:
    return {
        (r["prompt_id"], r["chain"]): (r["tokens"], r["accepts"], r["log_accepts"])
        for r in read_lines(run_dir / "chains.jsonl")
    }


def check_figures(run_dir: Path, summary: dict, sequential: bool) -> None:
    """summary.json, chains.jsonl and trees.jsonl agree on transitions, calls and rounds."""
    records = read_lines(run_dir / "chains.jsonl")
    trees = read_lines(run_dir / "trees.jsonl")
    stages = summary["max_new_tokens"] // summary["block_size"]
    assert summary["chains"] == len(records) == summary["expected_chains"] and summary["complete"]
    assert summary["transitions"] == len(records) * stages * summary["steps"] == sum(r["transitions"] for r in records)
    assert summary["model_calls"] == summary["engine_calls"] == sum(r["model_calls"] for r in records)
    accepted = sum(sum(r["accepts"]) for r in records)
    if summary["transitions"]:
        assert summary["acceptance_rate"] == pytest.approx(accepted / summary["transitions"])
        assert summary["transitions_per_call"] == pytest.approx(summary["transitions"] / summary["model_calls"])
    else:
        assert summary["acceptance_rate"] is None and summary["transitions_per_call"] == 0
    for r in records:
        assert len(r["accepts"]) == len(r["log_accepts"]) == r["transitions"]
        assert len(r["call_times_s"]) == r["model_calls"]
        assert sum(r["call_times_s"]) == pytest.approx(r["call_time_s"], abs=1e-9)
    assert summary["prefetch_rounds"] == sum(r["rounds"] for r in records)
    if sequential:
        assert summary["n_pf"] == 1 and not trees
        assert summary["model_calls"] == len(records) * stages * (1 + summary["steps"])
        assert summary["prefetch_rounds"] == summary["transitions"]
    else:
        assert summary["prefetch_rounds"] == len(trees)
        assert sum(t["realized"] for t in trees) == summary["transitions"]
        assert summary["model_calls"] == len(records) * stages + sum(t["model_call"] for t in trees)
        assert all(len(t["requested_depths"]) <= summary["n_pf"] for t in trees)


RUNS = [
    ("powermh", ("sampler.alpha=1.0001",), "bfs", 1),
    ("powermh", ("sampler.alpha=2", "sampler.tau=0.7", "seed=4294967296"), "predictive", 64),
    ("powermh", ("sampler.steps=0",), "bfs", 3),
    ("entropycut", ("sampler.beta=0", "sampler.uniform_mix=0"), "bfs", 64),
    ("entropycut", ("sampler.uniform_mix=1", "sampler.max_new_tokens=6", "sampler.block_size=1"), "predictive", 2),
    ("multitry", ("sampler.num_candidates=1", "sampler.temperatures=[0.5,0.5,1.0]"), "predictive", 20),
    ("multitry", ("sampler.temperatures=[0.5]", "sampler.steps=1", "sampler.block_size=8"), "bfs", 2),
    ("multitry", ("dataset.num_prompts=3", "run.chains_per_prompt=3", "seed=7"), "bfs", 5),
]


@pytest.mark.parametrize(("sampler", "options", "traversal", "n_pf"), RUNS, ids=lambda v: str(v))
def test_runs_equal_sequential_runs_and_their_figures_add_up(table, tmp_path, sampler, options, traversal, n_pf):
    common = (f"sampler={sampler}", *options)
    sequential = run_toy(table, tmp_path / "sequential", *common, "traversal=sequential", f"budget.n_pf={n_pf}")
    presto = run_toy(table, tmp_path / "presto", *common, f"traversal={traversal}", f"budget.n_pf={n_pf}")
    assert chains_of(tmp_path / "presto") == chains_of(tmp_path / "sequential")
    check_figures(tmp_path / "sequential", sequential, sequential=True)
    check_figures(tmp_path / "presto", presto, sequential=False)
    assert presto["n_pf"] == n_pf and presto["transitions"] == sequential["transitions"]
    assert presto["model_calls"] <= sequential["model_calls"]
    if traversal == "bfs" and n_pf == 1:
        assert presto["model_calls"] == sequential["model_calls"]


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
def test_predictive_without_cost_awareness_makes_the_bfs_calls(table, tmp_path, sampler):
    """cost_aware=false is documented to request every depth BFS would: same requests, same calls."""
    common = (f"sampler={sampler}", "budget.n_pf=3", "sampler.alpha=2", "sampler.tau=0.8")
    bfs = run_toy(table, tmp_path / "bfs", *common, "traversal=bfs", steps=9)
    predictive = run_toy(
        table, tmp_path / "pred", *common, "traversal=predictive", "traversal.cost_aware=false", steps=9
    )
    assert chains_of(tmp_path / "pred") == chains_of(tmp_path / "bfs")
    assert predictive["model_calls"] == bfs["model_calls"]
    assert [t["requested_depths"] for t in read_lines(tmp_path / "pred" / "trees.jsonl")] == [
        t["requested_depths"] for t in read_lines(tmp_path / "bfs" / "trees.jsonl")
    ]


# --- resume -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sampler", "options", "traversal"),
    [
        ("entropycut", ("sampler.beta=0", "sampler.uniform_mix=0"), "bfs"),
        ("multitry", ("sampler.num_candidates=1", "sampler.temperatures=[0.5,0.5]"), "predictive"),
    ],
)
def test_a_killed_presto_run_resumes_to_the_sequential_chains(table, tmp_path, sampler, options, traversal):
    """A session killed after its first chain (its trees of the chain in flight written): the resume
    drops those trees, runs the rest, and ends with the sequential chains and figures that add up."""
    common = (f"sampler={sampler}", *options, "budget.n_pf=5")
    run_toy(table, tmp_path / "sequential", *common, "traversal=sequential", steps=9)
    full = run_toy(table, tmp_path / "full", *common, f"traversal={traversal}", steps=9)
    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(tmp_path / "full" / "config.yaml", killed / "config.yaml")
    first = (tmp_path / "full" / "chains.jsonl").read_text().splitlines()[0]
    (killed / "chains.jsonl").write_text(first + "\n")
    shutil.copy(tmp_path / "full" / "trees.jsonl", killed / "trees.jsonl")  # more rounds than chains
    resumed = run_toy(table, killed, *common, f"traversal={traversal}", "run.resume=true", steps=9)
    assert chains_of(killed) == chains_of(tmp_path / "sequential") == chains_of(tmp_path / "full")
    check_figures(killed, resumed, sequential=False)
    assert resumed["transitions"] == full["transitions"]
    if traversal == "bfs":  # deterministic plans: the same rounds and calls as the uninterrupted run
        assert resumed["model_calls"] == full["model_calls"]
        assert resumed["prefetch_rounds"] == full["prefetch_rounds"]


@pytest.mark.parametrize(
    ("override", "key"),
    [("traversal=sequential", "traversal.name"), ("budget.n_pf=3", "budget.n_pf"), ("sampler.tau=0.5", "sampler.tau")],
)
def test_a_resume_with_another_traversal_or_budget_is_refused_in_one_line(table, tmp_path, override, key):
    run_dir = tmp_path / "run"
    first = run_cli(*toy_args(table, run_dir, "budget.n_pf=5", "run.progress=false"))
    assert first.returncode == 0, first.stderr
    before = (run_dir / "chains.jsonl").read_text()
    again = run_cli(*toy_args(table, run_dir, "budget.n_pf=5", "run.progress=false", "run.resume=true", override))
    assert again.returncode != 0
    assert "Traceback" not in again.stderr
    errors = [line for line in again.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and key in errors[0] and str(run_dir) in errors[0], again.stderr
    assert (run_dir / "chains.jsonl").read_text() == before  # nothing mixed into the finished run


# --- law ---------------------------------------------------------------------------------------------

VOCAB = 3
LAW_CHAINS = 600


@pytest.fixture(scope="module")
def law_table(tmp_path_factory) -> Path:
    return write_toy_table(tmp_path_factory.mktemp("optionspace_law") / "t.json", vocab=VOCAB, seed=9, scale=1.2)


def multitry_m1_matrix(model: ToyModel, length: int, alpha: float, temperatures: tuple[float, ...]):
    """MultiTryMH with M = 1 in closed form: y ~ q_mix after a uniform cut, accepted with
    min(1, w(y) / w(x)), w = p0^alpha / q_mix; q_mix averages over the LIST (duplicates weigh twice)."""

    def log_q_mix(seq, start):
        logs = [model.per_token(seq, start, t).sum() for t in temperatures]
        return float(np.logaddexp.reduce(logs) - math.log(len(logs)))

    def log_w(seq, start):
        return alpha * float(model.per_token(seq, start).sum()) - log_q_mix(seq, start)

    states = list(itertools.product(range(model.vocab), repeat=length))
    index = {s: i for i, s in enumerate(states)}
    matrix = np.zeros((len(states), len(states)))
    for x in states:
        for c in range(length):
            for tail in itertools.product(range(model.vocab), repeat=length - c):
                y = x[:c] + tail
                q = math.exp(log_q_mix(y, c)) / length
                accept = math.exp(min(0.0, log_w(y, c) - log_w(x, c)))
                matrix[index[x], index[y]] += q * accept
                matrix[index[x], index[x]] += q * (1 - accept)
    return states, matrix


def block_law(model: ToyModel, matrix_of, n: int, block: int, steps: int, tau: float) -> dict:
    """The exact law of the final state: per block, the extension at tau then ``steps`` kernel steps."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for length in range(block, n + 1, block):
        extended: dict[tuple[int, ...], float] = {}
        for prefix, mass in law.items():
            for tail in itertools.product(range(model.vocab), repeat=block):
                seq = prefix + tail
                extended[seq] = extended.get(seq, 0.0) + mass * math.exp(model.per_token(seq, len(prefix), tau).sum())
        states, matrix = matrix_of(length)
        law = dict(
            zip(states, np.array([extended[s] for s in states]) @ np.linalg.matrix_power(matrix, steps), strict=True)
        )
    return law


def uniform_cut_matrix(model, alpha, tau):
    return lambda length: reference_matrix(model, length, 0.0, 1.0, alpha, tau)  # uniform_mix = 1: PowerMH


# name: (kernel, exact kernel matrix of a length given the ToyModel, n, B, K)
LAW_CASES = {
    "powermh-tau-ne-1/alpha": (lambda: PowerMH(2.0, 1.0), lambda m: uniform_cut_matrix(m, 2.0, 1.0), 3, 3, 20),
    "powermh-alpha-below-1": (lambda: PowerMH(0.5, 2.0), lambda m: uniform_cut_matrix(m, 0.5, 2.0), 3, 3, 20),
    "entropycut-beta0-mix0-two-blocks": (
        lambda: EntropyCut(2.0, 0.7, beta=0.0, uniform_mix=0.0),
        lambda m: lambda length: reference_matrix(m, length, 0.0, 0.0, 2.0, 0.7),
        4,
        2,
        12,
    ),
    "entropycut-mix1-is-powermh": (
        lambda: EntropyCut(3.0, 0.5, beta=4.0, uniform_mix=1.0),
        lambda m: uniform_cut_matrix(m, 3.0, 0.5),
        3,
        3,
        20,
    ),
    "multitry-M1-duplicate-temperatures": (
        lambda: MultiTryMH(2.0, 0.7, num_candidates=1, temperatures=[0.5, 0.5, 1.0]),
        lambda m: lambda length: multitry_m1_matrix(m, length, 2.0, (0.5, 0.5, 1.0)),
        3,
        3,
        20,
    ),
    "multitry-M1-one-temperature-is-powermh": (
        lambda: MultiTryMH(2.0, 0.5, num_candidates=1, temperatures=[0.5]),
        lambda m: uniform_cut_matrix(m, 2.0, 0.5),
        3,
        3,
        20,
    ),
}


@pytest.mark.parametrize("case", list(LAW_CASES))
def test_final_states_follow_the_exact_law_at_unusual_options(law_table, case):
    make_kernel, make_matrix, n, block, steps = LAW_CASES[case]
    kernel = make_kernel()
    model = ToyModel(ToyEngine(law_table))
    law = block_law(model, make_matrix(model), n, block, steps, kernel.tau)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-9)
    engine = CachedToyEngine(law_table)
    rules = [SequentialStepper(), PrefetchStepper(BreadthFirst(), 3), PrefetchStepper(PredictiveTraversal(None), 5)]
    counts: dict[tuple[int, ...], int] = {}
    for chain in range(LAW_CHAINS):
        state, _ = run_chain(
            kernel, engine, rules[chain % 3], [], ChainKey(11, 0, chain), BlockSchedule(n, block, steps)
        )
        final = tuple(int(t) for t in state.tokens)
        counts[final] = counts.get(final, 0) + 1
    assert chi_square_pvalue(counts, law) > 1e-3
    # The test has power on these samples: p0 (alpha = 1) is rejected, and so is the extension law
    # where it is far enough from the K-step law to be told apart with this many chains.
    states = list(itertools.product(range(VOCAB), repeat=n))
    assert chi_square_pvalue(counts, dict(zip(states, model.target(n, alpha=1.0)[1], strict=True))) < 1e-6
    extension = dict(zip(states, model.extension_law(n, kernel.tau), strict=True))
    if 0.5 * sum(abs(law[s] - extension[s]) for s in states) > 0.15:
        assert chi_square_pvalue(counts, extension) < 1e-6

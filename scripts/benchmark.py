"""Side-by-side benchmark: sequential samplers vs PreSTO on the same prompts, seeds and engine.

    python scripts/benchmark.py                          # embedded default, BFS at N_pf 5, 10, 20
    python scripts/benchmark.py --n-pf 20 engine=vllm    # any Hydra override of conf/ applies

One process loads the engine once and, prompt by prompt, runs the sequential chain and then
every PreSTO setting, so machine noise hits all settings alike; the engine's prefix cache
(vLLM) is emptied before each, so no setting is served what the one before it computed.
It prints, per setting, the speedup in summed model-call time over the sequential chain,
its decomposition into totals (ratio of all calls, ratio of all call time over all calls:
the speedup is exactly the first divided by the second; scripts/report.py decomposes by
prompt instead, as the paper's eq. 20 does, which differs when prompts differ in length),
transitions per call, the fraction of chains identical to the sequential ones (same final
tokens and accept flags; 1.0 on a deterministic engine) and the fraction that also took the
same path (the same log A at every transition, to 1e-9: 1.0 on a batch-invariant engine,
below it where batching moves log-probabilities in their last digits, as the transformers
engine in float32 or bfloat16 does). Figures go to a JSON file too.

A second table puts each PreSTO setting's walk beside the oracle: the transitions one
prefetch round realized on average, and the expected transitions per round of the
node-level oracle (Proposition 2's DP with the true acceptance probabilities) and of this
codebase's one-request-per-depth BFS, replayed on the trees the BFS run of the same
sampler and budget logged (scripts/oracle_bound.py; its own rounds when no BFS run is
there, where depths that run did not request count as unavailable).

``--traversals clairvoyant`` adds a measuring instrument, not a rule a run could use: each
of its rounds requests exactly the depths the walk will decide, read off the sequential
chain just run (presto.prefetch.clairvoyant). Its time against BFS is the most any rule
that chooses how many depths to request can save on this machine and engine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))

CLAIRVOYANT = "clairvoyant"
"""Not a config group choice: the benchmark builds it per chain from the sequential run."""
REPLAY_LOGGED_NODES = 1024
"""Tree nodes logged per round for the oracle replay (a truncated tree lowers every replayed row)."""


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the script's own arguments, Hydra overrides), which may come in any order.

    argparse alone cannot tell ``--n-pf 20 engine=hf`` apart (``nargs="+"`` would take
    ``engine=hf`` as a budget), so overrides (``key=value``, ``+key=value``, ``~key``) are
    set aside first and the rest is parsed strictly: a mistyped option is an error.
    """
    is_override = [not a.startswith("-") and ("=" in a or a.startswith("~")) for a in argv]
    own = [a for a, flag in zip(argv, is_override, strict=True) if not flag]
    return own, [a for a, flag in zip(argv, is_override, strict=True) if flag]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-pf", type=int, nargs="+", default=[5, 10, 20], help="PreSTO budgets to compare")
    parser.add_argument(
        "--traversals",
        nargs="+",
        default=["bfs"],
        help=f"PreSTO traversal rules to compare; {CLAIRVOYANT} is the walk-length oracle (see above)",
    )
    parser.add_argument("--samplers", nargs="+", default=None, help="samplers (default: the config's)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the figures")
    own, overrides = split_overrides(argv)
    args = parser.parse_args(own)
    if min(args.n_pf) < 1:
        parser.error(f"--n-pf values must be >= 1, got {min(args.n_pf)}")
    if "sequential" in args.traversals:
        parser.error(
            f"--traversals lists PreSTO traversals (bfs, predictive, {CLAIRVOYANT}); the sequential chain always runs"
        )
    # A setting given twice would run twice and pair its chains with the wrong baseline.
    args.n_pf = list(dict.fromkeys(args.n_pf))
    args.traversals = list(dict.fromkeys(args.traversals))
    args.samplers = None if args.samplers is None else list(dict.fromkeys(args.samplers))
    return args, overrides


def compose(overrides: list[str]):
    """The config of ``overrides``; a ConfigError with one line when Hydra cannot compose it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    from presto.cli import register_resolvers
    from presto.config import ConfigError

    register_resolvers(PROJECT_ROOT)
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        try:
            return hydra_compose(config_name="config", overrides=overrides)
        except HydraException as err:  # an unknown key, a group option that does not exist
            raise ConfigError(" ".join(line.strip() for line in str(err).splitlines() if line.strip())) from None


def fail(message: str) -> int:
    print(f"error: {message.splitlines()[0] if message else message}", file=sys.stderr)
    return 2


def load_config(overrides: list[str]):
    """(overrides with the default engine filled in, composed config); bad group choices exit with one line."""
    from presto.cli import check_group_choices, with_default_engine

    overrides = with_default_engine(overrides)
    check_group_choices(PROJECT_ROOT / "conf", overrides)
    return overrides, compose(overrides)


def main(argv: list[str]) -> int:
    args, overrides = parse_args(argv)
    from presto.cli import user_errors
    from presto.eval.runs import check_output_file

    if args.out is not None:
        try:
            check_output_file(args.out, "--out")  # before the work, not after it
        except ValueError as err:
            return fail(str(err))
    args.out = args.out or PROJECT_ROOT / "outputs" / "benchmarks" / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
    args.finished_samplers = []  # saved to args.out as each one finishes
    try:
        return benchmark(args, overrides)
    except user_errors() as err:
        return fail(str(err) or type(err).__name__)
    except KeyboardInterrupt:
        done = args.finished_samplers
        kept = f"the figures of {', '.join(done)} are in {args.out}" if done else "no figures written"
        print(f"\ninterrupted: {kept} (the lines above are the chains that finished)", file=sys.stderr)
        return 130


def benchmark(args: argparse.Namespace, overrides: list[str]) -> int:
    from omegaconf import OmegaConf

    from presto.baselines import BASELINES
    from presto.cli import check_group_choices
    from presto.config import ConfigError, validate, validate_sampler
    from presto.prefetch.clairvoyant import ClairvoyantTraversal, TrajectoryRecorder
    from presto.prefetch.presto import PrefetchStepper
    from presto.prefetch.traversal import TRAVERSALS
    from presto.runner.run import load_task_and_engine, sample_chain, warn_if_not_exact
    from presto.samplers import build_kernel
    from presto.samplers.chain import BlockSchedule, SequentialStepper

    overrides, cfg = load_config(overrides)
    if args.samplers:
        check_group_choices(PROJECT_ROOT / "conf", [f"sampler={name}" for name in args.samplers])
    rules = [name for name in args.traversals if name != CLAIRVOYANT]
    known = sorted([*TRAVERSALS.names(), CLAIRVOYANT])
    for name in rules:
        if name not in TRAVERSALS:
            raise ConfigError(f"--traversals {name}: not a PreSTO traversal; choose from {', '.join(known)}")
    settings = validate(cfg)
    samplers = args.samplers or [settings.sampler.name]
    baselines = [name for name in samplers if name in BASELINES]
    if baselines:
        raise ConfigError(
            f"sampler={baselines[0]} is a test-time baseline, not an MH sampler; the benchmark compares "
            "MH samplers (powermh, entropycut, multitry) with their PreSTO walks"
        )
    out = args.out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot create its folder ({err.strerror or err})") from None
    task, problems, engine = load_task_and_engine(cfg, settings)
    warn_if_not_exact(engine)  # the "identical" column then says how often it mattered
    traversal_options = {}
    for name in rules:
        options = OmegaConf.to_container(compose([*overrides, f"traversal={name}"]).traversal, resolve=True)
        options.pop("name")
        TRAVERSALS[name].from_options(options)  # bad options stop the benchmark before any chain
        traversal_options[name] = options
    rows = []
    for sampler in samplers:
        sampler_cfg = compose([*overrides, f"sampler={sampler}"]) if sampler != settings.sampler.name else cfg
        sampler_settings = validate_sampler(sampler_cfg)
        kernel = build_kernel(sampler_settings)
        schedule = BlockSchedule(sampler_settings.max_new_tokens, sampler_settings.block_size, sampler_settings.steps)
        setups = [("sequential", 1)] + [(t, n) for t in args.traversals for n in args.n_pf]
        # One traversal per sampler and budget, as one run would have: what a rule learns
        # online (call costs, reach calibration) must not carry over from another setting.
        traversals = {
            setup: TRAVERSALS[setup[0]].from_options(traversal_options[setup[0]])
            for setup in setups
            if setup[0] not in ("sequential", CLAIRVOYANT)
        }
        records: dict[tuple[str, int], list[dict]] = {setup: [] for setup in setups}
        rounds: dict[tuple[str, int], list[dict]] = {setup: [] for setup in setups}
        for problem in problems:
            for chain in range(settings.chains_per_prompt):
                recorder = TrajectoryRecorder()  # the sequential chain, whose future the clairvoyant reads
                for traversal, n_pf in setups:
                    if traversal == "sequential":
                        stepper = recorder if CLAIRVOYANT in args.traversals else SequentialStepper()
                    else:
                        rule = (
                            ClairvoyantTraversal(recorder.trajectory)
                            if traversal == CLAIRVOYANT
                            else traversals[(traversal, n_pf)]
                        )
                        stepper = PrefetchStepper(rule, n_pf, rounds[(traversal, n_pf)].append, REPLAY_LOGGED_NODES)
                    # Every setting starts cold: all share the chain's random inputs, so without
                    # this the prompt and states one setting computed would be cached for the next.
                    engine.reset_prefix_cache()
                    record = sample_chain(engine, kernel, stepper, task, problem, chain, settings.seed, schedule)
                    records[(traversal, n_pf)].append(record)
                    print(
                        f"  {sampler} {traversal:>10} n_pf={n_pf:<3} {problem.problem_id} chain {chain}: "
                        f"{record['transitions'] / record['model_calls']:.2f} transitions/call, "
                        f"{record['call_time_s']:.2f} s in calls",
                        flush=True,
                    )
        baseline = records[("sequential", 1)]
        base_calls = sum(r["model_calls"] for r in baseline)
        base_time = sum(r["call_time_s"] for r in baseline)
        expected = expected_per_round(rounds, args.n_pf)
        for (traversal, n_pf), recs in records.items():
            calls = sum(r["model_calls"] for r in recs)
            call_time = sum(r["call_time_s"] for r in recs)
            transitions = sum(r["transitions"] for r in recs)
            identical = sum(same_outcome(r, b) for r, b in zip(recs, baseline, strict=True))
            same_log_a = sum(same_path(r, b) for r, b in zip(recs, baseline, strict=True))
            rows.append(
                {
                    "sampler": sampler,
                    "traversal": traversal,
                    "n_pf": n_pf,
                    "chains": len(recs),
                    "model_calls": calls,
                    "call_time_s": call_time,
                    "transitions_per_call": transitions / calls,
                    "time_per_call_s": call_time / calls,
                    "speedup": base_time / call_time,
                    "call_reduction": base_calls / calls,
                    "time_per_call_ratio": (call_time / calls) / (base_time / base_calls),
                    "identical_chains": identical / len(recs),
                    "same_path_chains": same_log_a / len(recs),
                    "discarded_per_call": sum(r["discarded_requests"] for r in recs) / calls,
                    "unique_requests_per_call": sum(r["unique_requests"] for r in recs) / calls,
                    "loglik_mean": sum(r["loglik"] for r in recs) / len(recs),
                    **walk_versus_oracle(rounds[(traversal, n_pf)], expected.get(n_pf)),
                }
            )
        # Each finished sampler's rows are kept at once: an interrupted benchmark loses only the
        # sampler under way ("complete": false until the last one is in).
        save(out, {"overrides": overrides, "rows": rows, "engine_metrics": None, "complete": False})
        args.finished_samplers.append(sampler)
    metrics = engine.metrics()
    engine.close()
    print_table(rows, cfg, metrics)
    try:
        save(out, {"overrides": overrides, "rows": rows, "engine_metrics": metrics, "complete": True})
    except OSError as err:
        return fail(f"--out {out}: cannot write it ({err.strerror or err}); the tables above are complete")
    print(f"figures written to {out}")
    return 0


LOG_ACCEPT_TOLERANCE = 1e-9
"""How far two runs' log A of one decision may differ and still be one path: the transformers
engine in float64 is batch-invariant to ~1e-14 (shared-prefix prefill), not bit for bit, while
another proposal or state moves log A by far more."""


def same_outcome(record: dict, reference: dict) -> bool:
    """A chain ended as the reference did: same final tokens, same accept flag at every transition."""
    return record["tokens"].tolist() == reference["tokens"].tolist() and record["accepts"] == reference["accepts"]


def same_path(record: dict, reference: dict) -> bool:
    """A chain took the reference's path: its outcome, and the same log A at every transition.

    Equal final tokens and accept flags could hide proposals that differed along the way.
    """
    if not same_outcome(record, reference):
        return False
    pairs = zip(record["log_accepts"], reference["log_accepts"], strict=True)
    return all(a == b or abs(a - b) <= LOG_ACCEPT_TOLERANCE for a, b in pairs)


def save(out: Path, figures: dict) -> None:
    from presto.runner.outputs import write_json_atomic

    write_json_atomic(out, figures)


def expected_per_round(rounds: dict[tuple[str, int], list[dict]], budgets: list[int]) -> dict[int, dict]:
    """Per budget, the replay of the BFS run's trees (it generated every depth up to N_pf, so no
    node the oracle might pick is missing), or of the first traversal's when there is no BFS run."""
    from oracle_bound import replay_rounds

    expected = {}
    for n_pf in budgets:
        sources = [t for (t, n), logged in rounds.items() if n == n_pf and t != "sequential" and logged]
        if sources:
            source = "bfs" if "bfs" in sources else sources[0]
            replayed = replay_rounds(rounds[(source, n_pf)], [n_pf], predictor=None)
            expected[n_pf] = {"source": source, "replayed": replayed}
    return expected


def walk_versus_oracle(own: list[dict], expected: dict | None) -> dict:
    """Transitions per prefetch round: realized by this setting, expected for the oracle and for BFS."""
    if not own or expected is None:
        return {}
    by_method = {row["method"]: row["transitions_per_call"] for row in expected["replayed"]["rows"]}
    return {
        "rounds": len(own),
        "transitions_per_round": sum(r["realized"] for r in own) / len(own),
        "oracle_transitions_per_round": by_method["oracle"],
        "bfs_expected_transitions_per_round": by_method["shared-bfs"],
        "oracle_replayed_on": expected["source"],
        "replayed_rounds_with_truncated_trees": expected["replayed"]["rounds_with_truncated_logs"],
    }


def print_table(rows: list[dict], cfg, metrics: dict) -> None:
    s = cfg.sampler
    print(
        f"\nengine={cfg.engine.name} model={cfg.model.path} dataset={cfg.dataset.name} "
        f"prompts={cfg.dataset.num_prompts} chains/prompt={cfg.run.chains_per_prompt} "
        f"alpha={s.alpha} n={s.max_new_tokens} B={s.block_size} K={s.steps} seed={cfg.seed}"
    )
    header = (
        f"{'sampler':<11}{'traversal':<11}{'n_pf':>5}{'calls':>7}{'call s':>9}{'trans/call':>11}"
        f"{'s/call':>8}{'speedup':>9}{'calls÷':>8}{'s/call×':>9}{'identical':>10}{'same log A':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['sampler']:<11}{r['traversal']:<11}{r['n_pf']:>5}{r['model_calls']:>7}{r['call_time_s']:>9.2f}"
            f"{r['transitions_per_call']:>11.2f}{r['time_per_call_s']:>8.3f}{r['speedup']:>8.2f}x"
            f"{r['call_reduction']:>7.2f}x{r['time_per_call_ratio']:>8.2f}x{r['identical_chains']:>10.2f}"
            f"{r['same_path_chains']:>11.2f}"
        )
    walks = [r for r in rows if "transitions_per_round" in r]
    if walks:
        print(
            "\nMH transitions per prefetch round: realized, and expected with the true acceptance "
            "probabilities for the node-level oracle (Proposition 2 DP) and for one-request-per-depth BFS"
        )
        header = f"{'sampler':<11}{'traversal':<11}{'n_pf':>5}{'rounds':>8}{'realized':>10}{'oracle':>8}{'bfs E':>8}"
        print(header)
        print("-" * len(header))
        for r in walks:
            print(
                f"{r['sampler']:<11}{r['traversal']:<11}{r['n_pf']:>5}{r['rounds']:>8}"
                f"{r['transitions_per_round']:>10.2f}{r['oracle_transitions_per_round']:>8.2f}"
                f"{r['bfs_expected_transitions_per_round']:>8.2f}"
                + (f"   (replayed on {r['oracle_replayed_on']} trees)" if r["oracle_replayed_on"] != "bfs" else "")
            )
    if metrics:
        print("engine metrics: " + ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

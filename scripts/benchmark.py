"""Side-by-side benchmark: sequential samplers vs PreSTO on the same prompts, seeds and engine.

    python scripts/benchmark.py                          # embedded default, BFS at N_pf 5, 10, 20
    python scripts/benchmark.py --n-pf 20 engine=vllm    # Hydra overrides of conf/, as below
    python scripts/benchmark.py --samplers powermh entropycut --traversals bfs predictive sampler.beta=2
                                                         # sampler.beta is EntropyCut's: it goes to EntropyCut

``budget.n_pf=8,12``, ``traversal=bfs,predictive`` and ``sampler=entropycut`` stand for
``--n-pf 8 12``, ``--traversals bfs predictive`` and ``--samplers entropycut`` (give the
override or the option, not both), and ``sampler.KEY=V`` / ``traversal.KEY=V`` go to each
benchmarked sampler / rule whose config has KEY (one that none has is an error). Overrides a
run reads and a benchmark has no use for (hydra.*, logger, launcher, run.resume, run.rescore,
run.max_logged_nodes) are refused rather than ignored; run.progress=false hides the replay's bar.

One process loads the engine once and, prompt by prompt, runs the sequential chain and then
every PreSTO setting, so machine noise hits all settings alike; the engine's prefix cache
(vLLM) is emptied before each, so no setting is served what the one before it computed, and
one untimed warm-up call precedes the first chain, so the engine's one-time setup is not
charged to the sequential chain that always runs first.
It prints, per setting, the speedup in summed model-call time over the sequential chain,
its decomposition into totals (ratio of all calls, ratio of all call time over all calls:
the speedup is exactly the first divided by the second; scripts/report.py decomposes by
prompt instead, as the paper's eq. 20 does, which differs when prompts differ in length),
transitions per call, the fraction of chains identical to the sequential ones (same final
tokens and accept flags; 1.0 on a deterministic engine) and the fraction that also took the
same path (the same log A at every transition, to 1e-9: 1.0 on a batch-invariant engine,
below it where batching moves log-probabilities in their last digits, as the transformers
engine in float32 or bfloat16 does). Figures go to a JSON file too (--out), rewritten as each
chain finishes in every setting: ``rows`` holds the samplers that finished, ``partial_rows``
the one under way over its finished chains (without the oracle columns), ``complete`` is false
until the end. Ctrl-C or SIGTERM stops the benchmark with exit status 130, keeping that file.

A second table gives each setting's wall-clock time over its chains, the part spent outside
model calls (planning with the predictive rule's DPs and predictor, walking, tree logging)
per call, and the wall-clock speedup: what a user waits, beside what prefetching changes.

A third table puts each PreSTO setting's walk beside the oracle: the transitions one
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
import os
import signal
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
    # The value after --out is a path, whatever it holds (outputs/n_pf=20.json).
    is_override = [
        not a.startswith("-") and ("=" in a or a.startswith("~")) and (i == 0 or argv[i - 1] != "--out")
        for i, a in enumerate(argv)
    ]
    own = [a for a, flag in zip(argv, is_override, strict=True) if not flag]
    return own, [a for a, flag in zip(argv, is_override, strict=True) if flag]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--n-pf", type=int, nargs="+", default=None, help="PreSTO budgets to compare (default: 5 10 20)"
    )
    parser.add_argument(
        "--traversals",
        nargs="+",
        default=None,
        help=f"PreSTO traversal rules to compare (default: bfs); {CLAIRVOYANT} is the walk-length oracle (see above)",
    )
    parser.add_argument("--samplers", nargs="+", default=None, help="samplers (default: the config's)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the figures")
    own, overrides = split_overrides(argv)
    return parser.parse_args(own), overrides


DEFAULT_BUDGETS = [5, 10, 20]
DEFAULT_TRAVERSALS = ["bfs"]
# Overrides that choose what the benchmark's own options choose: ``budget.n_pf=8,12`` is
# ``--n-pf 8 12``, ``traversal=bfs,predictive`` is ``--traversals bfs predictive`` and
# ``sampler=entropycut`` is ``--samplers entropycut`` (the sweep syntax of src/main.py -m).
SETTING_OVERRIDES = {"budget.n_pf": "n_pf", "traversal": "traversals", "sampler": "samplers"}
UNUSED_OVERRIDES = {
    "hydra": "the benchmark writes no run directory, only its --out file",
    "launcher": "the benchmark runs every setting in this one process",
    "logger": "the benchmark logs to no tracker; its figures go to --out",
    "run.resume": "a benchmark does not resume (each chain runs in every setting side by side)",
    "run.rescore": "the benchmark reports no rescored statistics",
    "run.max_logged_nodes": f"the benchmark writes no trees; its replay keeps {REPLAY_LOGGED_NODES} nodes a round",
}
"""Overrides a run reads and the benchmark does not: refused, since they would silently do nothing."""
OPTION_GROUPS = ("sampler", "traversal")
"""Config groups the benchmark runs several options of: ``GROUP.KEY=VALUE`` goes to those that have KEY."""


def choose_settings(args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """Fill in args.n_pf, args.traversals and args.samplers; return the overrides left for Hydra.

    Each setting comes from its option or from its override (one, not both: the other would
    silently do nothing), else from its default. An override the benchmark has no use for
    (UNUSED_OVERRIDES) is a ConfigError. run.progress=false turns the oracle replay's bar off.
    """
    from presto.config import ConfigError

    for dest in ("n_pf", "traversals"):  # the options' values, checked as the overrides' are below
        if getattr(args, dest) is not None:
            check_setting(dest, getattr(args, dest), "--" + dest.replace("_", "-"))
    rest = []
    # Which argument chose each setting: the option, or the first override that did.
    chosen_by = {dest: "--" + dest.replace("_", "-") for dest in SETTING_OVERRIDES.values() if getattr(args, dest)}
    for override in overrides:
        key, _, value = override.partition("=")
        name = key.lstrip("+~")
        unused = UNUSED_OVERRIDES.get(name.split("/")[0].split(".")[0]) or UNUSED_OVERRIDES.get(name)
        if unused is not None:
            raise ConfigError(f"{override}: {unused}")
        dest = SETTING_OVERRIDES.get(name)
        if dest is None:
            rest.append(override)
            continue
        option = "--" + dest.replace("_", "-")
        if key.startswith("~"):  # +budget.n_pf=8 and ++budget.n_pf=8 choose it too; a deletion does not
            raise ConfigError(f"{override}: the benchmark's {dest} cannot be deleted; choose it with {option}")
        if dest in chosen_by:
            raise ConfigError(f"{override} and {chosen_by[dest]} both choose the benchmark's {dest}; give one of them")
        chosen_by[dest] = override
        values = [v.strip() for v in value.split(",")]
        if dest == "n_pf":
            try:
                values = [int(v) for v in values]
            except ValueError:
                raise ConfigError(f"{override}: budgets are integers >= 1 ({option} N [N ...])") from None
        check_setting(dest, values, override)
        setattr(args, dest, values)
    args.n_pf = args.n_pf or DEFAULT_BUDGETS
    args.traversals = args.traversals or DEFAULT_TRAVERSALS
    # A setting given twice would run twice and pair its chains with the wrong baseline.
    args.n_pf = list(dict.fromkeys(args.n_pf))
    args.traversals = list(dict.fromkeys(args.traversals))
    args.samplers = None if args.samplers is None else list(dict.fromkeys(args.samplers))
    return rest


def check_setting(dest: str, values: list, source: str) -> None:
    """The one check of the budgets or traversals, whether an option or an override gave them."""
    from presto.config import ConfigError

    if dest == "n_pf" and min(values) < 1:
        raise ConfigError(f"{source}: budgets must be integers >= 1, got {min(values)}")
    if dest != "traversals":
        return
    from presto.prefetch.traversal import TRAVERSALS

    known = sorted([*TRAVERSALS.names(), CLAIRVOYANT])
    if "sequential" in values:
        raise ConfigError(f"{source}: the sequential chain always runs; list PreSTO traversals ({', '.join(known)})")
    unknown = [name for name in values if name not in known]
    if unknown:
        raise ConfigError(f"{source}: {unknown[0]} is not a PreSTO traversal; choose from {', '.join(known)}")


def option_override(override: str) -> tuple[str, str] | None:
    """(group, key) of an override of one group option's key (``sampler.beta=2``), else None."""
    name = override.lstrip("+~").split("=", 1)[0]
    group, _, key = name.partition(".")
    return (group, key.split(".")[0]) if group in OPTION_GROUPS and key else None


class SettingConfigs:
    """The config of each benchmarked (sampler, traversal), composed from the command line's overrides.

    One Hydra config holds one sampler and one traversal, so ``sampler.beta=2`` (EntropyCut's)
    cannot compose with ``sampler=powermh``: each option's config gets the ``GROUP.KEY`` overrides
    whose KEY it has (``+GROUP.KEY`` ones, which add a key, go to every option).
    """

    def __init__(self, overrides: list[str], samplers: list[str], traversals: list[str]) -> None:
        from presto.config import ConfigError

        self.base = [o for o in overrides if option_override(o) is None]
        self.scoped = [o for o in overrides if option_override(o) is not None]
        self._keys: dict[tuple[str, str], set[str]] = {}
        chosen = {"sampler": samplers, "traversal": traversals}
        for override in self.scoped:
            group, key = option_override(override)
            if not any(self._applies(override, group, name) for name in chosen[group]):
                names = ", ".join(chosen[group]) or "none"
                raise ConfigError(f"{override}: no {group} benchmarked here has {group}.{key} (the {group}s: {names})")

    def _applies(self, override: str, group: str, name: str) -> bool:
        if override.startswith("+"):
            return True
        if (group, name) not in self._keys:
            self._keys[(group, name)] = set(compose([*self.base, f"{group}={name}"])[group].keys())
        return option_override(override)[1] in self._keys[(group, name)]

    def overrides(self, sampler: str | None = None, traversal: str | None = None) -> list[str]:
        """The overrides of one sampler and/or traversal (a group not named keeps the config's default)."""
        chosen = {"sampler": sampler, "traversal": traversal}
        picked = [*self.base, *(f"{group}={name}" for group, name in chosen.items() if name is not None)]
        for override in self.scoped:
            group = option_override(override)[0]
            if chosen[group] is not None and self._applies(override, group, chosen[group]):
                picked.append(override)
        return picked

    def compose(self, sampler: str | None = None, traversal: str | None = None):
        return compose(self.overrides(sampler, traversal))


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
    # The process id too: benchmarks started in the same second (a launcher's jobs) must not share a file.
    stamp = f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}"
    args.out = args.out or PROJECT_ROOT / "outputs" / "benchmarks" / f"{stamp}.json"
    args.finished_samplers = []  # saved to args.out as each one finishes
    args.under_way = None  # (sampler, chains it finished in every setting), saved as partial_rows
    from presto.cli import terminate_like_interrupt

    # SIGTERM (Slurm, ``timeout``) stops the benchmark as Ctrl-C does, keeping the figures so far.
    previous = terminate_like_interrupt()
    try:
        return benchmark(args, overrides)
    except FiguresNotWritten as err:
        return fail(str(err))
    except user_errors() as err:
        return fail(str(err) or type(err).__name__)
    except KeyboardInterrupt:
        print(f"\ninterrupted: {kept_figures(args)} (the lines above are the chains that finished)", file=sys.stderr)
        return 130
    finally:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)


def kept_figures(args: argparse.Namespace) -> str:
    """What an interrupted benchmark left in args.out."""
    done, under_way = args.finished_samplers, args.under_way
    kept = [f"the figures of {', '.join(done)} are in {args.out}"] if done else []
    if under_way:
        sampler, chains = under_way
        what = f"{chains} chain{'s' if chains != 1 else ''} of {sampler} that finished in every setting"
        kept.append(
            f"those of the {what} under partial_rows"
            if done
            else f"the figures of the {what} are under partial_rows in {args.out}"
        )
    return ", and ".join(kept) if kept else "no figures written"


def benchmark(args: argparse.Namespace, overrides: list[str]) -> int:
    from omegaconf import OmegaConf

    from presto.baselines import BASELINES
    from presto.cli import check_group_choices, with_default_engine
    from presto.config import ConfigError, validate, validate_sampler
    from presto.eval.machine_load import as_cores, cpu_snapshot, is_busy, others_cpu_s, window_s
    from presto.prefetch.clairvoyant import ClairvoyantTraversal, TrajectoryRecorder
    from presto.prefetch.presto import PrefetchStepper
    from presto.prefetch.traversal import TRAVERSALS
    from presto.runner.run import (
        announce_predictor,
        check_engine_serves,
        encode_prompt,
        load_task_and_engine,
        sample_chain,
        warn_if_not_exact,
    )
    from presto.samplers import build_kernel
    from presto.samplers.chain import BlockSchedule, SequentialStepper

    overrides = with_default_engine(overrides)
    # The settings' overrides first: traversal=clairvoyant, like --traversals clairvoyant, is no config choice.
    hydra_overrides = choose_settings(args, overrides)
    check_group_choices(PROJECT_ROOT / "conf", hydra_overrides)
    if args.samplers:
        check_group_choices(PROJECT_ROOT / "conf", [f"sampler={name}" for name in args.samplers])
    rules = [name for name in args.traversals if name != CLAIRVOYANT]
    samplers = args.samplers or [compose([o for o in hydra_overrides if option_override(o) is None]).sampler.name]
    baselines = [name for name in samplers if name in BASELINES]
    if baselines:
        raise ConfigError(
            f"sampler={baselines[0]} is a test-time baseline, not an MH sampler; the benchmark compares "
            "MH samplers (powermh, entropycut, multitry) with their PreSTO walks"
        )
    configs = SettingConfigs(hydra_overrides, samplers, rules)
    cfg = configs.compose(sampler=samplers[0])
    settings = validate(cfg)
    out = args.out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot create its folder ({err.strerror or err})") from None
    check_writable(out)  # before the engine loads and the first chain runs, not at its first save
    traversal_options = {}
    for name in rules:
        options = OmegaConf.to_container(configs.compose(traversal=name).traversal, resolve=True)
        options.pop("name")
        for sampler in samplers:  # bad options (or no shipped predictor) stop the benchmark before any chain
            TRAVERSALS[name].from_options(options, sampler)
        traversal_options[name] = options
    sampler_cfgs = {sampler: configs.compose(sampler=sampler) for sampler in samplers}
    sampler_settings = {sampler: validate_sampler(c) for sampler, c in sampler_cfgs.items()}  # before the engine
    task, problems, engine = load_task_and_engine(cfg, settings)
    try:
        for options in sampler_settings.values():  # every prompt fits, every temperature is served: before any chain
            check_engine_serves(engine, task, problems, options, rescore=False)
        warn_if_not_exact(engine)  # the "identical" column then says how often it mattered
        first = sampler_settings[samplers[0]]
        warm = (encode_prompt(engine, task, problems[0]), first.block_size, first.tau)
        rows = []
        for sampler in samplers:
            options = sampler_settings[sampler]
            kernel = build_kernel(options)
            schedule = BlockSchedule(options.max_new_tokens, options.block_size, options.steps)
            setups = [("sequential", 1)] + [(t, n) for t in args.traversals for n in args.n_pf]
            # One traversal per sampler and budget, as one run would have: what a rule learns
            # online (call costs, reach calibration) must not carry over from another setting.
            traversals = {
                setup: TRAVERSALS[setup[0]].from_options(traversal_options[setup[0]], sampler)
                for setup in setups
                if setup[0] not in ("sequential", CLAIRVOYANT)
            }
            for rule in traversals.values():  # which predictor each sampler's rule plans with, as a run says
                announce_predictor(rule, options)
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
                            on_round = rounds[(traversal, n_pf)].append
                            stepper = PrefetchStepper(rule, n_pf, on_round, REPLAY_LOGGED_NODES)
                        # Every setting starts cold: all share the chain's random inputs, so without
                        # this the prompt and states one setting computed would be cached for the next.
                        engine.reset_prefix_cache()
                        if warm is not None:  # once, before the first chain's first call
                            warm_up(engine, *warm)
                            warm = None
                        before = cpu_snapshot()
                        record = sample_chain(engine, kernel, stepper, task, problem, chain, settings.seed, schedule)
                        after = cpu_snapshot()
                        # The window holds the chain and its prompt's encoding and grading: the CPU
                        # others used in it is divided by its own length, not the chain's wall time.
                        record["others_cpu_s"] = others_cpu_s(before, after)
                        record["load_window_s"] = window_s(before, after)
                        records[(traversal, n_pf)].append(record)
                        others = as_cores(record["others_cpu_s"], record["load_window_s"])
                        busy = is_busy(record["others_cpu_s"], record["load_window_s"])
                        print(
                            f"  {sampler} {traversal:>10} n_pf={n_pf:<3} {problem.problem_id} chain {chain}: "
                            f"{record['transitions'] / record['model_calls']:.2f} transitions/call, "
                            f"{record['call_time_s']:.2f} s in calls"
                            + (f" (other processes kept {others:.2f} CPUs busy)" if busy else ""),
                            flush=True,
                        )
                    # The chain ran in every setting: its figures are kept at once, so an interrupted
                    # benchmark loses at most one chain's settings (the oracle replay waits for the end).
                    partial = sampler_rows(sampler, records, rounds, expected=None)
                    save(out, figures(overrides, rows, partial, None, complete=False))
                    args.under_way = (sampler, len(records[("sequential", 1)]))
            expected = expected_per_round(rounds, args.n_pf, sampler, progress=settings.progress)
            rows += sampler_rows(sampler, records, rounds, expected)
            args.under_way = None
            save(out, figures(overrides, rows, [], None, complete=False))
            args.finished_samplers.append(sampler)
        metrics = engine.metrics()
    finally:
        engine.close()
    print_table(rows, cfg, metrics)
    try:
        save(out, figures(overrides, rows, [], metrics, complete=True))
    except FiguresNotWritten as err:
        return fail(f"{err}; the tables above are complete")
    print(f"figures written to {out}")
    return 0


def warm_up(engine, prompt_ids: list[int], new_tokens: int, temperature: float) -> None:
    """One untimed call shaped like a chain's first, before the first chain.

    An engine's first call pays one-time setup (CUDA context and kernel selection, allocator
    pools, oneDNN primitives): the chain that runs first is always the sequential one, so that
    cost would raise its call time and every speedup. A chain's figures are differences of the
    engine's counters, so this call is in none of them. It follows the first chain's cache reset
    and decodes a prompt no chain shares (each token id one up), so nothing of it is cached for
    the sequential chain that follows (vLLM's prefix cache).
    """
    from presto.engines.base import SuffixRequest

    vocab = engine.vocab_size
    prefix = tuple((t + 1) % vocab for t in prompt_ids) if vocab else tuple(prompt_ids)
    engine.generate([SuffixRequest(prefix, new_tokens, temperature, 0)])


def figures(overrides: list[str], rows: list[dict], partial: list[dict], metrics, *, complete: bool) -> dict:
    """The JSON of --out: the finished samplers' rows, and the rows of the sampler under way over the
    chains it finished in every setting (no oracle columns: the replay waits for all its chains)."""
    return {
        "overrides": overrides,
        "rows": rows,
        "partial_rows": partial,
        "engine_metrics": metrics,
        "complete": complete,
    }


def sampler_rows(sampler: str, records: dict, rounds: dict, expected: dict | None) -> list[dict]:
    """One row per setting of ``sampler``: totals over its chains, each paired with the sequential chain
    of the same prompt and index (they were appended in the same order). ``expected`` None leaves
    out the walk-versus-oracle columns."""
    from presto.eval.machine_load import as_cores

    baseline = records[("sequential", 1)]
    base_calls = sum(r["model_calls"] for r in baseline)
    base_time = sum(r["call_time_s"] for r in baseline)
    base_wall = sum(r["wall_time_s"] for r in baseline)
    rows = []
    for (traversal, n_pf), recs in records.items():
        calls = sum(r["model_calls"] for r in recs)
        call_time = sum(r["call_time_s"] for r in recs)
        wall_time = sum(r["wall_time_s"] for r in recs)
        others_cpu_s = sum(r["others_cpu_s"] for r in recs)
        load_window_s = sum(r["load_window_s"] for r in recs)
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
                # Everything a chain spent outside model calls: planning (the predictive rule's DPs
                # and predictor), walking, tree logging. Call time is the headline because it is
                # what prefetching changes; the wall-clock speedup says what a user waits.
                "wall_time_s": wall_time,
                "host_time_s": wall_time - call_time,
                "wall_speedup": base_wall / wall_time,
                # CPUs other processes kept busy meanwhile (presto.eval.machine_load): near 0 on an idle
                # machine; summed over the chains first, as one chain's ticks are coarse.
                "others_cores": as_cores(others_cpu_s, load_window_s),
                "others_cpu_s": others_cpu_s,
                "load_window_s": load_window_s,
                "identical_chains": identical / len(recs),
                "same_path_chains": same_log_a / len(recs),
                "discarded_per_call": sum(r["discarded_requests"] for r in recs) / calls,
                "unique_requests_per_call": sum(r["unique_requests"] for r in recs) / calls,
                "loglik_mean": sum(r["loglik"] for r in recs) / len(recs),
                **(walk_versus_oracle(rounds[(traversal, n_pf)], expected.get(n_pf)) if expected is not None else {}),
            }
        )
    return rows


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


class FiguresNotWritten(Exception):
    """--out could not be (re)written: one line, exit status 2."""


def check_writable(out: Path) -> None:
    """Create and remove the temporary file save() writes first, so an unwritable --out (a
    read-only or special file system, a full disk) stops the benchmark before its work."""
    probe = out.with_name(out.name + ".tmp")
    try:
        probe.open("w").close()
        probe.unlink()
    except OSError as err:
        raise FiguresNotWritten(f"--out {out}: cannot write it ({err.strerror or err})") from None


def save(out: Path, figures: dict) -> None:
    from presto.runner.outputs import write_json_atomic

    try:
        write_json_atomic(out, figures)
    except OSError as err:
        raise FiguresNotWritten(f"--out {out}: cannot write it ({err.strerror or err})") from None


REPLAY_PROGRESS_DELAY_S = 2.0
"""Seconds before the oracle replay shows a progress bar on stderr: at 1024 logged nodes a round
takes about 0.2 s, so a paper-scale sampler's replay runs minutes after its last chain line."""


def expected_per_round(
    rounds: dict[tuple[str, int], list[dict]], budgets: list[int], sampler: str, progress: bool = True
) -> dict[int, dict]:
    """Per budget, the replay of the BFS run's trees (it generated every depth up to N_pf, so no
    node the oracle might pick is missing), or of the first traversal's when there is no BFS run."""
    from tqdm import tqdm

    from oracle_bound import replay_rounds

    expected = {}
    for n_pf in budgets:
        sources = [t for (t, n), logged in rounds.items() if n == n_pf and t != "sequential" and logged]
        if sources:
            source = "bfs" if "bfs" in sources else sources[0]
            desc = f"oracle replay {sampler} n_pf={n_pf}"
            logged = rounds[(source, n_pf)]
            bar = tqdm(
                logged, desc=desc, unit="round", delay=REPLAY_PROGRESS_DELAY_S, file=sys.stderr, disable=not progress
            )
            with bar:
                replayed = replay_rounds(bar, [n_pf], predictor=None)
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
        "replayed_rounds": expected["replayed"]["rounds"],  # the replayed run's (BFS's), not this setting's
        "replayed_rounds_with_truncated_trees": expected["replayed"]["rounds_with_truncated_logs"],
    }


def truncation_note(row: dict) -> str:
    """The second table's caveat for a row whose replay read trees cut at REPLAY_LOGGED_NODES:
    the nodes left out count as unavailable, so its oracle and BFS columns are lower bounds."""
    truncated = row.get("replayed_rounds_with_truncated_trees", 0)
    if not truncated:
        return ""
    return f"   ({truncated} of {row['replayed_rounds']} replayed trees truncated: oracle and bfs E are lower bounds)"


def print_rows(header: str, lines: list[str]) -> None:
    """One table: its header, a rule as wide as the header, one line per row."""
    print(header)
    print("-" * len(header))
    for line in lines:
        print(line)


def print_table(rows: list[dict], cfg, metrics: dict) -> None:
    from presto.eval.machine_load import busy_warning, is_busy

    s = cfg.sampler
    shard = f" shard={cfg.dataset.shard}" if cfg.dataset.get("shard") is not None else ""
    print(
        f"\nengine={cfg.engine.name} model={cfg.model.path} dataset={cfg.dataset.name} "
        f"prompts={cfg.dataset.num_prompts}{shard} chains/prompt={cfg.run.chains_per_prompt} "
        f"alpha={s.alpha} n={s.max_new_tokens} B={s.block_size} K={s.steps} seed={cfg.seed}"
    )
    print_rows(
        f"{'sampler':<11}{'traversal':<11}{'n_pf':>5}{'calls':>7}{'call s':>9}{'trans/call':>11}"
        f"{'s/call':>8}{'speedup':>9}{'calls÷':>8}{'s/call×':>9}{'identical':>10}{'same log A':>11}",
        [
            f"{r['sampler']:<11}{r['traversal']:<11}{r['n_pf']:>5}{r['model_calls']:>7}{r['call_time_s']:>9.2f}"
            f"{r['transitions_per_call']:>11.2f}{r['time_per_call_s']:>8.3f}{r['speedup']:>8.2f}x"
            f"{r['call_reduction']:>7.2f}x{r['time_per_call_ratio']:>8.2f}x{r['identical_chains']:>10.2f}"
            f"{r['same_path_chains']:>11.2f}"
            for r in rows
        ],
    )
    print(
        "\nWall-clock time of the chains, the part outside model calls (planning, walking, logging), "
        "and the CPUs other processes kept busy meanwhile"
    )
    print_rows(
        f"{'sampler':<11}{'traversal':<11}{'n_pf':>5}{'wall s':>9}{'host s':>9}"
        f"{'host ms/call':>14}{'wall speedup':>14}{'others CPUs':>13}",
        [
            f"{r['sampler']:<11}{r['traversal']:<11}{r['n_pf']:>5}{r['wall_time_s']:>9.2f}{r['host_time_s']:>9.2f}"
            f"{1000 * r['host_time_s'] / r['model_calls']:>14.1f}{r['wall_speedup']:>13.2f}x{r['others_cores']:>13.2f}"
            for r in rows
        ],
    )
    busy_rows = [r for r in rows if is_busy(r["others_cpu_s"], r["load_window_s"])]
    if busy_rows:
        busiest = max(busy_rows, key=lambda r: r["others_cores"])
        print(busy_warning(busiest["others_cpu_s"], busiest["load_window_s"], "the benchmark"), file=sys.stderr)
    walks = [r for r in rows if "transitions_per_round" in r]
    if walks:
        print(
            "\nMH transitions per prefetch round: realized, and expected with the true acceptance "
            "probabilities for the node-level oracle (Proposition 2 DP) and for one-request-per-depth BFS"
        )
        print_rows(
            f"{'sampler':<11}{'traversal':<11}{'n_pf':>5}{'rounds':>8}{'realized':>10}{'oracle':>8}{'bfs E':>8}",
            [
                f"{r['sampler']:<11}{r['traversal']:<11}{r['n_pf']:>5}{r['rounds']:>8}"
                f"{r['transitions_per_round']:>10.2f}{r['oracle_transitions_per_round']:>8.2f}"
                f"{r['bfs_expected_transitions_per_round']:>8.2f}"
                + (f"   (replayed on {r['oracle_replayed_on']} trees)" if r["oracle_replayed_on"] != "bfs" else "")
                + truncation_note(r)
                for r in walks
            ],
        )
    if metrics:
        print("engine metrics: " + ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

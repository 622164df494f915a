"""run(cfg): chains for every (prompt, chain) of a config, written to the run directory.

The evaluation loop is plain Python: validate, load the task and the engine, run each
chain with the chosen stepper (sequential or a PreSTO traversal), append its record to
chains.jsonl as soon as it finishes, and summarize. Interrupting a run loses at most the
chain in flight; ``run.resume=true`` continues it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from presto.baselines import BASELINES, Baseline
from presto.config import (
    ConfigError,
    RunSettings,
    SamplerSettings,
    absolute_path,
    describe_differences,
    flatten,
    make_paths_absolute,
    validate,
)
from presto.engines import Engine, build_engine
from presto.runner.logging import RunLogger, build_logger, exit_status
from presto.runner.outputs import DELETE, RunWriter, chain_key_problem, iter_jsonl, signals_held, write_text_atomic
from presto.samplers import build_kernel
from presto.samplers.chain import BlockSchedule, BlockStepper, SequentialStepper, run_chain
from presto.samplers.kernel import Kernel
from presto.samplers.randomness import ChainKey
from presto.tasks import Grade, GradingError, Problem, Task

if TYPE_CHECKING:
    from presto.prefetch.traversal import Traversal


def cut_at_eos(tokens: np.ndarray, eos_ids: frozenset[int]) -> np.ndarray:
    """Tokens up to (excluding) the first EOS: the chain runs past it, graders must not."""
    for i, token in enumerate(tokens):
        if int(token) in eos_ids:
            return tokens[:i]
    return tokens


def build_sampler(settings: SamplerSettings) -> Kernel | Baseline:
    """An MH kernel, or a test-time baseline (lowtemp, best_of_n, power_smc)."""
    from presto.baselines import build_baseline

    if settings.name in BASELINES:
        return build_baseline(settings)
    return build_kernel(settings)


def build_traversal(settings: RunSettings) -> Traversal | None:
    """The PreSTO traversal rule (its options checked, its predictor loaded).

    None when sequential, and for a test-time baseline, which samples whole answers (no
    traversal: a predictor it names is not loaded).
    """
    if settings.traversal == "sequential" or settings.sampler.name in BASELINES:
        return None
    from presto.prefetch.traversal import TRAVERSALS

    if settings.traversal not in TRAVERSALS:
        raise ValueError(f"traversal={settings.traversal} is not implemented yet")
    return TRAVERSALS[settings.traversal].from_options(settings.traversal_options, settings.sampler.name)


def make_stepper(settings: RunSettings, traversal: Traversal | None, on_round) -> BlockStepper:
    """How a chain's blocks run: one call per transition, or PreSTO rounds of ``traversal``."""
    if traversal is None:
        return SequentialStepper()
    from presto.prefetch.presto import PrefetchStepper

    return PrefetchStepper(traversal, settings.n_pf, on_round, settings.max_logged_nodes)


SUMMARY_FIELDS = (
    "prompt_id",
    "chain",
    "transitions",
    "rounds",
    "discarded_requests",
    "model_calls",
    "call_time_s",
    "generated_tokens",
    "loglik",
    "confidence",
    "correct",
    "grade_error",
    "loglik_rescored",
    "confidence_rescored",
)


# Numbers every chain record holds that a resumed run reads (its summary's totals).
CHAIN_RECORD_NUMBERS = ("transitions", "rounds", "model_calls", "call_time_s")


def chain_record_problem(record: Any) -> str | None:
    """Why ``record`` (a parsed chains.jsonl line) is no chain record a resumed run can count, or None."""
    problem = chain_key_problem(record)
    if problem is not None:
        return problem
    if not isinstance(record.get("accepts"), list) and "accepted" not in record:
        return "not a chain record (no accepts)"
    for key in CHAIN_RECORD_NUMBERS:
        value = record.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"not a chain record (no {key})"
    return None


def summary_fields(record: dict[str, Any]) -> dict[str, Any]:
    """What :func:`summarize` reads of a chain record: a few numbers, its accepted moves counted.

    A run keeps this of each finished chain until its summary, not the record: the final tokens,
    the text and the per-transition and per-call lists are in chains.jsonl already, and held for
    every chain of a long run they would grow its memory by tens of KB a chain (n in the thousands).
    """
    kept = {key: record[key] for key in SUMMARY_FIELDS if key in record}
    kept["accepted"] = record["accepted"] if "accepted" in record else sum(record["accepts"])
    return kept


def resume_fields(record: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run keeps of a chain an earlier session finished: :func:`summary_fields`,
    the prompt's and the model's fingerprints (:func:`check_resumed_prompts`,
    :func:`check_resumed_model`), its wall time and, where its grading failed, its text
    (:func:`regrade_failed`); not the tokens or per-transition lists."""
    kept = summary_fields(record)
    kept["prompt_sha"] = record.get("prompt_sha")
    if "model_sha" in record:
        kept["model_sha"] = record["model_sha"]
    if "wall_time_s" in record:  # counted where no summary holds it (a killed session's chains)
        kept["wall_time_s"] = record["wall_time_s"]
    if record.get("grade_error"):
        kept["text"] = record.get("text")
    return kept


def summarize(
    settings: RunSettings,
    records: list[dict[str, Any]],
    engine: Engine,
    wall_time_s: float,
    expected: Collection[tuple[str, int]] = (),
    previous: dict[str, Any] | None = None,
    unsummarized_calls: int = 0,
):
    """summary.json: figures over every chain of the run, including those of earlier sessions.

    ``expected``: the (prompt_id, chain) pairs the run is to produce; ``complete`` says
    whether all of them finished (an interrupted run's summary is not one of a whole run).
    ``previous``: the summary an interrupted session wrote; the engine's counters cover
    only this process, so they are merged with the earlier ones (sums, maxima, rates).
    ``records``: chain records, whole or as :func:`summary_fields` keeps them.
    ``unsummarized_calls``: model calls of finished chains that neither ``previous`` nor this
    process counted (a killed session's), added to ``engine_calls``.
    """
    records = [summary_fields(r) for r in records]
    calls = sum(r["model_calls"] for r in records)
    call_time = sum(r["call_time_s"] for r in records)
    transitions = sum(r["transitions"] for r in records)
    accepts = sum(r["accepted"] for r in records)
    graded = [r["correct"] for r in records if r.get("correct") is not None]
    baseline = settings.sampler.name in BASELINES  # samples whole answers: no traversal, no prefetch budget
    summary: dict[str, Any] = {
        "sampler": settings.sampler.name,
        "traversal": "none" if baseline else settings.traversal,
        "n_pf": None if baseline else 1 if settings.traversal == "sequential" else settings.n_pf,
        "alpha": settings.sampler.alpha,
        "tau": settings.sampler.tau,
        "max_new_tokens": settings.sampler.max_new_tokens,
        "block_size": settings.sampler.block_size,
        "steps": settings.sampler.steps,
        "seed": settings.seed,
        "prompts": len({r["prompt_id"] for r in records}),
        "chains": len(records),
        "transitions": transitions,
        "model_calls": calls,
        "call_time_s": call_time,
        "transitions_per_call": transitions / calls if calls and not baseline else None,
        "time_per_call_s": call_time / calls if calls else None,
        "acceptance_rate": accepts / transitions if transitions else None,
        "prefetch_rounds": None if baseline else sum(r["rounds"] for r in records),
        "discarded_requests": sum(r.get("discarded_requests", 0) for r in records),
        # None when a chain of an older version of the run has no count.
        "generated_tokens": (
            sum(r["generated_tokens"] for r in records) if all("generated_tokens" in r for r in records) else None
        ),
        "wall_time_s": wall_time_s,
        "loglik_mean": float(np.mean([r["loglik"] for r in records])) if records else None,
        "confidence_mean": float(np.mean([r["confidence"] for r in records])) if records else None,
        "graded": len(graded),
        "ungraded": len(records) - len(graded),
        "grade_errors": sum(1 for r in records if r.get("grade_error")),  # among the ungraded: the grader failed
        "accuracy": float(np.mean(graded)) if graded else None,
        "expected_chains": len(expected),
        "complete": set(expected) <= {(r["prompt_id"], r["chain"]) for r in records},
    }
    for key in ("loglik_rescored", "confidence_rescored"):
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            summary[f"{key}_mean"] = float(np.mean(values))
    summary.update(merge_engine_metrics(previous or {}, engine.metrics(), engine.stats.calls, unsummarized_calls))
    return summary


def merge_engine_metrics(
    previous: dict[str, Any], current: dict[str, float], calls: int, unsummarized_calls: int = 0
) -> dict[str, float]:
    """This process's engine counters joined with an earlier session's (from its summary.json).

    Token counts add up, peaks take the maximum, and per-call figures and the hit rate are
    recomputed from the totals (the earlier session made ``previous["engine_calls"]`` calls).
    ``unsummarized_calls``, the calls of a session that wrote no summary (killed), count in
    ``engine_calls`` only: their token counts are unknown, so per-call figures leave them out.
    """
    earlier_calls = int(previous.get("engine_calls") or 0)
    merged = dict(current)
    for key in ("prefix_cached_tokens", "prefix_missed_tokens"):
        if key in current:
            merged[key] = current[key] + float(previous.get(key) or 0.0)
            merged[f"{key}_per_call"] = merged[key] / max(1, calls + earlier_calls)
    if "peak_kv_usage" in current:
        merged["peak_kv_usage"] = max(current["peak_kv_usage"], float(previous.get("peak_kv_usage") or 0.0))
    looked_up = merged.get("prefix_cached_tokens", 0.0) + merged.get("prefix_missed_tokens", 0.0)
    if "prefix_cached_tokens" in merged and looked_up > 0:
        merged["prefix_cache_hit_rate"] = merged["prefix_cached_tokens"] / looked_up
    merged["engine_calls"] = calls + earlier_calls + unsummarized_calls
    return merged


@contextlib.contextmanager
def _call_times(engine: Engine, on_call: Callable[[int], None] | None = None) -> Iterator[list[float]]:
    """Collect the counted time of each model call made inside the block, in order.

    Per-call times let plots draw cumulative call time against transitions for any
    stepper (the sequential one has no per-round hook). The engine's own accounting is
    read, so the list sums to exactly the chain's ``call_time_s``. ``on_call(n)`` is told
    after each counted call how many the block has made.
    """
    times: list[float] = []
    generate = engine.generate

    def timed(requests):
        calls, seconds = engine.stats.calls, engine.stats.call_time_s
        results = generate(requests)
        if engine.stats.calls > calls:
            times.append(engine.stats.call_time_s - seconds)
            if on_call is not None:
                on_call(len(times))
        return results

    engine.generate = timed  # instance attribute: shadows the method for this chain only
    try:
        yield times
    finally:
        del engine.generate


def encode_prompt(engine: Engine, task: Task, problem: Problem) -> list[int]:
    """The prompt's token ids as the engine serves them (chat template with the task's options)."""
    template_kwargs = getattr(task, "chat_template_kwargs", None) or {}
    return engine.encode_prompt(problem.messages, problem.raw_prompt, **template_kwargs)


def prompt_fingerprint(prompt_ids: Sequence[int]) -> str:
    """16 hex digits of SHA-256 over a prompt's token ids (a chain record's ``prompt_sha``)."""
    import hashlib

    return hashlib.sha256(np.asarray(prompt_ids, dtype=np.int64).tobytes()).hexdigest()[:16]


def check_resumed_prompts(prompts: Mapping[str, Sequence[int]], records: list[dict]) -> None:
    """Refuse to resume when a finished chain's prompt is no longer the prompt of that id.

    ``prompts``: each problem id's prompt token ids now. Ids are positional where a local
    dataset file has no id column (``math500/7``), so an edited or reordered file would
    attach its new problems to the old chains. Records written before ``prompt_sha``
    existed are not checked.
    """
    fingerprints: dict[str, str] = {}
    for record in records:
        prompt_id, saved = record.get("prompt_id"), record.get("prompt_sha")
        if prompt_id not in prompts or saved is None:
            continue
        if prompt_id not in fingerprints:
            fingerprints[prompt_id] = prompt_fingerprint(prompts[prompt_id])
        if fingerprints[prompt_id] != saved:
            raise ConfigError(
                f"run.resume=true, but prompt {prompt_id} is not the prompt its finished chains "
                "were sampled from (the dataset, its file or the model's tokenizer changed); "
                "use another output directory"
            )


def check_resumed_model(engine: Engine, records: list[dict], model_path: Any) -> None:
    """Refuse to resume when the model folder's weights are not those a finished chain was
    sampled from (a re-saved checkpoint under the same path, a different model converted into
    the cache): the run would mix chains of two models. Records without ``model_sha`` (older
    runs, the toy engine) are not checked."""
    now = engine.model_fingerprint()
    saved = {record.get("model_sha") for record in records} - {None}
    if now is not None and saved and saved != {now}:
        raise ConfigError(
            f"run.resume=true, but model.path={model_path} does not hold the weights its finished chains were "
            f"sampled from (model_sha {', '.join(sorted(saved))} in chains.jsonl, {now} now: the folder's "
            "config or weights changed); use another output directory"
        )


def check_resumed_extent(
    settings: RunSettings, records: Iterable[dict], run_dir: Path, problem_ids: Collection[str] | None = None
) -> None:
    """Refuse to resume with fewer prompts or chains than the directory's finished chains cover.

    The summary counts every finished chain: with a lower ``dataset.num_prompts`` or
    ``run.chains_per_prompt`` it would count chains beyond the run's own (more chains than
    ``expected_chains``, yet ``complete``), under a config.yaml rewritten with the lower values.
    Without ``problem_ids`` (before the dataset and the engine load, which takes minutes on a
    GPU) by counts: a chain index past ``chains_per_prompt``, more prompts than ``num_prompts``;
    with them, each chain's prompt must be one of them.
    """
    prompts: set[Any] = set()
    outside = None  # what the directory holds beyond the run's prompts and chains
    for record in records:
        if chain_key_problem(record) is not None:
            continue  # names no chain: the writer drops it, with a warning
        prompt_id, chain = record.get("prompt_id"), int(record.get("chain", 0))
        prompts.add(prompt_id)
        if outside is None and chain >= settings.chains_per_prompt:
            outside = f"chain {chain} of prompt {prompt_id}"
        elif outside is None and problem_ids is not None and prompt_id not in problem_ids:
            outside = f"chains of prompt {prompt_id}, not one of these prompts"
    shard_prompts = settings.num_prompts if settings.shard is None else settings.shard.size(settings.num_prompts)
    if outside is None and problem_ids is None and len(prompts) > shard_prompts:
        outside = f"chains of {len(prompts)} prompts"
    if outside is not None:
        raise ConfigError(
            f"run.resume=true with dataset.num_prompts={settings.num_prompts} run.chains_per_prompt="
            f"{settings.chains_per_prompt}, but {run_dir} holds finished {outside}, which its summary would "
            "count: resume with the values in its config.yaml (or more), or use another output directory"
        )


def check_engine_serves(
    engine: Engine, task: Task, problems: list[Problem], sampler: SamplerSettings, rescore: bool
) -> dict[str, list[int]]:
    """Refuse, before any chain, what the engine would refuse (or silently get wrong) mid-run.

    Every temperature the sampler asks for, and every prompt with its n new tokens (and what
    the engine's rescoring takes beyond them): otherwise the last block of some late prompt
    could stop a run after hours.
    Returns each problem id's prompt token ids, as encoded for the check.
    """
    engine.check_temperatures((sampler.tau, *sampler.options.get("temperatures", ())))
    prompts = {}
    for problem in problems:
        prompts[problem.problem_id] = encode_prompt(engine, task, problem)
        tokens = len(prompts[problem.problem_id]) + sampler.max_new_tokens
        what = f"prompt {problem.problem_id} with sampler.max_new_tokens={sampler.max_new_tokens}"
        if rescore and engine.score_extra_tokens:
            tokens += engine.score_extra_tokens
            what += f" and run.rescore=true (engine={engine.name}'s scoring takes {engine.score_extra_tokens} more)"
        engine.check_fits(tokens, what)
    return prompts


GRADING_FAILURES_TO_STOP = 3
"""A run stops when its first this-many chains all failed to grade (the chains are kept)."""


def grade_completion(task: Task, problem: Problem, chain: int, text: str) -> tuple[Grade, str | None]:
    """The task's grade of ``text``, and the grader's error if it raised (then the grade is None).

    A grader bug or a broken sandbox must not lose the chain: it is kept ungraded, and a
    resumed run grades it again.
    """
    try:
        return task.grade(problem, text), None
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
        print(f"warning: grading {problem.problem_id} chain {chain} failed ({error}); kept ungraded", file=sys.stderr)
        return Grade(None, None, error), error


def regrade_failed(records: list[dict[str, Any]], task: Task, problems: Sequence[Problem]) -> dict[int, dict[str, Any]]:
    """Grade again the finished chains whose grading failed (``records`` as :func:`resume_fields`
    keeps them, in chains.jsonl's order, updated in place); returns the changes to the regraded
    records by their position, for :meth:`RunWriter.amend_chains` (by position, not by chain, though
    the writer keeps one record per chain: a chain recorded twice is dropped on reading)."""
    by_id = {problem.problem_id: problem for problem in problems}
    changes: dict[int, dict[str, Any]] = {}
    for position, record in enumerate(records):
        problem = by_id.get(record.get("prompt_id"))
        if not record.get("grade_error") or problem is None:
            continue
        chain = int(record.get("chain", 0))
        grade, error = grade_completion(task, problem, chain, record.get("text") or "")
        if error is None:
            change = {"correct": grade.correct, "extracted": grade.extracted, "grade_error": DELETE}
            record["correct"] = grade.correct
            del record["grade_error"]
        else:
            change = {"grade_error": error}
            record["grade_error"] = error
        changes[position] = change
    return changes


def sample_chain(
    engine: Engine,
    kernel: Kernel | Baseline,
    stepper: BlockStepper,
    task: Task,
    problem: Problem,
    chain: int,
    seed: int,
    schedule: BlockSchedule,
    *,
    rescore: bool = False,
    on_call: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run one chain and return its chains.jsonl record (graded when the task can).

    ``rescore=True`` adds ``loglik_rescored``/``confidence_rescored`` from a fresh p0 pass
    (``Engine.score``), which is not a model call and is excluded from the call counts.
    ``on_call(n)``: told after each model call of the chain that it has made n (progress).
    """
    prompt_ids = encode_prompt(engine, task, problem)
    before = engine.stats.snapshot()
    start = time.perf_counter()
    key = ChainKey(seed, problem.index, chain)
    with _call_times(engine, on_call) as call_times:
        if isinstance(kernel, Kernel):
            state, trace = run_chain(kernel, engine, stepper, prompt_ids, key, schedule)
        else:  # a test-time baseline (presto.baselines): it samples a whole answer itself
            state, trace = kernel.sample(engine, prompt_ids, key, schedule)
    model_calls = engine.stats.calls - before.calls
    call_time_s = engine.stats.call_time_s - before.call_time_s
    wall_time_s = time.perf_counter() - start
    text = engine.decode(cut_at_eos(state.tokens, engine.eos_token_ids))
    grade, grade_error = grade_completion(task, problem, chain, text)
    record = {
        "prompt_id": problem.problem_id,
        "prompt_sha": prompt_fingerprint(prompt_ids),
        "prompt_index": problem.index,
        "chain": chain,
        "seed": seed,
        "tokens": state.tokens,
        "text": text,
        "accepts": trace.accepts,
        "log_accepts": trace.log_accepts,  # -inf (a move never accepted) is written as null
        "transitions": len(trace.accepts),
        "rounds": trace.rounds,
        "discarded_requests": trace.discarded_requests,
        "model_calls": model_calls,
        "call_time_s": call_time_s,
        "call_times_s": call_times,
        "unique_requests": engine.stats.unique_requests - before.unique_requests,
        # What the distinct requests decoded: a baseline's token cost (its answers stop at EOS).
        "generated_tokens": engine.stats.generated_tokens - before.generated_tokens,
        "wall_time_s": wall_time_s,
        "loglik": state.loglik_mean(),
        "confidence": state.confidence_mean(),
        "correct": grade.correct,
        "extracted": grade.extracted,
    }
    model_sha = engine.model_fingerprint()
    if model_sha is not None:
        record["model_sha"] = model_sha
    if grade_error is not None:
        record["grade_error"] = grade_error
    record.update(getattr(trace, "info", None) or {})  # baseline-specific figures (candidates, ESS, ...)
    if rescore:
        from presto.eval.quality import rescore as rescore_quality

        quality = rescore_quality(engine, prompt_ids, state.tokens)
        record["loglik_rescored"] = quality.loglik
        record["confidence_rescored"] = quality.confidence
    return record


def warn_if_not_exact(engine: Engine) -> None:
    """Say, before any chain runs, when PreSTO chains may not equal sequential ones on this engine."""
    variance = engine.batch_variance()
    if variance is not None:
        print(f"WARNING: {variance}", file=sys.stderr, flush=True)


def load_task_and_engine(cfg: DictConfig, settings: RunSettings) -> tuple[Task, list[Problem], Engine]:
    """The task with its first ``dataset.num_prompts`` problems, then the engine (the slow part)."""
    from presto.tasks import build_task

    dataset_cfg = OmegaConf.to_container(cfg.dataset, resolve=True)
    if dataset_cfg.get("seed") is None:  # GPQA shuffles its choices by the run seed
        dataset_cfg["seed"] = settings.seed
    task = build_task(dataset_cfg)
    available = task.load()
    problems = available[: settings.num_prompts]
    if len(available) < settings.num_prompts:
        print(
            f"notice: dataset {dataset_cfg.get('name')} has {len(available)} prompts; running all of them "
            f"(dataset.num_prompts={settings.num_prompts})",
            file=sys.stderr,
        )
    check_unique_ids(problems)  # over all the run's prompts: shards of one dataset must not share an id
    if settings.shard is not None:
        share = settings.shard.select(problems)
        if not share:
            raise ConfigError(
                f"dataset.shard={settings.shard} holds none of the {len(problems)} prompts of dataset "
                f"{dataset_cfg.get('name')}: use at most {len(problems)} shards"
            )
        print(
            f"notice: dataset.shard={settings.shard}: this job runs {len(share)} of the {len(problems)} prompts "
            f"(positions {settings.shard.index}, {settings.shard.index + settings.shard.count}, ... counted from 0)",
            file=sys.stderr,
        )
        problems = share
    return task, problems, engine_from_config(cfg)


def check_unique_ids(problems: list[Problem]) -> None:
    """Chains are keyed by problem id (records, resume, pairing): two rows with one id would collide."""
    first: dict[str, int] = {}
    for problem in problems:
        if problem.problem_id in first:
            from presto.tasks import TaskDataError

            raise TaskDataError(
                f"problem id {problem.problem_id!r} appears twice (prompts {first[problem.problem_id]} and "
                f"{problem.index}); ids must be unique"
            )
        first[problem.problem_id] = problem.index


def engine_from_config(cfg: DictConfig) -> Engine:
    """The engine of ``cfg.engine`` serving ``cfg.model``."""
    return build_engine(
        OmegaConf.to_container(cfg.engine, resolve=True), OmegaConf.to_container(cfg.model, resolve=True)
    )


def read_previous_summary(path: Path) -> dict[str, Any]:
    """The summary.json an earlier session wrote, or {} (none, or damaged: it carries only that
    session's wall time and engine counters, so a resume goes on without them, with a warning)."""
    if not path.exists():
        return {}
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        summary = err
    if isinstance(summary, dict):
        return summary
    why = _first_line(summary) if isinstance(summary, BaseException) else "not a JSON object"
    print(
        f"warning: {path} cannot be read ({why}): the earlier sessions' wall time and engine counters "
        "are left out of the new summary",
        file=sys.stderr,
    )
    return {}


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _count_or_zero(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def check_not_another_modes_directory(run_dir: Path, resume: bool) -> None:
    """Refuse a run in a sweep's directory (it would start beside the jobs' directories, one more run
    for a report to list), and a resume inside a single run's directory (a sweep's job N given the
    run's directory as hydra.sweep.dir: a fresh run, not the one meant to continue)."""
    if (run_dir / "multirun.yaml").is_file():
        raise ConfigError(
            f"{run_dir} is the directory of a sweep (-m): resume the sweep with -m and hydra.sweep.dir={run_dir}, "
            f"or one of its jobs with hydra.run.dir={run_dir}/N"
        )
    if resume and (run_dir.parent / "chains.jsonl").is_file() and not (run_dir / "chains.jsonl").exists():
        raise ConfigError(
            f"run.resume=true, but {run_dir.parent} is the directory of a single run: resume it without -m, "
            f"with hydra.run.dir={run_dir.parent}"
        )


# What a resumed run may change: how it is shown and logged, and how many prompts and chains
# it covers (chains are keyed by prompt and index, so more of them extend the same run).
RESUMABLE_CHANGES = ("run.resume", "run.progress", "dataset.num_prompts", "run.chains_per_prompt")


def check_resume_config(cfg: DictConfig, run_dir: Path) -> None:
    """Refuse to resume a run directory with another config: its chains would mix two runs."""
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        return
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(saved_path), resolve=False)
    except Exception as err:  # YAML's and OmegaConf's errors: the file was damaged after the run wrote it
        raise ConfigError(f"run.resume=true, but {saved_path} cannot be read ({_first_line(err)})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"run.resume=true, but {saved_path} is not a run config (a YAML mapping)")
    saved = flatten(loaded)
    # Runs made before paths were stored absolute kept them as typed: read against this directory, as they were.
    saved = {key: absolute_path(key, value) for key, value in saved.items()}
    current = flatten(OmegaConf.to_container(cfg, resolve=True))
    changed = describe_differences(
        saved, current, " -> ", ignore=lambda key: key in RESUMABLE_CHANGES or key.startswith("logger.")
    )
    if changed:
        raise ConfigError(
            f"run.resume=true, but {run_dir} was made with another config: {'; '.join(changed)} "
            "(resume with the same overrides, or use another output directory)"
        )


def requeued_by_slurm(environ: dict[str, str] | None = None) -> bool:
    """True in a Slurm job that was requeued (after preemption): SLURM_RESTART_COUNT > 0."""
    value = (os.environ if environ is None else environ).get("SLURM_RESTART_COUNT", "0")
    return value.isdigit() and int(value) > 0


def run(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    """Run every chain of ``cfg`` into ``run_dir``; returns the summary."""
    make_paths_absolute(cfg)  # before config.yaml and the resume check see them
    settings = validate(cfg)
    kernel = build_sampler(settings.sampler)  # checks sampler-specific keys before anything is written
    traversal = build_traversal(settings)  # likewise the traversal's options, and loads its predictor

    run_dir = Path(run_dir)
    if not settings.resume and requeued_by_slurm():
        # A preempted job that Slurm requeued comes back with the same overrides and directory.
        print(f"notice: a requeued Slurm job: resuming {run_dir}", file=sys.stderr)
        settings = dataclasses.replace(settings, resume=True)
    RunWriter.check(run_dir, settings.resume)
    check_not_another_modes_directory(run_dir, settings.resume)
    if settings.resume:
        check_resume_config(cfg, run_dir)
        check_resumed_extent(settings, iter_jsonl(run_dir / "chains.jsonl"), run_dir)  # by counts, before loading
    task, problems, engine = load_task_and_engine(cfg, settings)
    writer: RunWriter | None = None
    logger: RunLogger | None = None
    # Until the main loop's finally takes over, a failure (the directory locked by another run, a
    # logger that cannot start, Ctrl-C) must still close the engine: it may hold a GPU.
    try:
        prompts = check_engine_serves(engine, task, problems, settings.sampler, settings.rescore)
        if traversal is not None and isinstance(kernel, Kernel):
            warn_if_not_exact(engine)
        announce_predictor(traversal, settings.sampler)
        if settings.rescore and engine.rescore_limits:
            print(f"notice: run.rescore: {engine.rescore_limits}", file=sys.stderr)
        writer = RunWriter(run_dir, settings.resume, keep=resume_fields, check=chain_record_problem)
        if settings.resume:  # before the logger: a refused resume must not resume (and end) its W&B run
            check_resumed_prompts(prompts, writer.previous)
            check_resumed_model(engine, writer.previous, OmegaConf.select(cfg, "model.path"))
            check_resumed_extent(settings, writer.previous, run_dir, {problem.problem_id for problem in problems})
        logger = build_logger(
            OmegaConf.to_container(cfg.logger, resolve=True) if "logger" in cfg else None,
            OmegaConf.to_container(cfg, resolve=True),
            run_dir,
        )
        previous_summary = read_previous_summary(writer.summary_path) if settings.resume else {}
        previous_summary_time = float(previous_summary.get("wall_time_s") or 0.0)
        # Atomic: every resume rewrites it, and a kill midway must not leave a torn config for the next check.
        write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    except BaseException as err:
        if writer is not None:
            writer.close()  # releases the directory's lock
        engine.close()
        if logger is not None:
            logger.finish(exit_status(err))
        raise
    start = time.perf_counter()
    every = [(problem, chain) for problem in problems for chain in range(settings.chains_per_prompt)]
    expected = [(problem.problem_id, chain) for problem, chain in every]
    # From here to the end a SIGTERM or Ctrl-C ends the run through the finally below (engine closed,
    # summary written once the finished chains are read), also before the first chain starts.
    records: list[dict[str, Any]] | None = None
    progress: RunProgress | None = None
    ending: BaseException | None = None  # what ended the run, if not its last chain: the logger is told
    try:
        schedule = BlockSchedule(settings.sampler.max_new_tokens, settings.sampler.block_size, settings.sampler.steps)
        done = writer.finished()
        regraded = regrade_failed(writer.previous, task, problems) if settings.resume else {}
        if regraded:
            writer.amend_chains(regraded)  # the chains whose grader failed, graded again
        previous = writer.take_previous()
        # Chains past those the last summary counts were finished by a session that wrote none
        # (killed with -9, or the machine lost): their calls and time are not in its totals.
        unsummarized = previous[_count_or_zero(previous_summary.get("chains")) :]
        unsummarized_calls = sum(r["model_calls"] for r in unsummarized)
        previous_summary_time += sum(float(r.get("wall_time_s") or 0.0) for r in unsummarized)
        # From here on the run needs only the summary's figures of each chain (see summary_fields).
        records = [summary_fields(r) for r in previous]
        del previous, unsummarized
        failed_grades = sum(1 for r in records if r.get("grade_error"))
        calls = sum(r["model_calls"] for r in records)
        transitions = sum(r["transitions"] for r in records)
        if settings.resume and not records:
            # A run directory named by the time (the default) is always new: say so rather than start over silently.
            print(
                f"notice: run.resume=true, but {run_dir} holds no finished chains: starting the run from its first "
                "chain (to continue a run, pass its directory: hydra.run.dir=DIR, or hydra.sweep.dir=DIR with -m)",
                file=sys.stderr,
            )
        jobs = [(problem, chain) for problem, chain in every if (problem.problem_id, chain) not in done]
        if jobs and previous_summary.get("complete") is True:
            # A resume that extends a finished run (more prompts or chains): until this session writes
            # its own summary, the last one must not call the run complete, as it would if killed (-9).
            writer.write_summary({**previous_summary, "complete": False, "expected_chains": len(expected)})
        progress = RunProgress(len(expected), len(expected) - len(jobs), settings.progress)
        for problem, chain in jobs:
            round_counter = iter(range(10**9))

            def on_round(record, problem=problem, chain=chain, counter=round_counter):
                full = {"prompt_id": problem.problem_id, "chain": chain, "round": next(counter), **record}
                writer.append_tree(full)
                logger.on_round(full)

            record = sample_chain(
                engine,
                kernel,
                make_stepper(settings, traversal, on_round),
                task,
                problem,
                chain,
                settings.seed,
                schedule,
                rescore=settings.rescore,
                on_call=progress.chain_call if settings.progress else None,
            )
            writer.flush_trees()
            slim = summary_fields(record)
            with signals_held():  # the chain is in chains.jsonl and in the summary's totals, or in neither
                writer.append_chain(record)
                records.append(slim)
                # Running totals: a scan of every finished chain after each one would grow with the run.
                failed_grades += bool(record.get("grade_error"))
                calls += record["model_calls"]
                transitions += record["transitions"]
            logger.on_chain(record)
            if failed_grades == len(records) >= GRADING_FAILURES_TO_STOP:
                # Every chain so far: the grader is broken, not one completion. Stop before
                # spending the rest of the run on chains that cannot be graded.
                raise GradingError(
                    f"grading failed for all {len(records)} chains so far ({record['grade_error']}); "
                    f"they are kept ungraded in {writer.chains_path}: fix the grader, then resume this run "
                    "(run.resume=true, same directory) to grade them and continue"
                )
            baseline = settings.sampler.name in BASELINES  # a baseline makes no MH transitions
            progress.chain_done(None if baseline else transitions / max(1, calls))
    except BaseException as err:
        ending = err
        raise
    finally:
        summary = None
        try:
            # Held: a second SIGTERM (a sweep's launcher forwards one to a job whose process group was
            # sent one too) or Ctrl-C raises after the summary is written and the engine closed, not midway.
            with signals_held():
                if progress is not None:
                    progress.close()
                if records is not None:  # else stopped before the finished chains were read: their summary stays
                    wall_time = previous_summary_time + time.perf_counter() - start
                    summary = summarize(
                        settings, records, engine, wall_time, expected, previous_summary, unsummarized_calls
                    )
                    writer.write_summary(summary)
                try:
                    writer.close()
                finally:  # a file that cannot be flushed (a full disk) must not keep the engine (a GPU) open
                    engine.close()
            if summary is not None:
                logger.on_summary(summary, run_dir)
        except BaseException as err:  # a held signal, or one as the plots are drawn
            ending = err
            raise
        finally:  # the logger hears how the run ended
            logger.finish(exit_status(ending))
    return summary


def announce_predictor(traversal: Traversal | None, sampler: SamplerSettings | None = None) -> None:
    """Name the predictor a predictive run plans with (trees.jsonl names it only by fingerprint), and
    warn (one ``warning:`` line) when it was trained on trees of another sampler or setting than the
    run's ``sampler``; the traversal then checks each checkpoint swapped in later the same way.
    """
    current = getattr(traversal, "current_predictor", None)
    predictor = current() if current is not None else None  # before expect_sampler: no swap warning here
    if predictor is None:
        return
    from presto.prefetch.predictive import describe_predictor, provenance_warning

    print(f"notice: planning with {describe_predictor(predictor)}", file=sys.stderr)
    expect = getattr(traversal, "expect_sampler", None)
    if sampler is None or expect is None:
        return
    expect(sampler)
    warning = provenance_warning(predictor, sampler)
    if warning is not None:
        print(warning, file=sys.stderr)


class RunProgress:
    """The run's bar: chains of the whole run (a resumed run starts at the chains it already
    has), the run's transitions per call, and the model calls of the chain in flight.

    A chain at paper scale (n = 1024, K = 100) runs for many minutes on a CPU, and a bar that
    counted finished chains only would sit at 0/N, its clock stopped, for all of that time; so
    each chain's calls are shown at its first and then at most every ``IN_FLIGHT_EVERY_S``, or
    every ``IN_FLIGHT_EVERY_S_LOGGED`` when stderr is no terminal (a launcher's log file keeps
    every redraw as a line).
    """

    IN_FLIGHT_EVERY_S = 1.0
    IN_FLIGHT_EVERY_S_LOGGED = 60.0

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        from tqdm import tqdm
        from tqdm.contrib import DummyTqdmFile

        self.every_s = self.IN_FLIGHT_EVERY_S if sys.stderr.isatty() else self.IN_FLIGHT_EVERY_S_LOGGED
        # While the bar is shown, lines the run prints to stderr (a predictor reloaded, a warning)
        # are written above it, not onto the end of its line: stderr goes through tqdm.write.
        self._stderr = sys.stderr if enabled else None
        self._through_bar = DummyTqdmFile(sys.stderr) if enabled else None
        if self._through_bar is not None:
            sys.stderr = self._through_bar
        self.bar = tqdm(
            total=total,
            initial=done,
            desc="chains",
            unit="chain",
            disable=not enabled,
            dynamic_ncols=True,
            file=self._stderr,
        )
        self.postfix: dict[str, Any] = {}
        self._shown = 0.0

    def chain_call(self, calls: int) -> None:
        """The chain in flight has made ``calls`` model calls (``sample_chain``'s ``on_call``)."""
        now = time.monotonic()
        if calls == 1 or now - self._shown >= self.every_s:
            self._shown = now
            self.postfix["chain_calls"] = calls
            self.bar.set_postfix(self.postfix)

    def chain_done(self, transitions_per_call: float | None) -> None:
        """One more chain finished; the run's transitions per call so far (None: a baseline's run)."""
        self.postfix.pop("chain_calls", None)
        if transitions_per_call is not None:
            self.postfix["transitions_per_call"] = f"{transitions_per_call:.2f}"
        self.bar.set_postfix(self.postfix, refresh=False)
        self.bar.update(1)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
        if self._through_bar is not None:
            if sys.stderr is self._through_bar:  # else replaced since (by the caller): theirs to restore
                sys.stderr = self._stderr
            partial = "".join(self._through_bar._buf)  # a last line without its newline, held back
            self._through_bar._buf = []
            if partial:
                self._stderr.write(partial)
            self._through_bar = None

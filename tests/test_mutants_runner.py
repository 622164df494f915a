"""Tests that kill the mutants a hand mutation review of the run directory's writer and the runner found surviving.

Ids of the review: O = runner/outputs.py (atomic writes, JSONL reading, the lock, signals_held,
RunWriter), RN = runner/run.py (summarize, the resume checks, sample_chain, the run loop). Each
test names the mutants it kills; the full list, with what killed each one and why the survivors
are equivalent, is at the end of the file. The tests run in this process with the toy engine and
check the run-directory contract of DESIGN.md section 3 (no lost results: fsynced records, rounds
on disk before their chain's record; figures of summary.json recomputed by hand; the documented
randomness keys) rather than how the code computes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from presto.config import ConfigError, validate
from presto.engines.base import SuffixRequest
from presto.engines.toy import ToyEngine
from presto.runner import outputs
from presto.runner import run as run_module
from presto.runner.outputs import RunWriter, read_jsonl, signals_held, write_text_atomic
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.randomness import ChainKey
from tests.conftest import compose_run, toy_overrides, write_toy_table


def toy_config(table, *extra: str, steps: int = 3):
    """The small toy run (2 prompts x 2 chains, n=8, B=4, K=steps), without a progress bar."""
    return compose_run(*toy_overrides(table, steps=steps), "run.progress=false", *extra)


@pytest.fixture
def fsynced(monkeypatch) -> list[int]:
    """The inode of every file os.fsync was given, in order (the real fsync still runs)."""
    inodes: list[int] = []
    real = os.fsync

    def spy(fd):
        inodes.append(os.fstat(fd).st_ino)
        return real(fd)

    monkeypatch.setattr(outputs.os, "fsync", spy)
    return inodes


# --- outputs.py: what reaches the disk, and when ------------------------------------------------


def test_a_durable_atomic_write_is_fsynced_and_a_quick_one_is_not(tmp_path, fsynced):
    """O4 (`if durable` negated): the default write fsyncs the new file before it replaces the old
    one (summary.json, config.yaml, a rewritten chains.jsonl survive a power loss); durable=False
    (a small file rewritten very often) skips it."""
    path = tmp_path / "summary.json"
    write_text_atomic(path, "first\n")
    # The new file, then the folder that holds the rename.
    assert fsynced == [path.stat().st_ino, tmp_path.stat().st_ino] and path.read_text() == "first\n"
    fsynced.clear()
    write_text_atomic(path, "second\n", durable=False)
    assert fsynced == [] and path.read_text() == "second\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_chain_record_and_its_rounds_are_on_disk_once_written(tmp_path, fsynced):
    """O20 (flush_trees does nothing), O22 (append_chain flushes but does not fsync): a resume takes
    every chain in chains.jsonl as finished and never runs it again, so its record must be fsynced
    when appended, and its rounds flushed and fsynced before it (flush_trees)."""
    writer = RunWriter(tmp_path, resume=False)
    try:
        writer.append_tree({"prompt_id": "p", "chain": 0, "round": 0, "nodes": []})
        fsynced.clear()
        writer.flush_trees()
        trees = tmp_path / "trees.jsonl"
        assert read_jsonl(trees) == [{"prompt_id": "p", "chain": 0, "round": 0, "nodes": []}]  # read by another handle
        assert fsynced == [trees.stat().st_ino]
        fsynced.clear()
        writer.append_chain({"prompt_id": "p", "chain": 0, "tokens": [1, 2]})
        chains = tmp_path / "chains.jsonl"
        assert read_jsonl(chains) == [{"prompt_id": "p", "chain": 0, "tokens": [1, 2]}]
        assert fsynced == [chains.stat().st_ino]
    finally:
        writer.close()


@pytest.fixture
def recording_handlers():
    """Python handlers of SIGINT and SIGTERM that only record the signals they get (restored after)."""
    got: list[int] = []

    def record(signum, frame):
        got.append(signum)

    previous = {signum: signal.signal(signum, record) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield record, got
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_signals_held_delivers_each_held_signal_once_in_order_of_arrival_and_restores_the_handlers(
    recording_handlers,
):
    """O9 (each arrival raised again: SIGTERM twice), O10 (held signals dropped at the end), O11 (the
    handlers the block swapped out not set back: a quiet block left its noting handlers installed)."""
    record, got = recording_handlers
    with signals_held():
        pass
    assert signal.getsignal(signal.SIGINT) is record and signal.getsignal(signal.SIGTERM) is record
    with signals_held():
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
            signal.raise_signal(signum)
        assert got == [], "a signal reached its handler inside the block"
    assert got == [signal.SIGTERM, signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is record and signal.getsignal(signal.SIGTERM) is record
    signal.raise_signal(signal.SIGINT)  # after the block: delivered at once
    assert got == [signal.SIGTERM, signal.SIGINT, signal.SIGINT]


def test_a_signal_to_the_noting_handler_after_the_block_goes_to_the_handler_it_replaced(recording_handlers):
    """O8 (a signal that reaches the noting handler once the block is over, between two restores,
    is appended to a list nobody reads): it must go to the handler the block swapped out."""
    record, got = recording_handlers
    with signals_held():
        noting = signal.getsignal(signal.SIGTERM)
        assert noting is not record
    noting(signal.SIGTERM, None)  # as if SIGTERM came while the finally restored SIGINT's handler
    assert got == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is record


# --- run.py: summary.json's figures, by hand ------------------------------------------------------


def test_cut_at_eos_keeps_the_tokens_before_the_first_eos():
    """RN1 (the EOS token kept): graders see the text up to, not including, the first EOS."""
    tokens = np.array([3, 5, 2, 7, 2])
    assert run_module.cut_at_eos(tokens, frozenset({2})).tolist() == [3, 5]
    assert run_module.cut_at_eos(tokens, frozenset({7, 5})).tolist() == [3]
    assert run_module.cut_at_eos(tokens, frozenset({3})).tolist() == []
    assert run_module.cut_at_eos(tokens, frozenset({9})).tolist() == [3, 5, 2, 7, 2]


SUMMARY_RECORDS = [
    {
        "prompt_id": "a",
        "chain": 0,
        "accepts": [1, 0, 1, 1],
        "transitions": 4,
        "rounds": 3,
        "model_calls": 4,
        "call_time_s": 0.5,
        "loglik": -1.0,
        "confidence": 0.5,
        "correct": True,
        "loglik_rescored": -2.0,
        "confidence_rescored": None,
    },
    {
        "prompt_id": "a",
        "chain": 1,
        "accepts": [0, 0, 0, 1],
        "transitions": 4,
        "rounds": 4,
        "model_calls": 2,
        "call_time_s": 0.25,
        "loglik": -3.0,
        "confidence": 0.25,
        "correct": None,
        "grade_error": "RuntimeError: boom",
        "loglik_rescored": None,
    },
    {  # as summary_fields keeps a chain: its accepted moves counted
        "prompt_id": "b",
        "chain": 0,
        "accepted": 1,
        "transitions": 2,
        "rounds": 2,
        "discarded_requests": 3,
        "model_calls": 2,
        "call_time_s": 0.25,
        "loglik": -2.0,
        "confidence": 0.75,
        "correct": False,
        "loglik_rescored": -4.0,
    },
]


@pytest.mark.parametrize(("traversal", "n_pf"), [("sequential", 1), ("bfs", 5)])
def test_the_summary_figures_are_those_of_the_records(toy_table, traversal, n_pf):
    """RN2 (accepted moves counted as transitions), RN4 (a sequential run reports its n_pf setting,
    not 1 call per transition), RN5 (complete only with chains beyond the expected ones), RN6 (every
    chain counted ungraded), RN7 (a rescored mean missing a value), RN25 (prompts counted as chains):
    every figure recomputed by hand from three records."""
    settings = validate(compose_run(*toy_overrides(toy_table), f"traversal={traversal}", "budget.n_pf=5"))
    expected = [("a", 0), ("a", 1), ("b", 0)]
    summary = run_module.summarize(settings, SUMMARY_RECORDS, ToyEngine(toy_table), 9.0, expected)
    assert summary["n_pf"] == n_pf and summary["traversal"] == traversal and summary["sampler"] == "powermh"
    assert (summary["prompts"], summary["chains"], summary["transitions"], summary["model_calls"]) == (2, 3, 10, 8)
    assert summary["call_time_s"] == 1.0 and summary["time_per_call_s"] == 1.0 / 8
    assert summary["transitions_per_call"] == 10 / 8
    assert summary["acceptance_rate"] == (3 + 1 + 1) / 10
    assert summary["prefetch_rounds"] == 9 and summary["discarded_requests"] == 3
    assert summary["loglik_mean"] == -2.0 and summary["confidence_mean"] == 0.5
    assert (summary["graded"], summary["ungraded"], summary["grade_errors"], summary["accuracy"]) == (2, 1, 1, 0.5)
    assert summary["loglik_rescored_mean"] == -3.0 and "confidence_rescored_mean" not in summary
    assert summary["expected_chains"] == 3 and summary["complete"] is True
    assert summary["wall_time_s"] == 9.0 and summary["engine_calls"] == 0
    more = run_module.summarize(settings, SUMMARY_RECORDS, ToyEngine(toy_table), 9.0, [*expected, ("b", 1)])
    assert more["complete"] is False and more["expected_chains"] == 4


def test_per_call_times_are_those_of_the_engines_counted_calls(toy_table):
    """RN9 (a call the engine does not count timed too): an empty request list (a PreSTO round whose
    proposals were all generated in earlier rounds) is no model call, so call_times_s has one time
    per counted call, summing to the chain's call_time_s, and on_call hears 1, 2, ..."""
    engine = ToyEngine(toy_table)
    told: list[int] = []
    request = SuffixRequest((), 3, 1.0, 0)
    with run_module._call_times(engine, told.append) as times:
        for batch in ([], [request], [], [request, request]):
            engine.generate(batch)
    assert len(times) == engine.stats.calls == 2 and told == [1, 2]
    assert sum(times) == pytest.approx(engine.stats.call_time_s, rel=1e-12, abs=0)
    assert "generate" not in vars(engine)  # the engine's own method again


# --- run.py: the resume checks -------------------------------------------------------------------


def test_a_resume_checks_the_prompt_of_each_fingerprinted_chain():
    """RN10 (records written before prompt_sha existed refused): they are not checked; a record whose
    fingerprint is the prompt's passes, one whose is not is refused, one of a prompt the run does
    not have is left to the extent check. RN33 (the fingerprint of other bytes, int32 ids): the
    fingerprint of finished chains must not change, or every older run directory refuses to resume."""
    prompt = [5, 1, 4]
    sha = hashlib.sha256(np.array(prompt, dtype="<i8").tobytes()).hexdigest()[:16]  # 8-byte little-endian ids
    assert run_module.prompt_fingerprint(prompt) == sha == "2fb4e8cde06e8bd7"
    prompts = {"p": prompt}
    run_module.check_resumed_prompts(prompts, [{"prompt_id": "p", "chain": 0}])  # an older record
    run_module.check_resumed_prompts(prompts, [{"prompt_id": "p", "prompt_sha": sha}, {"prompt_id": "q"}])
    run_module.check_resumed_prompts(prompts, [{"prompt_id": "gone", "prompt_sha": "0" * 16}])
    with pytest.raises(ConfigError, match="prompt p is not the prompt"):
        run_module.check_resumed_prompts(
            prompts, [{"prompt_id": "p", "prompt_sha": sha}, {"prompt_id": "p", "prompt_sha": "0" * 16}]
        )


def test_a_resume_refuses_chains_beyond_its_prompts_and_chains_and_no_fewer(tmp_path):
    """RN11 (chain index == chains_per_prompt admitted), RN12 (as many prompts as num_prompts
    refused), RN13 (a chain of a prompt the run no longer has admitted once the ids are known)."""
    settings = SimpleNamespace(chains_per_prompt=2, num_prompts=2, shard=None)
    full = [{"prompt_id": p, "chain": c} for p in ("x", "y") for c in (0, 1)]
    run_module.check_resumed_extent(settings, full, tmp_path)  # exactly the run's chains
    run_module.check_resumed_extent(settings, full, tmp_path, {"x", "y", "z"})
    with pytest.raises(ConfigError, match="chain 2 of prompt x"):
        run_module.check_resumed_extent(settings, [*full, {"prompt_id": "x", "chain": 2}], tmp_path)
    with pytest.raises(ConfigError, match="chains of 3 prompts"):
        run_module.check_resumed_extent(settings, [*full, {"prompt_id": "z", "chain": 0}], tmp_path)
    with pytest.raises(ConfigError, match="chains of prompt y, not one of these prompts"):
        run_module.check_resumed_extent(settings, full, tmp_path, {"x", "z"})


def test_a_resume_may_change_the_logger_but_not_the_sampler(toy_table, tmp_path):
    """RN24 (logger.* keys compared): a resumed run may log elsewhere (W&B now, none before), and
    run.progress may change; a changed sampler key is refused."""
    saved = toy_config(toy_table)
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved, resolve=True))
    run_module.check_resume_config(toy_config(toy_table, "logger=wandb", "run.progress=true"), tmp_path)
    with pytest.raises(ConfigError, match=r"sampler\.steps \(3 -> 4\)"):
        run_module.check_resume_config(toy_config(toy_table, steps=4), tmp_path)


# --- run.py: the run loop, in this process --------------------------------------------------------


def test_each_chain_is_sampled_with_its_own_documented_key(tmp_path):
    """RN16 (ChainKey(seed, chain, prompt index)): chains.jsonl's chain of prompt i, index c is the
    chain of the stream keyed (seed, i, c) (DESIGN.md section 3), run here by run_chain itself.
    A flat table, so that the four chains differ."""
    toy_table = write_toy_table(tmp_path / "flat.json", vocab=6, seed=3, scale=0.5)
    cfg = toy_config(toy_table, "seed=5", "traversal=sequential")
    run_module.run(cfg, tmp_path / "run")
    settings = validate(cfg)
    kernel = run_module.build_sampler(settings.sampler)
    engine = ToyEngine(toy_table)
    schedule = BlockSchedule(8, 4, 3)
    records = read_jsonl(tmp_path / "run" / "chains.jsonl")
    assert [(r["prompt_index"], r["chain"], r["seed"]) for r in records] == [(0, 0, 5), (0, 1, 5), (1, 0, 5), (1, 1, 5)]
    for record in records:
        state, trace = run_chain(
            kernel, engine, SequentialStepper(), [], ChainKey(5, record["prompt_index"], record["chain"]), schedule
        )
        assert record["tokens"] == state.tokens.tolist() and record["accepts"] == trace.accepts
    assert len({tuple(r["tokens"]) for r in records}) == 4  # the keys tell the chains apart


def test_a_chains_rounds_are_on_disk_numbered_from_zero_before_its_record(toy_table, tmp_path, monkeypatch):
    """RN17 (one round counter for the whole run), RN18 (the rounds not flushed before the chain's
    record), RN28 (rounds counted one too many), O20: when a chain's record is appended, trees.jsonl
    on disk holds its rounds 0, 1, ..., rounds - 1; each record's per-call times are its calls'."""
    append_chain = RunWriter.append_chain
    checked = []

    def checking(self, record):
        key = (record["prompt_id"], record["chain"])
        rounds = [t["round"] for t in read_jsonl(self.trees_path) if (t["prompt_id"], t["chain"]) == key]
        assert rounds == list(range(record["rounds"])) and record["rounds"] > 1, (key, rounds)
        checked.append(key)
        append_chain(self, record)

    monkeypatch.setattr(RunWriter, "append_chain", checking)
    summary = run_module.run(toy_config(toy_table, "traversal=bfs", "budget.n_pf=3"), tmp_path)
    assert len(checked) == summary["chains"] == 4
    records = read_jsonl(tmp_path / "chains.jsonl")
    assert summary["prefetch_rounds"] == sum(r["rounds"] for r in records) == len(read_jsonl(tmp_path / "trees.jsonl"))
    for record in records:
        assert len(record["call_times_s"]) == record["model_calls"]
        assert sum(record["call_times_s"]) == pytest.approx(record["call_time_s"], rel=1e-12, abs=0)


def test_a_resumed_run_counts_the_earlier_sessions_time_calls_and_chains(toy_table, tmp_path, monkeypatch):
    """RN20 (the earlier session's wall time dropped), RN30 (its summary not read: its engine calls
    dropped too), RN27 (the bar of a resumed run starting at 0 chains): the second session adds its
    two chains to the first one's two."""
    run_module.run(toy_config(toy_table, "run.chains_per_prompt=1"), tmp_path)
    earlier = json.loads((tmp_path / "summary.json").read_text())
    earlier.update(wall_time_s=1000.0, engine_calls=7)
    (tmp_path / "summary.json").write_text(json.dumps(earlier))
    bars = []

    class Recorded(run_module.RunProgress):
        def __init__(self, total, done, enabled):
            bars.append((total, done))
            super().__init__(total, done, enabled)

    monkeypatch.setattr(run_module, "RunProgress", Recorded)
    summary = run_module.run(toy_config(toy_table, "run.chains_per_prompt=2", "run.resume=true"), tmp_path)
    assert bars == [(4, 2)]
    records = read_jsonl(tmp_path / "chains.jsonl")
    assert summary["chains"] == 4 and summary["complete"] is True
    assert 1000.0 < summary["wall_time_s"] < 1000.0 + 60
    new_calls = sum(r["model_calls"] for r in records if r["chain"] == 1)
    assert summary["engine_calls"] == 7 + new_calls and summary["model_calls"] == sum(r["model_calls"] for r in records)


def test_a_resume_grades_a_failed_chain_again_with_its_own_text(toy_table, tmp_path, monkeypatch):
    """RN3 (resume_fields keeps no text of a chain whose grading failed: it is graded again on the
    empty string): the chains a broken grader left ungraded are graded on their recorded text."""
    from presto.tasks import GradingError
    from presto.tasks.base import Grade
    from presto.tasks.toy import ToyTask

    def broken(self, problem, completion):
        raise RuntimeError("sandbox broke")

    monkeypatch.setattr(ToyTask, "grade", broken)
    with pytest.raises(GradingError):
        run_module.run(toy_config(toy_table, steps=2), tmp_path)
    failed = read_jsonl(tmp_path / "chains.jsonl")
    assert len(failed) == 3 and all(r["grade_error"] and r["text"] for r in failed)
    graded: list[tuple[str, str]] = []

    def recording(self, problem, completion):
        graded.append((problem.problem_id, completion))
        return Grade(True, completion)

    monkeypatch.setattr(ToyTask, "grade", recording)
    summary = run_module.run(toy_config(toy_table, "run.resume=true", steps=2), tmp_path)
    records = read_jsonl(tmp_path / "chains.jsonl")
    assert graded[:3] == [(r["prompt_id"], r["text"]) for r in failed]
    assert [r["extracted"] for r in records] == [r["text"] for r in records]
    assert summary["grade_errors"] == 0 and summary["accuracy"] == 1.0 and summary["complete"] is True


def test_the_run_takes_the_first_num_prompts_problems_and_gives_the_dataset_its_seed(toy_table, tmp_path, monkeypatch):
    """RN32 (the run's seed not passed as dataset.seed: GPQA shuffles its choices by it). The run
    takes the file's first dataset.num_prompts problems (RN31, one more taken, is equivalent: every
    shipped task loads only that many rows itself)."""
    rows = [
        {"problem": f"{i}+{i}?", "solution": str(2 * i), "answer": str(2 * i), "unique_id": f"u{i}"} for i in range(3)
    ]
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose_run(*toy_overrides(toy_table), "dataset=math500", f"dataset.path={data}", "seed=7")
    settings = validate(cfg)
    import presto.tasks

    seen = []
    build_task = presto.tasks.build_task
    monkeypatch.setattr(
        presto.tasks, "build_task", lambda dataset_cfg: seen.append(dict(dataset_cfg)) or build_task(dataset_cfg)
    )
    _task, problems, engine = run_module.load_task_and_engine(cfg, settings)
    engine.close()
    assert [p.problem_id for p in problems] == ["u0", "u1"]
    assert seen[0]["seed"] == 7


# Mutants of the review (56: 22 killed by existing tests only, 8 by existing tests and this file, 24 by
# this file only, 2 equivalent). "Existing" means the test files tried for that mutant: test_long_runs_review,
# test_runner_review_fixes, test_runner_review2, test_tree_logging_review3, test_eval_chain_streaming,
# test_engine_limits and named in-process tests of test_cli (the CLI's subprocess tests were not all run).
#
# outputs.py (23: 15 existing, 1 both, 6 new, 1 equivalent)
#   O1 non-finite floats kept, O2 numpy scalars not converted: existing (test_runner_review_fixes numpy
#   scalars). O3 the temporary sibling left after a failed write: existing (test_cli atomic write).
#   O5 a torn last line warned about, O6 a blank line warned about: existing (test_long_runs_review
#   line-by-line rules). O7 EINVAL not taken as "no flock": existing (test_runner_review_fixes flock).
#   O12 an empty chains.jsonl refused without resume, O13 a new run appends to an old trees.jsonl:
#   existing (test_cli tree log afresh). O14 the unfinished chains' rounds kept on resume: existing
#   (test_long_runs_review unfinished rounds). O15 the keep() reduction written back to chains.jsonl:
#   existing (test_long_runs_review keeps what the run needs). O16 take_previous not forgetting, O17
#   amend_chains one record off, O18 DELETE writes null, O19 append_chain not marking the chain finished:
#   existing (test_long_runs_review hands over earlier chains). O21 the lock not released by close():
#   existing (test_cli one process at a time).
#   O10 held signals never delivered: existing (test_long_runs_review interrupt while writing) and new.
#   O4 `if durable` negated, O8 a late signal to the noting handler dropped, O9 a signal held twice
#   delivered twice, O11 the swapped-out handlers not restored, O20 flush_trees a no-op, O22 no fsync
#   of an appended chain record: new (this file).
#   O23 (_chain_key's default chain -1 -> 0): equivalent: the default is read only for a record without
#       "chain", and the runner writes "chain" into every chain and tree record.
#
# run.py (33: 7 existing, 7 both, 18 new, 1 equivalent)
#   RN8 per-call prefix tokens over this session's calls only, RN29 the earlier peak KV usage dropped:
#   existing (test_cli merges the engine counters). RN14 the rescore token not counted in check_fits:
#   existing (test_engine_limits). RN15 a regraded record keeps grade_error, RN19 the grader stop one
#   chain late, RN21 no regrading on resume: existing (test_runner_review2 broken grader).
#   RN22 SLURM_RESTART_COUNT=0 taken as a requeue: existing (test_cli requeued Slurm job).
#   RN2 accepted moves counted as transitions: existing (test_long_runs_review keeps what the run needs)
#   and new. RN5 `complete` needs a strict superset: existing (test_runner_review2 grader crash) and new.
#   RN11 chain index == chains_per_prompt admitted, RN23 run.chains_per_prompt not resumable: existing
#   (test_long_runs_review shrinking resume) and new. RN12 num_prompts prompts refused: existing
#   (test_runner_review_fixes interrupt before the first chain) and new. RN17 one round counter for
#   the run: existing (test_tree_logging_review3) and new. RN26 one per-call time short: existing
#   (test_eval_chain_streaming) and new.
#   RN1 cut_at_eos keeps the EOS, RN3 no text kept for a chain to regrade, RN4 a sequential run's n_pf
#   reported as the setting, RN6 every chain counted ungraded, RN7 a rescored mean missing a value,
#   RN9 an uncounted (empty) call timed, RN10 records without prompt_sha refused, RN13 a chain of a
#   prompt the run no longer has admitted, RN16 ChainKey(seed, chain, prompt), RN18 rounds not flushed
#   before the chain's record, RN20 the earlier session's wall time dropped, RN24 logger.* compared on
#   resume, RN25 prompts counted as chains, RN27 a resumed run's bar starts at 0, RN28 rounds one too
#   many, RN30 the earlier summary not read, RN32 no dataset.seed from the run's seed, RN33 the
#   fingerprint of int32 ids: new (this file).
#   RN31 (one problem more than dataset.num_prompts taken): equivalent for the shipped tasks: each one
#       loads only its first num_prompts rows itself (tasks/data.py load_rows, MATH, toy), so the
#       runner's slice never cuts.

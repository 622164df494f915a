"""Resources of long runs: what a run keeps per chain, what a resume reads, what a failed sweep job leaves.

Researchers run thousands of chains and sweeps of many jobs in one process; memory that grows
with the run's length (or with the jobs before) must be bounded by what the run still needs.
"""

from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest

from tests.conftest import compose_run, peak_bytes, toy_overrides

# 1. A failed job of a sweep must not keep its run (engine, model, records) alive for the next jobs.


class _Held:
    """Stands for what a job's run holds (its engine and model, its task, its records)."""


def _failing_execute(monkeypatch, tmp_path, error: BaseException):
    """Run presto.cli.execute as sweep job 1 whose run raises ``error`` after building a _Held; returns
    (the exception execute raised, a weak reference to the _Held)."""
    import presto.cli as cli
    import presto.config
    from presto.runner import run as run_module

    held: list[weakref.ref] = []

    def failing_run(cfg, run_dir):
        engine = _Held()  # a local of the job's frames, as run()'s engine is
        held.append(weakref.ref(engine))
        raise error

    monkeypatch.setattr(run_module, "run", failing_run)
    monkeypatch.setattr(presto.config, "validate", lambda cfg: None)
    monkeypatch.setattr(cli, "_run_dir", lambda: tmp_path / "job1")
    monkeypatch.setattr(cli, "_sweep_job", lambda: 1)
    monkeypatch.setattr(cli, "terminate_like_interrupt", lambda: None)
    try:
        cli.execute(None)
    except BaseException as raised:  # Hydra keeps it (JobReturn) until the sweep's last job is done
        return raised, held[0]
    raise AssertionError("execute did not raise")


def test_a_sweep_job_that_fails_with_a_user_error_releases_its_run(monkeypatch, tmp_path):
    from presto.cli import SweepJobFailed
    from presto.config import ConfigError

    raised, held = _failing_execute(monkeypatch, tmp_path, ConfigError("a mistake found after the engine was built"))
    assert isinstance(raised, SweepJobFailed)
    gc.collect()
    assert held() is None, "the failed job's engine stays alive while Hydra holds its exception"


def test_a_sweep_job_that_fails_with_a_bug_releases_its_run(monkeypatch, tmp_path):
    raised, held = _failing_execute(monkeypatch, tmp_path, RuntimeError("an engine call failed"))
    assert isinstance(raised, RuntimeError)
    gc.collect()
    assert held() is None, "the failed job's engine stays alive while Hydra holds its exception"


# 2. The run keeps, per finished chain, only the figures its summary needs.


def _run_in_process(table, run_dir, *extra, monkeypatch):
    """run(cfg) in this process; returns (summary, the chain records summarize() was given)."""
    from presto.runner import run as run_module

    given: list[list[dict]] = []
    real = run_module.summarize

    def capturing(settings, records, *args, **kwargs):
        given.append(list(records))
        return real(settings, records, *args, **kwargs)

    monkeypatch.setattr(run_module, "summarize", capturing)
    cfg = compose_run(*toy_overrides(table, steps=5), "run.progress=false", *extra)
    summary = run_module.run(cfg, run_dir)
    return summary, given[-1]


def test_the_run_keeps_no_per_token_or_per_transition_lists_of_finished_chains(toy_table, tmp_path, monkeypatch):
    from presto.runner.outputs import read_jsonl

    run_dir = tmp_path / "run"
    args = ("sampler.max_new_tokens=16", "traversal=bfs")
    _run_in_process(toy_table, run_dir, *args, monkeypatch=monkeypatch)
    # Resumed with more prompts: the earlier session's chains are held the same way.
    summary, kept = _run_in_process(
        toy_table, run_dir, *args, "run.resume=true", "dataset.num_prompts=3", monkeypatch=monkeypatch
    )
    assert len(kept) == summary["chains"] == 6
    for record in kept:
        heavy = sorted(k for k, v in record.items() if isinstance(v, list | tuple | dict | np.ndarray) or k == "text")
        assert not heavy, f"the run keeps {heavy} of every finished chain until its end"
    # ... and the summary is the one of the full records in chains.jsonl.
    from presto.config import validate
    from presto.engines.toy import ToyEngine
    from presto.runner.run import summarize

    full = read_jsonl(run_dir / "chains.jsonl")
    settings = validate(compose_run(*toy_overrides(toy_table, steps=5), *args, "dataset.num_prompts=3"))
    expected = summarize(settings, full, ToyEngine(toy_table), summary["wall_time_s"])
    for key in (
        "chains",
        "prompts",
        "transitions",
        "model_calls",
        "call_time_s",
        "acceptance_rate",
        "loglik_mean",
        "confidence_mean",
        "prefetch_rounds",
        "discarded_requests",
        "graded",
        "ungraded",
        "grade_errors",
    ):
        assert summary[key] == pytest.approx(expected[key]), key


def test_an_interrupt_while_a_chain_is_written_leaves_it_counted_in_the_summary(toy_table, tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM, which the CLI turns into one) during the write and fsync of a chain's
    record: chains.jsonl and the interrupted run's summary.json must agree on the chains."""
    import signal

    from presto.runner.outputs import RunWriter, read_jsonl

    append_chain = RunWriter.append_chain

    def interrupted_while_writing(self, record):
        append_chain(self, record)  # the record is on disk ...
        signal.raise_signal(signal.SIGINT)  # ... and the interrupt comes before the run counts it

    monkeypatch.setattr(RunWriter, "append_chain", interrupted_while_writing)
    # Python's own Ctrl-C handler, as the CLI gives back to a run (presto.cli.terminate_like_interrupt):
    # a test process started in the background by a shell inherits SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    run_dir = tmp_path / "run"
    try:
        with pytest.raises(KeyboardInterrupt):
            _run_in_process(toy_table, run_dir, monkeypatch=monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["chains"] == len(read_jsonl(run_dir / "chains.jsonl")) == 1
    assert summary["complete"] is False


# 3. A resume, and the W&B logger's start, read trees.jsonl line by line, not whole.


def _write_long_run(run_dir, rounds: int, finished_chains: int = 1):
    """chains.jsonl with ``finished_chains`` chains, trees.jsonl with ``rounds`` rounds of each of
    those and of one unfinished chain; returns trees.jsonl's size in bytes."""
    from presto.runner.outputs import dumps

    run_dir.mkdir(parents=True)
    chains = [{"prompt_id": "p", "chain": c, "accepts": [1], "transitions": 1} for c in range(finished_chains)]
    (run_dir / "chains.jsonl").write_text("".join(dumps(r) + "\n" for r in chains))
    node = {"id": 0, "parent": None, "depth": 0, "cut": 3, "features": {f"f{i}": 0.5 for i in range(20)}}
    with (run_dir / "trees.jsonl").open("w") as handle:
        for r in range(rounds):
            for chain in range(finished_chains + 1):  # the last one never finished
                record = {"prompt_id": "p", "chain": chain, "round": r, "nodes": [node] * 8}
                handle.write(dumps(record) + "\n")
    return (run_dir / "trees.jsonl").stat().st_size


def test_a_resume_drops_unfinished_rounds_without_reading_trees_jsonl_whole(tmp_path):
    from presto.runner.outputs import RunWriter, read_jsonl

    run_dir = tmp_path / "run"
    size = _write_long_run(run_dir, rounds=1500)
    writer, peak = peak_bytes(lambda: RunWriter(run_dir, resume=True))
    writer.close()
    trees = read_jsonl(run_dir / "trees.jsonl")
    assert len(trees) == 1500 and {t["chain"] for t in trees} == {0}  # the unfinished chain's rounds dropped
    assert peak < size / 8, f"resuming read {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB trees.jsonl"


def test_the_writer_hands_over_earlier_chains_once_and_still_knows_which_are_finished(tmp_path):
    """take_previous frees the earlier session's records; finished() keeps every chain, new ones too."""
    from presto.runner.outputs import DELETE, RunWriter, read_jsonl

    run_dir = tmp_path / "run"
    _write_long_run(run_dir, rounds=2, finished_chains=2)
    writer = RunWriter(run_dir, resume=True)
    try:
        taken = writer.take_previous()
        assert [(r["prompt_id"], r["chain"]) for r in taken] == [("p", 0), ("p", 1)]
        assert writer.take_previous() == [] and writer.previous == []
        assert writer.finished() == {("p", 0), ("p", 1)}  # not emptied with the records
        writer.append_chain({"prompt_id": "q", "chain": 0})
        assert writer.finished() == {("p", 0), ("p", 1), ("q", 0)}
        writer.amend_chains({1: {"loglik": -1.5, "accepts": DELETE}})  # the second record: chain ("p", 1)
        assert writer.finished() == {("p", 0), ("p", 1), ("q", 0)}  # amending drops no chain
        writer.append_chain({"prompt_id": "q", "chain": 1})  # appends go to the rewritten file
    finally:
        writer.close()
    assert read_jsonl(run_dir / "chains.jsonl") == [
        {"prompt_id": "p", "chain": 0, "accepts": [1], "transitions": 1},
        {"prompt_id": "p", "chain": 1, "transitions": 1, "loglik": -1.5},
        {"prompt_id": "q", "chain": 0},
        {"prompt_id": "q", "chain": 1},
    ]


def test_a_resume_keeps_what_the_run_needs_of_earlier_chains_not_their_records(tmp_path):
    """Earlier chains at paper scale (3072 token ids, the text, per-transition lists): a resume
    used to parse chains.jsonl whole and hold every record until the run took them."""
    from presto.runner.outputs import RunWriter, dumps, read_jsonl
    from presto.runner.run import resume_fields

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = {
        "prompt_id": "p",
        "prompt_sha": "abc",
        "tokens": list(range(3072)),
        "text": "x" * 12000,
        "accepts": [1, 0] * 48,
        "log_accepts": [-0.5] * 96,
        "transitions": 96,
        "model_calls": 20,
        "call_time_s": 2.5,
        "loglik": -3.0,
        "confidence": 0.5,
        "correct": None,
    }
    lines = [dumps({**record, "chain": c, **({"grade_error": "boom"} if c == 7 else {})}) + "\n" for c in range(200)]
    (run_dir / "chains.jsonl").write_text("".join(lines) + lines[0][:100])  # and a torn last line
    size = (run_dir / "chains.jsonl").stat().st_size
    writer, peak = peak_bytes(lambda: RunWriter(run_dir, resume=True, keep=resume_fields))
    try:
        assert peak < size / 10, f"resuming read {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB chains.jsonl"
        previous = writer.take_previous()
    finally:
        writer.close()
    assert (run_dir / "chains.jsonl").read_text() == "".join(lines)  # the torn line dropped, the rest as it was
    assert len(previous) == 200 and all("tokens" not in r and "accepts" not in r for r in previous)
    assert previous[3] == {
        **{k: record[k] for k in ("prompt_id", "transitions", "model_calls", "call_time_s", "loglik", "confidence")},
        "chain": 3,
        "correct": None,
        "accepted": 48,
        "prompt_sha": "abc",
    }
    assert previous[7]["text"] == record["text"] and previous[7]["grade_error"] == "boom"  # to grade it again
    assert len(read_jsonl(run_dir / "chains.jsonl")) == 200


def test_the_wandb_logger_counts_logged_rounds_without_reading_trees_jsonl_whole(tmp_path):
    pytest.importorskip("wandb")
    from presto.eval.wandb_logger import WandbLogger

    warm = tmp_path / "warm"  # wandb's own first-use allocations are not the logger's
    WandbLogger({"mode": "disabled", "log_plots": False}, {}, warm).finish()
    run_dir = tmp_path / "run"
    size = _write_long_run(run_dir, rounds=1000)
    logger, peak = peak_bytes(lambda: WandbLogger({"mode": "disabled", "log_plots": False}, {}, run_dir))
    logger.finish()
    assert (logger.rounds, logger.chains) == (2000, 1)
    assert peak < size / 8, f"the W&B logger read {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB trees.jsonl"


def test_reading_jsonl_line_by_line_keeps_its_rules(tmp_path, capsys):
    """A torn last line is dropped silently; a bad line elsewhere is skipped with a warning naming it."""
    from presto.runner.outputs import read_jsonl

    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n" + "not json\n" + "\n" + json.dumps({"a": 2}) + '\n{"a": ')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    err = capsys.readouterr().err
    assert "line 2 is not JSON" in err and "line 3" not in err and "line 5" not in err
    assert read_jsonl(tmp_path / "missing.jsonl") == []


# 4. Fixes from the fifteenth session's second read.


def test_a_chain_recorded_twice_keeps_its_first_record_and_amending_changes_only_that(tmp_path, capsys):
    """A chain recorded twice (a resume by an older version, a hand merge): a resume keeps the first
    record, drops the second with a warning naming its line (counted, it made the summary's totals
    wrong), and amending the kept record by position changes it alone."""
    from presto.runner.outputs import DELETE, RunWriter, dumps, read_jsonl

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    failed = {"prompt_id": "p", "chain": 0, "correct": None, "grade_error": "boom", "text": "a"}
    graded = {"prompt_id": "p", "chain": 0, "correct": True, "extracted": "X", "text": "b"}
    other = {"prompt_id": "p", "chain": 1, "correct": True, "text": "c"}
    (run_dir / "chains.jsonl").write_text(dumps(failed) + "\n" + dumps(graded) + "\n" + dumps(other) + "\n")
    writer = RunWriter(run_dir, resume=True)
    try:
        assert writer.finished() == {("p", 0), ("p", 1)} and len(writer.previous) == 2
        writer.amend_chains({0: {"correct": False, "extracted": None, "grade_error": DELETE}})
    finally:
        writer.close()
    err = capsys.readouterr().err
    assert "line 2 is a second record of chain 0 of p (the first is kept); moved to chains.dropped.jsonl" in err
    assert read_jsonl(run_dir / "chains.dropped.jsonl") == [graded]  # kept aside, not lost
    assert read_jsonl(run_dir / "chains.jsonl") == [
        {"prompt_id": "p", "chain": 0, "correct": False, "text": "a", "extracted": None},
        other,
    ]


def test_a_shrinking_resume_is_refused_before_the_engine_loads(toy_table, tmp_path, monkeypatch):
    """Loading takes minutes on a GPU (and the W&B run would be resumed, then ended): the counts
    in chains.jsonl tell a resume with fewer chains or prompts apart before anything loads."""
    from presto.config import ConfigError
    from presto.runner import run as run_module

    run_dir = tmp_path / "run"
    _run_in_process(toy_table, run_dir, monkeypatch=monkeypatch)  # 2 prompts x 2 chains

    def no_loading(*args, **kwargs):
        raise AssertionError("the engine loaded before the resume was refused")

    monkeypatch.setattr(run_module, "load_task_and_engine", no_loading)
    for fewer in ("run.chains_per_prompt=1", "dataset.num_prompts=1"):
        cfg = compose_run(*toy_overrides(toy_table, steps=5), "run.progress=false", "run.resume=true", fewer)
        with pytest.raises(ConfigError, match="which its summary would count"):
            run_module.run(cfg, run_dir)

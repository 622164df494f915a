"""The runner's edges: a sweep that outlives one bad job, locks, logger names, engine cleanup, JSON."""

from __future__ import annotations

import errno
import json
import pickle

import numpy as np
import pytest

from tests.conftest import compose_run, run_cli, toy_args, toy_overrides


def toy_run_config(table, *extra: str):
    return compose_run(*toy_overrides(table, steps=2), "run.progress=false", *extra)


@pytest.fixture
def engine_closes(monkeypatch):
    """How many times the run closed its engine (a list that grows by one per close)."""
    from presto.runner import run as run_module

    closes: list[bool] = []
    real = run_module.engine_from_config

    def tracking(cfg):
        engine = real(cfg)
        close = engine.close

        def counted_close():
            closes.append(True)
            close()

        engine.close = counted_close
        return engine

    monkeypatch.setattr(run_module, "engine_from_config", tracking)
    return closes


# 1. A user error in one sweep job


def test_a_user_error_in_one_sweep_job_lets_the_others_run_and_fails_the_sweep(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}", "run.progress=false", steps=2)
    assert run_cli("-m", *args, "seed=0").returncode == 0
    # Job 0 now finds chains in its directory (no run.resume): its own mistake, not job 1's.
    result = run_cli("-m", *args, "seed=0,1")
    assert (sweep_dir / "1" / "summary.json").exists(), "the job after the failed one must still run"
    assert result.returncode != 0, "a sweep with a failed job must not exit 0"
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors and all("sweep job 0" in line and "already holds chains" in line for line in errors), result.stderr


def test_a_failed_sweep_job_pickles_for_launchers_in_other_processes():
    """joblib and submitit send a job's exception back to the sweeper pickled."""
    from hydra.errors import CompactHydraException

    from presto.cli import SweepJobFailed

    err = pickle.loads(pickle.dumps(SweepJobFailed("error: sweep job 3 failed: x")))
    assert isinstance(err, CompactHydraException) and str(err) == "error: sweep job 3 failed: x"


# 2. Filesystems without flock


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL])
def test_a_filesystem_without_flock_runs_unlocked_with_a_warning(tmp_path, monkeypatch, capsys, code):
    import fcntl

    from presto.runner.outputs import RunWriter

    def no_flock(fd, operation):
        raise OSError(code, "flock not supported")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    writer = RunWriter(tmp_path, resume=False)
    writer.append_chain({"prompt_id": "p", "chain": 0})
    writer.close()
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "cannot lock" in warnings[0], warnings


def test_another_flock_error_still_raises(tmp_path, monkeypatch):
    import fcntl

    from presto.runner.outputs import RunWriter

    def broken(fd, operation):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError, match="I/O error"):
        RunWriter(tmp_path, resume=False)


# 3. logger.name


def test_an_unknown_logger_name_is_one_line_before_anything_loads(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir), "logger.name=bogus")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: logger.name=bogus is not a logger; choose one of: none, wandb"], result.stderr
    assert not run_dir.exists()


def test_a_null_logger_name_is_no_logger(toy_table, tmp_path):
    from presto.config import ConfigError, validate
    from presto.runner.logging import NullLogger, build_logger

    validate(toy_run_config(toy_table, "logger.name=null"))
    assert isinstance(build_logger({"name": None}, {}, tmp_path), NullLogger)
    with pytest.raises(ConfigError, match=r"logger\.name=bogus"):
        validate(toy_run_config(toy_table, "logger.name=bogus"))


# 4. The engine is closed when the setup after loading it fails


def test_a_locked_run_directory_still_closes_the_engine(toy_table, tmp_path, engine_closes):
    from presto.runner.outputs import RunWriter
    from presto.runner.run import run

    holder = RunWriter(tmp_path, resume=False)  # another run writing here now
    try:
        with pytest.raises(FileExistsError, match="another run is writing"):
            run(toy_run_config(toy_table), tmp_path)
    finally:
        holder.close()
    assert engine_closes == [True]


def test_a_logger_that_cannot_start_closes_the_engine_and_frees_the_directory(
    toy_table, tmp_path, engine_closes, monkeypatch
):
    from presto.runner import run as run_module
    from presto.runner.outputs import RunWriter

    def no_logger(*args):
        raise RuntimeError("no tracker")

    monkeypatch.setattr(run_module, "build_logger", no_logger)
    with pytest.raises(RuntimeError, match="no tracker"):
        run_module.run(toy_run_config(toy_table), tmp_path)
    assert engine_closes == [True]
    RunWriter(tmp_path, resume=True).close()  # the failed run's lock is released


# 5. config.yaml is replaced atomically


def test_config_yaml_is_written_atomically(toy_table, tmp_path, monkeypatch):
    from presto.runner import run as run_module

    written = []
    real = run_module.write_text_atomic

    def spy(path, text):
        written.append(path.name)
        real(path, text)

    monkeypatch.setattr(run_module, "write_text_atomic", spy)
    run_module.run(toy_run_config(toy_table), tmp_path)
    assert written == ["config.yaml"]
    from omegaconf import OmegaConf

    assert OmegaConf.load(tmp_path / "config.yaml").engine.table == str(toy_table)


# 6. The default tau


def test_a_default_tau_that_overflows_is_one_line(toy_table):
    from presto.config import ConfigError, validate

    with pytest.raises(ConfigError, match=r"sampler\.tau=null takes 1/sampler\.alpha"):
        validate(toy_run_config(toy_table, "sampler.alpha=1e-320"))
    assert validate(toy_run_config(toy_table, "sampler.alpha=4")).sampler.tau == 0.25


# 7. numpy scalars in records


def test_numpy_scalars_become_json():
    from presto.runner.outputs import dumps

    record = {"ok": np.bool_(True), "n": np.int32(3), "x": np.float32(0.5), "bad": np.float64("nan")}
    assert json.loads(dumps(record)) == {"ok": True, "n": 3, "x": 0.5, "bad": None}


@pytest.mark.parametrize(
    "record",
    [
        {"a": 1.5, "b": [1, 2.0, float("nan")], "c": np.float32(0.1)},  # a non-finite float deep down
        {"x": np.arange(3), "y": np.array([1.0, np.inf]), "z": np.bool_(True), "t": (1, np.int64(3))},
        {"d": {1: np.float64(2.5), "e": np.longdouble(1.25)}, "k": -0.0, "l": 1e308, "s": "é"},
        {np.int64(3): 1},  # a numpy key
        {"nodes": [{"cut": np.int64(5), "features": {"f": 0.25, "g": np.float64(-1e-300)}}] * 3},
    ],
)
def test_dumps_writes_what_the_plain_conversion_writes(record):
    """dumps writes finite Python records directly (numpy values through json's hook) and falls back
    to the whole-record conversion otherwise: either way, the same line."""
    from presto.runner.outputs import _plain, dumps

    assert dumps(record) == json.dumps(_plain(record), allow_nan=False)


def test_resuming_refuses_chains_whose_prompt_is_no_longer_that_ids_prompt(toy_table, tmp_path):
    """Positional ids (``math500/7`` from a file without an id column) would attach an edited
    file's problems to the old chains; each record's prompt_sha catches it."""
    run_dir = tmp_path / "run"
    first = run_cli(*toy_args(toy_table, run_dir, "dataset.num_prompts=1"))
    assert first.returncode == 0, first.stderr
    records = [json.loads(line) for line in (run_dir / "chains.jsonl").read_text().splitlines()]
    assert all(len(r["prompt_sha"]) == 16 for r in records)
    same = run_cli(*toy_args(toy_table, run_dir, "dataset.num_prompts=2", "run.resume=true"))
    assert same.returncode == 0, same.stderr  # the same prompts: it resumes
    records[0]["prompt_sha"] = "0" * 16  # as if the first prompt had been edited since
    (run_dir / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    edited = run_cli(*toy_args(toy_table, run_dir, "dataset.num_prompts=2", "run.resume=true"))
    assert edited.returncode == 2 and "Traceback" not in edited.stderr, edited.stderr
    assert f"prompt {records[0]['prompt_id']} is not the prompt its finished chains were sampled from" in edited.stderr


# 6. An interrupt after the setup and before the first chain (audit, seventeenth session)


@pytest.mark.parametrize("resume", [False, True])
def test_an_interrupt_before_the_first_chain_closes_the_engine_and_keeps_the_summary(
    toy_table, tmp_path, engine_closes, monkeypatch, resume
):
    """A SIGTERM between config.yaml and the chain loop (the progress bar's import, regrading a
    resumed run's chains) escaped run() with no summary, the engine and the directory's lock held."""
    from presto.runner import run as run_module
    from presto.runner.outputs import RunWriter

    if resume:  # a finished run, resumed with more chains per prompt
        run_module.run(toy_run_config(toy_table), tmp_path)
        engine_closes.clear()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "RunProgress", interrupted)
    extra = ("run.resume=true", "run.chains_per_prompt=3") if resume else ()
    with pytest.raises(KeyboardInterrupt):
        run_module.run(toy_run_config(toy_table, *extra), tmp_path)
    assert engine_closes == [True]
    RunWriter(tmp_path, resume=True).close()  # the lock is released
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["chains"] == (4 if resume else 0) and summary["complete"] is False


SIGNALS_HELD = """
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[1])
from presto.runner.outputs import signals_held

def interrupt(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, interrupt)
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()  # another thread, as torch's or vLLM's
steps = []
try:
    with signals_held():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(20):
            time.sleep(0.01)
        steps.append("block finished")
    steps.append("after the block")
except KeyboardInterrupt:
    steps.append("interrupted")
print(",".join(steps))
"""


def test_signals_are_held_in_a_process_with_other_threads(tmp_path):
    """signals_held masked SIGTERM in the main thread only: with other threads running, the
    kernel delivered it to one of them and Python's handler still ran inside the block."""
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    script = tmp_path / "held.py"
    script.write_text(SIGNALS_HELD)
    done = subprocess.run(
        [sys.executable, str(script), str(PROJECT_ROOT / "src")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "block finished,interrupted"

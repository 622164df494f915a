"""Review of logger=wandb (offline only): W&B steps across a resume, and the group of a multirun's jobs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MAIN, toy_args

pytest.importorskip("wandb")


def records(path: Path):
    """The records of an offline run's transaction log (``run-*.wandb``), as protobuf messages.

    The log is LevelDB-style: a 7-byte file header, then 32 KiB blocks of records, each with a
    7-byte header (checksum, length, type: 1 full, 2 first, 3 middle, 4 last).
    """
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def history_steps(path: Path) -> list[int]:
    """The ``_step`` of every history row of an offline run."""
    return [r.history.step.num for r in records(path) if r.WhichOneof("record_type") == "history"]


def run_record(path: Path):
    """The run record (id, name, group) of an offline run."""
    return next(r.run for r in records(path) if r.WhichOneof("record_type") == "run")


def offline_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update({"WANDB_DIR": str(tmp_path / "wandb_home"), "WANDB_SILENT": "true", "HOME": str(tmp_path)})
    env["WANDB_MODE"] = "offline"  # never online, whatever credentials the machine has
    return env


def test_a_resumed_offline_run_logs_past_the_steps_it_logged_before(toy_table, tmp_path):
    """Offline, W&B starts a resumed run's ``_step`` at 0 again; on `wandb sync` the server drops rows
    whose step is not past the run's last one, so the resumed segment's metrics would vanish silently."""
    env, run_dir = offline_env(tmp_path), tmp_path / "run"
    for extra in (("dataset.num_prompts=1",), ("dataset.num_prompts=2", "run.resume=true")):
        args = toy_args(toy_table, run_dir, "logger=wandb", "traversal=bfs", "budget.n_pf=2", *extra)
        result = subprocess.run(
            [sys.executable, str(MAIN), *args], capture_output=True, text=True, timeout=300, cwd="/", env=env
        )
        assert result.returncode == 0, result.stderr
        assert "W&B logging stopped" not in result.stderr
    first, second = sorted((tmp_path / "wandb_home" / "wandb").glob("offline-run-*"))
    (first_log,), (second_log,) = first.glob("run-*.wandb"), second.glob("run-*.wandb")
    before, after = history_steps(first_log), history_steps(second_log)
    assert before and after
    assert before == sorted(set(before)) and after == sorted(set(after))  # each segment moves forward
    assert min(after) > max(before), (before, after)


def test_the_jobs_of_a_multirun_share_a_wandb_group(toy_table, tmp_path):
    """Without logger.group, a -m sweep's jobs are grouped by their multirun directory."""
    from tests.conftest import toy_overrides

    sweep_dir = tmp_path / "multi"
    args = (*toy_overrides(toy_table), "dataset.num_prompts=1", "run.chains_per_prompt=1", "traversal=bfs")
    args = ("-m", *args, "budget.n_pf=2,4", "logger=wandb", "logger.log_plots=false", f"hydra.sweep.dir={sweep_dir}")
    result = subprocess.run(
        [sys.executable, str(MAIN), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env=offline_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    metadata = [
        run_record(log) for log in sorted((tmp_path / "wandb_home" / "wandb").glob("offline-run-*/run-*.wandb"))
    ]
    assert sorted(m.display_name for m in metadata) == ["powermh-bfs-npf2-0", "powermh-bfs-npf4-1"]
    assert [m.run_group for m in metadata] == ["multi", "multi"]
    assert len({m.run_id for m in metadata}) == 2


def test_a_run_directory_without_a_stored_step_resumes_past_its_rows(tmp_path, monkeypatch):
    """wandb_indices.json from before the step was kept: past one row per round and chain, and the plots."""
    from presto.eval.wandb_logger import WandbLogger

    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    (tmp_path / "wandb_indices.json").write_text('{"rounds": 3, "chains": 1}')
    logger = WandbLogger({"name": "wandb", "mode": "disabled", "log_plots": False}, {}, tmp_path)
    assert (logger.rounds, logger.chains, logger.step) == (3, 1, 5)
    logger.on_round({"realized": 2, "call_time_s": 0.1, "requests": 4})
    logger.finish()
    assert json.loads((tmp_path / "wandb_indices.json").read_text()) == {"rounds": 4, "chains": 1, "step": 6}


@pytest.mark.parametrize("value", ["no", "off", "maybe"])
def test_train_predictor_refuses_a_require_improvement_that_is_not_a_flag(tmp_path, value):
    """bool("no") is True: the run would withhold the checkpoint, the opposite of what was asked."""
    script = MAIN.parent / "train_predictor.py"
    args = [f"runs=[{tmp_path / 'nothing'}]", f"require_improvement={value}", f"hydra.run.dir={tmp_path / 'out'}"]
    result = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300, cwd="/")
    assert result.returncode == 2
    assert result.stderr == f"error: require_improvement must be true or false, got '{value}'\n"


def test_train_predictor_leaves_no_empty_output_directory_on_a_config_error(tmp_path):
    """As src/main.py does: a mistake in the overrides must not leave outputs/predictor/<time> behind."""
    script = MAIN.parent / "train_predictor.py"
    out = tmp_path / "out"
    args = [f"runs=[{tmp_path / 'nothing'}]", f"hydra.run.dir={out}"]
    result = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300, cwd="/")
    assert result.returncode == 2 and result.stderr.startswith("error: no such run directory"), result.stderr
    assert not out.exists()

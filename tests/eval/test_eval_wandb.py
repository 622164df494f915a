"""logger=wandb: offline by default without an API key; the run's W&B files hold the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from presto.eval.wandb_logger import mode_source, resolve_mode
from tests.conftest import MAIN, toy_args


def test_mode_is_offline_without_credentials(tmp_path):
    home = {"HOME": str(tmp_path)}  # no ~/.netrc there
    assert resolve_mode(None, home) == "offline"
    assert resolve_mode(None, {**home, "WANDB_API_KEY": "x"}) == "online"
    assert resolve_mode(None, {**home, "WANDB_API_KEY": "x", "WANDB_MODE": "offline"}) == "offline"
    assert resolve_mode("disabled", {**home, "WANDB_API_KEY": "x"}) == "disabled"
    assert resolve_mode(None, {**home, "WANDB_MODE": "dryrun"}) == "offline"  # wandb's older name
    with pytest.raises(ValueError, match=r"logger\.mode"):
        resolve_mode("sometimes", home)
    with pytest.raises(ValueError, match="WANDB_MODE=sometimes"):  # names what the user did set
        resolve_mode(None, {**home, "WANDB_MODE": "sometimes"})


def test_wandb_login_credentials_make_it_online(tmp_path):
    # `wandb login` stores the key in ~/.netrc, not in the environment (sweep agents rely on it).
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k3y\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert resolve_mode(None, {"HOME": str(tmp_path)}) == "online"
    other = {"HOME": str(tmp_path), "WANDB_BASE_URL": "https://wandb.example.org"}
    assert resolve_mode(None, other) == "offline"  # a key for another host does not count


def test_offline_wandb_run_holds_config_metrics_and_summary(toy_table, tmp_path):
    wandb_dir = tmp_path / "wandb_home"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE")}
    env.update({"WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true", "HF_HUB_OFFLINE": "1"})
    run_dir = tmp_path / "run"
    args = toy_args(toy_table, run_dir, "logger=wandb", "traversal=bfs", "budget.n_pf=4")
    result = subprocess.run(
        [sys.executable, str(MAIN), *args], capture_output=True, text=True, timeout=300, cwd="/", env=env
    )
    assert result.returncode == 0, result.stderr
    assert "W&B logging stopped" not in result.stderr
    (offline,) = list((wandb_dir / "wandb").glob("offline-run-*"))
    # How to upload it: at the start, and again as the last line (the first is among engine logs).
    hint = f"`wandb sync {offline}`"
    why = "no API key: `wandb login` or WANDB_API_KEY"
    assert f"notice: W&B is offline ({why}); upload later with {hint}" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"notice: this W&B run is offline; upload it with {hint}"
    summary = json.loads((run_dir / "summary.json").read_text())
    logged = json.loads((offline / "files" / "presto_summary.json").read_text())
    assert logged["call_time_s"] == summary["call_time_s"] and logged["chains"] == summary["chains"] == 4
    (binary,) = list(offline.glob("run-*.wandb"))
    data = binary.read_bytes()
    for key in (b"transitions_per_call", b"chain/loglik", b"round/realized", b"engine.table", b"budget"):
        assert key in data, key  # summary, per-chain and per-round metrics, and the resolved config
    images = list((offline / "files" / "media" / "images").rglob("*.png"))
    assert images and (run_dir / "plots").is_dir()


def test_a_disabled_wandb_run_still_writes_its_plots(toy_table, tmp_path):
    """mode=disabled gives a stand-in W&B run without a folder: the run's own figures must not depend on it."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE")}
    env.update({"WANDB_DIR": str(tmp_path / "wandb_home"), "WANDB_SILENT": "true"})
    run_dir = tmp_path / "run"
    args = toy_args(toy_table, run_dir, "logger=wandb", "logger.mode=disabled", "traversal=bfs", "budget.n_pf=4")
    result = subprocess.run(
        [sys.executable, str(MAIN), *args], capture_output=True, text=True, timeout=300, cwd="/", env=env
    )
    assert result.returncode == 0, result.stderr
    assert "W&B logging stopped" not in result.stderr and "could not be drawn" not in result.stderr
    assert list((run_dir / "plots").glob("*.png"))


def test_a_resumed_run_continues_its_wandb_run(toy_table, tmp_path):
    wandb_dir = tmp_path / "wandb_home"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_RUN_ID")}
    env.update({"WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true", "HOME": str(tmp_path)})
    run_dir = tmp_path / "run"
    for extra in (("dataset.num_prompts=1",), ("dataset.num_prompts=2", "run.resume=true")):
        args = toy_args(toy_table, run_dir, "logger=wandb", "logger.log_plots=false", *extra)
        result = subprocess.run(
            [sys.executable, str(MAIN), *args], capture_output=True, text=True, timeout=300, cwd="/", env=env
        )
        assert result.returncode == 0, result.stderr
        assert "notice: W&B is offline" in result.stderr and "wandb sync" in result.stderr
    run_id = (run_dir / "wandb_run_id").read_text().strip()
    offline = sorted((wandb_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(path.name.endswith(f"-{run_id}") for path in offline)
    # The resumed run's hint syncs both parts, the first first: the server keeps only rows past its last step.
    hint = f"`wandb sync {offline[0]} {offline[1]}`"
    assert result.stderr.strip().splitlines()[-1] == f"notice: this W&B run is offline; upload it with {hint}"


def test_the_offline_notice_names_why(tmp_path):
    home = {"HOME": str(tmp_path)}
    assert mode_source(None, home) == "no API key: `wandb login` or WANDB_API_KEY"
    assert mode_source(None, {**home, "WANDB_API_KEY": "x", "WANDB_MODE": "dryrun"}) == "WANDB_MODE=offline"
    assert mode_source("offline", {**home, "WANDB_API_KEY": "x"}) == "logger.mode=offline"
    assert mode_source(None, {**home, "WANDB_API_KEY": "x"}) == "W&B has credentials"


def test_a_resumed_run_logs_past_the_rounds_its_interrupted_chain_logged(tmp_path, monkeypatch):
    """Resuming drops the interrupted chain's rounds from trees.jsonl; W&B already holds their indices."""
    from presto.eval.wandb_logger import WandbLogger

    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = {"name": "wandb", "mode": "disabled", "log_plots": False}
    first = WandbLogger(cfg, {}, run_dir)
    for _ in range(3):
        first.on_round({"realized": 2, "call_time_s": 0.1, "requests": 4})
    first.on_chain({"transitions": 6, "model_calls": 3, "call_time_s": 0.3, "accepts": [1, 0]})
    first.finish()
    (run_dir / "trees.jsonl").write_text('{"round": 0}\n')  # what a resume kept of the three
    resumed = WandbLogger(cfg, {}, run_dir)
    assert (resumed.rounds, resumed.chains) == (3, 1)
    resumed.finish()

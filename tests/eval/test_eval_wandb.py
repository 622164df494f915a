"""logger=wandb: offline by default without an API key; the run's W&B files hold the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from presto.eval.wandb_logger import resolve_mode
from tests.conftest import MAIN, toy_args


def test_mode_is_offline_without_a_key():
    assert resolve_mode(None, {}) == "offline"
    assert resolve_mode(None, {"WANDB_API_KEY": "x"}) == "online"
    assert resolve_mode(None, {"WANDB_API_KEY": "x", "WANDB_MODE": "offline"}) == "offline"
    assert resolve_mode("disabled", {"WANDB_API_KEY": "x"}) == "disabled"
    with pytest.raises(ValueError, match=r"logger\.mode"):
        resolve_mode("sometimes", {})


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
    summary = json.loads((run_dir / "summary.json").read_text())
    logged = json.loads((offline / "files" / "presto_summary.json").read_text())
    assert logged["call_time_s"] == summary["call_time_s"] and logged["chains"] == summary["chains"] == 4
    (binary,) = list(offline.glob("run-*.wandb"))
    data = binary.read_bytes()
    for key in (b"transitions_per_call", b"chain/loglik", b"round/realized", b"engine.table", b"budget"):
        assert key in data, key  # summary, per-chain and per-round metrics, and the resolved config
    images = list((offline / "files" / "media" / "images").rglob("*.png"))
    assert images and (run_dir / "plots").is_dir()

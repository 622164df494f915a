"""Shared fixtures: toy tables, and a runner for the CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# vLLM on the CPU: in-process engine core and an explicit thread count, both read when torch
# is first imported, so they must be set before any test module imports torch or vllm. One
# thread: the test models are tiny, so OpenMP synchronization dominates, and on shared CI cores
# two threads made the vLLM chain test 25x slower (55 s vs 2 s). Export OMP_NUM_THREADS to change.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MAIN = PROJECT_ROOT / "src" / "main.py"
# Test this checkout's code even when the editable install points at another clone.
sys.path.insert(0, str(PROJECT_ROOT / "src"))


def write_toy_table(path: Path, vocab: int, seed: int, scale: float = 1.5) -> Path:
    rng = np.random.default_rng(seed)
    table = {
        "bos_logits": (scale * rng.normal(size=vocab)).tolist(),
        "logits": (scale * rng.normal(size=(vocab, vocab))).tolist(),
    }
    path.write_text(json.dumps(table))
    return path


@pytest.fixture
def toy_table(tmp_path: Path) -> Path:
    return write_toy_table(tmp_path / "table.json", vocab=6, seed=3)


def run_cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python src/main.py ARGS` from an unrelated working directory."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, str(MAIN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env=full_env,
    )


def toy_args(table, run_dir, *extra, steps: int = 6):
    """CLI arguments of a small toy-engine run (2 prompts x 2 chains, n=8, B=4) into ``run_dir``."""
    return (*toy_overrides(table, steps=steps), f"hydra.run.dir={run_dir}", *extra)


def toy_overrides(table, steps: int = 6) -> tuple[str, ...]:
    """Config overrides of the small toy setting (2 prompts x 2 chains, n=8, B=4, K=steps)."""
    return (
        "engine=toy",
        "model=toy",
        f"engine.table={table}",
        "dataset=toy",
        "experiment=none",
        "dataset.num_prompts=2",
        "run.chains_per_prompt=2",
        "sampler.max_new_tokens=8",
        "sampler.block_size=4",
        f"sampler.steps={steps}",
    )

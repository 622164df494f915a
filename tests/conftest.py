"""Shared fixtures: toy tables, and a runner for the CLI in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

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


def compose_run(*overrides: str):
    """The run config of ``conf/config.yaml`` with ``overrides``, as Hydra composes it for a job."""
    from hydra import compose, initialize_config_dir

    from presto.cli import register_resolvers

    register_resolvers(PROJECT_ROOT)
    with initialize_config_dir(str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def peak_bytes(work):
    """(``work()``, the peak of the memory Python allocated while it ran, in bytes: tracemalloc)."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def training_config(runs_list, **overrides):
    """train_predictor.yaml's keys with a quick logistic model (cut fraction, 2 epochs), as run_training
    reads them; ``overrides`` replace top-level keys."""
    cfg = {
        "runs": [str(r) for r in runs_list],
        "features": ["cut"],
        "weighting": "reach",
        "epsilon": 0.01,
        "folds": 5,
        "seed": 0,
        "output": None,
        "require_improvement": False,
        "predictor": {
            "name": "logistic",
            "hidden": [],
            "l2": 1.0,
            "optimizer": "lbfgs",
            "learning_rate": 1.0,
            "max_epochs": 2,
            "batch_size": None,
            "val_fraction": 0.0,
            "patience": 10,
        },
    }
    cfg.update(overrides)
    from omegaconf import OmegaConf

    return OmegaConf.create(cfg)


def write_toy_table(path: Path, vocab: int, seed: int, scale: float = 1.5) -> Path:
    from presto.engines.toy import write_random_toy_table  # after sys.path holds this checkout's src

    return write_random_toy_table(path, vocab, seed, scale)


@pytest.fixture
def toy_table(tmp_path: Path) -> Path:
    return write_toy_table(tmp_path / "table.json", vocab=6, seed=3)


@pytest.fixture
def validation_losses(monkeypatch) -> list[float]:
    """The weighted validation loss of every epoch a classifier fit runs, in order (a spy on
    EpsilonClassifier.validation_step that leaves it working)."""
    import torch

    from presto.predictor import module as module_py

    losses: list[float] = []
    validate = module_py.EpsilonClassifier.validation_step

    def recording(self, batch, batch_idx):
        x, y, w = batch
        with torch.no_grad():
            loss = (w * torch.nn.functional.cross_entropy(self(x), y, reduction="none")).sum() / w.sum()
        losses.append(float(loss))
        return validate(self, batch, batch_idx)

    monkeypatch.setattr(module_py.EpsilonClassifier, "validation_step", recording)
    return losses


@pytest.fixture
def saved_figures(monkeypatch) -> dict:
    """The figures presto.eval.plots would save, by file name, kept in memory instead of written."""
    from presto.eval import plots

    figures: dict = {}

    def save(fig, path):
        figures[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", save)
    return figures


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


def paper_features(logq, entropy, cut: int, depth: int, node_cut: int, accepts: int) -> dict[str, float]:
    """Appendix E.7's features of a request, recomputed here from a root's per-token log q and entropy
    (an independent reference for presto.prefetch.tree.node_features, not a call to it).

    c_j = ``cut`` (the request), c_i = ``node_cut`` (the cut of the last accepted proposal on the path,
    T at the root), T = len(logq); per statistic: value at the first resampled position (``cut``),
    change into it, change out of it, mean from it.
    """
    length = len(logq)
    out = {
        "cut_fraction": cut / length,
        "parent_cut": node_cut,
        "parent_cut_fraction": node_cut / length,
        "gap": node_cut - cut,
        "gap_fraction": (node_cut - cut) / length,
        "depth": depth,
        "accepts_on_path": accepts,
        "length": length,
    }
    for name, values in (("logq", logq), ("entropy", entropy)):
        values = [float(v) for v in values]
        at = values[cut]
        out[f"{name}_at_cut"] = at
        out[f"{name}_into_cut"] = at - values[cut - 1] if cut >= 1 else 0.0
        out[f"{name}_out_of_cut"] = values[cut + 1] - at if cut + 1 < length else 0.0
        out[f"{name}_suffix_mean"] = sum(values[cut:]) / (length - cut)
    return out


STAND_IN_NVIDIA_SMI = '#!/usr/bin/env bash\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-stand-in)"\n'
"""An ``nvidia-smi`` that lists one GPU, for the GPU scripts' preflight on a machine without one."""


def stand_in_tools(folder: Path, tools: dict[str, str]) -> Path:
    """``folder`` holding one executable script per name (e.g. nvidia-smi, python), for a PATH
    (or $PYTHON) that a script under test runs instead of the real tools."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, script in tools.items():
        (folder / name).write_text(script)
        (folder / name).chmod(0o755)
    return folder


def load_script(name: str):
    """scripts/NAME.py as a module, to call its ``main(argv)`` in this process (scripts/ importable too)."""
    if str(PROJECT_ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(PROJECT_ROOT / "scripts"))  # call_cost imports benchmark
    spec = importlib.util.spec_from_file_location(f"script_{name}", PROJECT_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_error_line(err: str) -> str:
    """``err`` after checking it is one ``error:`` line and no traceback (the scripts' bad-input contract)."""
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("error: "), err
    return err


def call_script(module, *argv) -> int:
    """A script's exit status, whether it returns it or exits with it (argparse, presto.cli.fail)."""
    try:
        return module.main([str(a) for a in argv])
    except SystemExit as exit_:
        return exit_.code


def gpqa_rows(n: int, **extra: str) -> list[dict]:
    """``n`` GPQA rows in the dataset's own columns (a local fixture: no hub), ``extra`` columns added."""
    return [
        {
            "Question": f"Question {k}?",
            "Correct Answer": f"right {k}",
            "Incorrect Answer 1": f"wrong1 {k}",
            "Incorrect Answer 2": f"wrong2 {k}",
            "Incorrect Answer 3": f"wrong3 {k}",
            "Record ID": f"rec{k}",
            **extra,
        }
        for k in range(n)
    ]


def chi_square_p(samples, law: dict) -> float:
    """p-value of a chi-square goodness-of-fit test of ``samples`` against ``law`` (tiny cells merged)."""
    counts = {s: 0 for s in law}
    for seq in samples:
        counts[seq] += 1  # a KeyError here is an answer outside the support
    expected = np.array([law[s] * len(samples) for s in law])
    observed = np.array([counts[s] for s in law])
    small = expected < 5
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)

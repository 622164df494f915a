"""scripts/retrain_predictor.sh on its own: arguments, exit statuses, and what it leaves beside PATH.

The training job is replaced by a stand-in (the script runs $PYTHON), so these tests check
the script's logic in milliseconds; tests/test_predictor.py runs the real job through it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, stand_in_tools

RETRAIN = PROJECT_ROOT / "scripts" / "retrain_predictor.sh"

# Answers the script's path helper with the real interpreter; as the training job, records its
# arguments and exits with $FAKE_STATUS, after writing metrics.json when $FAKE_METRICS is set.
FAKE_PYTHON = """#!/usr/bin/env bash
if [[ "$1" == -c ]]; then exec "$REAL_PYTHON" "$@"; fi
printf '%s\\n' "$@" > "$FAKE_ARGS"
for arg in "$@"; do
    case "$arg" in hydra.run.dir=*) dir="${arg#hydra.run.dir=}"; dir="${dir//\\"/}" ;; esac
done
if [[ -n "${FAKE_METRICS:-}" ]]; then mkdir -p "$dir" && printf '%s' "$FAKE_METRICS" > "$dir/metrics.json"; fi
exit "${FAKE_STATUS:-0}"
"""


@pytest.fixture
def retrain(tmp_path):
    fake = stand_in_tools(tmp_path, {"fake_python": FAKE_PYTHON}) / "fake_python"
    args_file = tmp_path / "args.txt"

    def run(*args: str, status: int = 0, metrics: str | None = None):
        env = {**os.environ, "PYTHON": str(fake), "REAL_PYTHON": sys.executable, "FAKE_ARGS": str(args_file)}
        env["FAKE_STATUS"] = str(status)
        if metrics is not None:
            env["FAKE_METRICS"] = metrics
        done = subprocess.run(
            ["bash", str(RETRAIN), *args], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
        )
        passed = args_file.read_text().splitlines() if args_file.exists() else None
        return done, passed

    return run


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "trees.jsonl").write_text("")
    return run


def test_a_rejected_model_leaves_the_installed_metrics_alone(retrain, run_dir, tmp_path):
    out = tmp_path / "p.ckpt"
    out.write_text("the installed model")
    Path(f"{out}.metrics.json").write_text("the installed model's metrics")
    done, _ = retrain(str(run_dir), "--out", str(out), "--workdir", str(tmp_path / "w"), status=3, metrics="{}")
    assert done.returncode == 3 and f"kept the previous checkpoint at {out}:" in done.stderr
    assert Path(f"{out}.metrics.json").read_text() == "the installed model's metrics"
    assert out.read_text() == "the installed model"


def test_a_rejected_first_model_does_not_claim_to_keep_a_previous_one(retrain, run_dir, tmp_path):
    out = tmp_path / "p.ckpt"
    done, _ = retrain(str(run_dir), "--out", str(out), "--workdir", str(tmp_path / "w"), status=3, metrics="{}")
    assert done.returncode == 3 and "kept the previous" not in done.stderr
    assert f"no checkpoint was installed at {out} (there was none before)" in done.stderr
    assert "--force to install anyway" in done.stderr and not out.exists()


def test_help_explains_the_improvement_gate_and_force(retrain):
    done, passed = retrain("--help")
    assert done.returncode == 0 and passed is None
    assert "Improvement gate" in done.stdout and "exits with status 3" in done.stdout
    assert "--force         install the new checkpoint even when it does not pass the gate" in done.stdout


def test_a_failed_job_in_a_reused_workdir_installs_no_stale_metrics(retrain, run_dir, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "metrics.json").write_text(json.dumps({"checkpoint": "an earlier job's"}))
    out = tmp_path / "B.ckpt"
    done, _ = retrain(str(run_dir), "--out", str(out), "--workdir", str(work), status=1)
    assert done.returncode == 1
    assert not Path(f"{out}.metrics.json").exists() and not out.exists()


def test_a_run_directory_with_an_equals_sign_is_a_run(retrain, tmp_path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweep_job = tmp_path / "sweep" / "budget.n_pf=8"
    sweep_job.mkdir(parents=True)
    done, passed = retrain(str(sweep_job), "--out", str(tmp_path / "p.ckpt"), "folds=3")
    assert done.returncode == 0, done.stderr
    runs = [a for a in passed if a.startswith("runs=")]
    assert len(runs) == 1 and "folds=3" in passed and str(sweep_job) not in passed
    (parsed,) = OverridesParser.create().parse_overrides(runs)
    assert parsed.value() == [str(sweep_job)]  # Hydra reads the quoted path as one run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["RUN", "--out"], "error: --out needs a value"),
        (["RUN", "--out", "--force"], "error: --out needs a value"),
        (["RUN", "--out", "p.ckpt", "--workdir"], "error: --workdir needs a value"),
        (["--out", "p.ckpt"], "error: give at least one RUN_DIR"),
        (["RUN", "--bogus"], "error: unknown option --bogus"),
        (["no_such_dir", "--out", "p.ckpt"], "error: no such run directory: no_such_dir"),
    ],
)
def test_usage_errors_are_one_line(retrain, run_dir, args, message):
    done, passed = retrain(*(str(run_dir) if a == "RUN" else a for a in args))
    assert done.returncode == 2 and passed is None  # refused before any training starts
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr

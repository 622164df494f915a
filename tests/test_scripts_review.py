"""Scripts run from an unrelated working directory: user paths resolve there, failures propagate.

scripts/gpu_check.sh needs a GPU and vLLM; here nvidia-smi and the interpreter are stand-ins
that record each call (its working directory and arguments), so the script's own logic runs
in milliseconds on any machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

GPU_CHECK = PROJECT_ROOT / "scripts" / "gpu_check.sh"
TOY_TABLE = PROJECT_ROOT / "scripts" / "toy_table.py"

FAKE_NVIDIA_SMI = '#!/usr/bin/env bash\necho "GPU 0: stand-in"\n'
# Records "cwd<TAB>args" per call; pytest and benchmark.py exit with $FAKE_PYTEST / $FAKE_BENCH.
FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\t%s\\n' "$PWD" "$*" >> "$FAKE_CALLS"
if [[ "$1" == -m && "$2" == pytest ]]; then exit "${FAKE_PYTEST:-0}"; fi
if [[ "$1" == *benchmark.py ]]; then exit "${FAKE_BENCH:-0}"; fi
exit 0
"""


@pytest.fixture
def gpu_check(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "python").write_text(FAKE_PYTHON)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    calls = tmp_path / "calls.txt"
    cwd = tmp_path / "caller dir"  # a space: every path must be quoted
    cwd.mkdir()

    def run(*args: str, **env_vars: str):
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python")}
        env.update(FAKE_CALLS=str(calls), DTYPES="float32", **env_vars)
        done = subprocess.run(["bash", str(GPU_CHECK), *args], capture_output=True, text=True, cwd=cwd, env=env)
        lines = calls.read_text().splitlines() if calls.exists() else []
        return done, [tuple(line.split("\t", 1)) for line in lines], cwd

    return run


def test_gpu_check_resolves_relative_paths_against_the_callers_directory(gpu_check):
    done, calls, cwd = gpu_check("dataset.path=data.jsonl", OUT="report dir", MODEL_PATH="models/m")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (cwd / "report dir" / "gpu_check.txt").is_file()  # not <repo>/report dir
    assert not (PROJECT_ROOT / "report dir").exists()
    bench = [(where, args) for where, args in calls if "benchmark.py" in args]
    cost = [(where, args) for where, args in calls if "call_cost.py" in args]
    assert bench and cost
    for where, args in bench + cost:
        # model.path, dataset.path and --out are read where the user wrote them
        assert Path(where) == cwd and "model.path=models/m" in args and "dataset.path=data.jsonl" in args, args
    (pytest_call,) = [where for where, args in calls if args.startswith("-m pytest")]
    assert Path(pytest_call) == PROJECT_ROOT  # the test paths are the repository's


@pytest.mark.parametrize("failing", ["FAKE_PYTEST", "FAKE_BENCH"])
def test_gpu_check_fails_when_a_step_fails(gpu_check, tmp_path, failing):
    done, calls, _ = gpu_check(OUT=str(tmp_path / "out"), **{failing: "1"})
    assert done.returncode == 1
    assert any("call_cost.py" in args for _, args in calls)  # the later steps still ran


def test_toy_table_unwritable_output_is_one_line(tmp_path):
    out = tmp_path / "table.json"
    out.symlink_to(tmp_path / "no such folder" / "table.json")  # a dangling link: writing it fails
    done = subprocess.run([sys.executable, str(TOY_TABLE), str(out)], capture_output=True, text=True, cwd="/")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr

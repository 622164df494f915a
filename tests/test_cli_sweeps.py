"""Sweeps on a process-based launcher (joblib): where their jobs write and how SIGTERM ends them; and
Hydra's mode options given together."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from presto.cli import _handles
from tests.conftest import MAIN, PROJECT_ROOT, run_cli, toy_args, toy_overrides


def default_dir(mode: str, root) -> str:
    """conf/config.yaml's default ``hydra.<mode>.dir``, unresolved, with its ``${project_root:}`` moved to
    ``root`` (the tests must not write into the project's outputs/): the same ``${now:}``/``${pid:}`` name."""
    raw = OmegaConf.to_container(OmegaConf.load(PROJECT_ROOT / "conf" / "config.yaml"), resolve=False)
    template = raw["hydra"][mode]["dir"]
    assert template.startswith("${project_root:}/") and "${pid:}" in template, template
    return template.replace("${project_root:}", str(root))


def announced_sweep_dir(stdout: str) -> str:
    """The sweep directory the launcher logs before its jobs start."""
    found = re.findall(r"sweep output dir : (\S+)", stdout)
    assert len(found) == 1, stdout
    return found[0]


def test_the_jobs_of_a_joblib_sweep_write_under_the_announced_default_directory(toy_table, tmp_path):
    # Was: each loky worker resolved ${pid:} with its own pid, so job 0 wrote to <time>-<worker A>/0 and job 1
    # to <time>-<worker B>/1, neither under the <time>-<launcher pid> directory the launcher announced.
    root = tmp_path / "root"
    sweep_dir = f"hydra.sweep.dir={default_dir('sweep', root)}"
    args = toy_args(toy_table, tmp_path / "unused", sweep_dir, "launcher=joblib", "budget.n_pf=1,2")
    result = run_cli("-m", *args, "run.progress=false")
    assert result.returncode == 0, result.stderr
    announced = announced_sweep_dir(result.stdout)
    assert [str(p) for p in (root / "outputs" / "multirun").iterdir()] == [announced]
    for job, n_pf in enumerate((1, 2)):
        assert json.loads((Path(announced) / str(job) / "summary.json").read_text())["n_pf"] == n_pf


def test_single_runs_started_together_get_their_own_default_directories(toy_table, tmp_path):
    # The pid in the default name is cached per config, not per machine: two runs in the same second still differ.
    root = tmp_path / "root"
    run_dir = f"hydra.run.dir={default_dir('run', root)}"
    runs = [
        subprocess.Popen(
            [sys.executable, str(MAIN), *toy_overrides(toy_table), run_dir],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        for _ in range(2)
    ]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    dirs = list((root / "outputs" / "runs").iterdir())
    assert len(dirs) == 2 and all((d / "summary.json").is_file() for d in dirs), dirs


def child_pids(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            children.add(int(stat.parent.name))
    return children


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def sigterm_a_sweep(toy_table, tmp_path, n_jobs: int, budgets: str, send) -> tuple[int, str, Path]:
    """Start a joblib sweep of long toy jobs, ``send(launcher, workers)`` its SIGTERM once jobs 0 and 1 have
    each finished a chain (their runs' SIGTERM handling is in place since they started), wait for the
    launcher and its workers to end; returns the launcher's status, its stderr and the sweep directory."""
    sweep_dir = tmp_path / "sweep"
    # Chains of about a second, 100 of them per job: minutes unless the SIGTERM ends them.
    setting = [o for o in toy_overrides(toy_table, steps=300) if not o.startswith("run.chains_per_prompt")]
    options = ("launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}", f"budget.n_pf={budgets}", "run.progress=false")
    args = (*setting, "run.chains_per_prompt=50", f"hydra.sweep.dir={sweep_dir}", *options)
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:  # a file, not a pipe: orphaned workers would hold a pipe open
        launcher = subprocess.Popen(
            [sys.executable, str(MAIN), "-m", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd="/",
            start_new_session=True,  # to clean up whatever it leaves behind
        )
    try:
        finished = [sweep_dir / str(job) / "chains.jsonl" for job in (0, 1)]
        wait_for(lambda: all(path.is_file() and path.stat().st_size for path in finished), 120, "both jobs")
        workers = child_pids(launcher.pid)
        send(launcher, workers)
        launcher.wait(timeout=60)
        wait_for(lambda: not any(alive(pid) for pid in workers), 30, "the launcher's workers to end")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
    return launcher.returncode, log.read_text(), sweep_dir


@pytest.mark.parametrize(
    ("n_jobs", "budgets"),
    [
        (2, "4,8"),  # each worker runs a job
        (3, "4,8"),  # one worker idle: it must not die of the SIGTERM (loky would then kill the busy ones)
        (2, "4,8,12"),  # job 2 waits for a worker: it must not start once the sweep is terminated
    ],
)
def test_sigterm_to_a_joblib_sweep_ends_its_jobs_after_their_summaries(toy_table, tmp_path, n_jobs, budgets):
    # Was: only the launcher died (rc 143, no message); its loky workers ran on, orphaned, to the end.
    returncode, err, sweep_dir = sigterm_a_sweep(
        toy_table, tmp_path, n_jobs, budgets, lambda launcher, workers: launcher.send_signal(signal.SIGTERM)
    )
    assert returncode == 143, err
    assert "Traceback" not in err, err
    for job in (0, 1):
        summary = json.loads((sweep_dir / str(job) / "summary.json").read_text())
        assert summary["complete"] is False, summary
        assert f"terminated: finished chains are in {sweep_dir / str(job) / 'chains.jsonl'}" in err, err
    assert not (sweep_dir / "2" / "chains.jsonl").exists(), "no job may start after the SIGTERM"
    assert err.rstrip("\n").splitlines()[-1] == (
        f"terminated: the sweep in {sweep_dir} stopped, its running jobs after writing their summaries; "
        f"rerun with the same overrides and -m run.resume=true hydra.sweep.dir={sweep_dir}"
    ), err


@pytest.mark.parametrize("target", ["one worker", "process group"])
def test_a_sigterm_to_one_job_or_to_the_whole_group_ends_the_sweep_after_the_summaries(toy_table, tmp_path, target):
    """Second review: a SIGTERM to one worker's job returned it quietly and the sweep ended with status 0
    (the worker skipping its queued jobs); a SIGTERM to the process group (Slurm's time limit on an sbatch
    script, timeout) reached each job twice, directly and forwarded, and the second could cut its summary."""

    def send(launcher, workers):
        if target == "one worker":
            os.kill(next(pid for pid in sorted(workers) if _handles(pid, signal.SIGTERM)), signal.SIGTERM)
        else:
            os.killpg(launcher.pid, signal.SIGTERM)

    returncode, err, sweep_dir = sigterm_a_sweep(toy_table, tmp_path, 2, "4,8,12", send)
    assert returncode == 143, err
    assert "Traceback" not in err, err
    for job in (0, 1):
        summary = json.loads((sweep_dir / str(job) / "summary.json").read_text())
        assert summary["complete"] is False and summary["chains"] >= 1, summary
    assert not (sweep_dir / "2" / "chains.jsonl").exists(), "no job may start after the SIGTERM"
    assert err.rstrip("\n").splitlines()[-1].startswith(f"terminated: the sweep in {sweep_dir} stopped"), err


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (("-m", "budget.n_pf=8,12", "--cfg", "job"), "-m and --cfg"),
        (("--info", "-m"), "--info and -m"),
        (("-r", "--cfg", "job"), "-r and --cfg"),
    ],
)
def test_hydra_modes_given_together_are_one_line(toy_table, tmp_path, options, named):
    # Was: a traceback ending in Hydra's ValueError "Only one of --run, --multirun, --cfg, --info and
    # --shell_completion can be specified".
    result = run_cli(*toy_args(toy_table, tmp_path / "run"), *options)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {named} cannot be given together: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_hydra_modes_given_together_to_train_predictor_are_one_line(tmp_path):
    train = PROJECT_ROOT / "src" / "train_predictor.py"
    args = [f"runs=[{tmp_path}]", "-m", "seed=0,1", "--cfg", "job"]
    result = subprocess.run([sys.executable, str(train), *args], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("error: -m and --cfg cannot be given together"), (
        result.stderr
    )


SWALLOWED = """
import os, signal, sys, time, weakref
sys.path.insert(0, sys.argv[1])
from presto.cli import terminate_like_interrupt

terminate_like_interrupt()


class Thing:
    pass


def collected(ref):  # the SIGTERM comes as Python runs a weakref callback (as the import system's do)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # its handler runs here: Python prints its KeyboardInterrupt and drops it
        pass


thing = Thing()
ref = weakref.ref(thing, collected)
try:
    del thing
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pass
    print("ran on")
except KeyboardInterrupt as interrupt:
    print("stopped", *interrupt.args)
"""


def test_a_sigterm_whose_interrupt_python_drops_is_delivered_again(tmp_path):
    # Was: a SIGTERM that came as a job's first chain imported numpy.random (the import system's weakref
    # callback) only printed "Exception ignored in ..."; the job ran on, and its sweep's launcher waited for it.
    script = tmp_path / "swallowed.py"
    script.write_text(SWALLOWED)
    result = subprocess.run(
        [sys.executable, str(script), str(PROJECT_ROOT / "src")], capture_output=True, text=True, timeout=60
    )
    assert result.stdout == "stopped SIGTERM\n", (result.stdout, result.stderr)
    assert "Exception ignored" not in result.stderr, result.stderr

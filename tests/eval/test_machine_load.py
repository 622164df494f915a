"""presto.eval.machine_load: the CPU other processes took while something was timed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from presto.engines.threads import usable_cores
from presto.eval.machine_load import (
    BUSY_OTHERS_CORES,
    FLAG_MIN_WALL_S,
    CpuSnapshot,
    as_cores,
    busy_cpu_s,
    busy_warning,
    cpu_snapshot,
    is_busy,
    others_cpu_s,
    per_cpu_ids_are_positions,
    window_s,
)
from tests.conftest import PROJECT_ROOT


def others_cores(start: CpuSnapshot, end: CpuSnapshot) -> float:
    return as_cores(others_cpu_s(start, end), window_s(start, end))


SPIN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def test_others_are_the_machines_busy_time_less_this_process_trees_per_wall_second():
    start = CpuSnapshot(wall_s=10.0, machine_busy_s=100.0, own_s=5.0)
    assert others_cpu_s(start, CpuSnapshot(12.0, 104.0, 6.0)) == 3.0
    assert others_cores(start, CpuSnapshot(12.0, 104.0, 6.0)) == 1.5  # (4 - 1) CPU seconds in 2 s
    assert others_cores(start, CpuSnapshot(12.0, 101.0, 6.0)) == 0.0  # all of it ours
    # Counters read a tick apart can make ours exceed the machine's: never a negative load.
    assert others_cores(start, CpuSnapshot(12.0, 100.5, 6.0)) == 0.0
    assert others_cores(start, start) == 0.0  # no time passed


def test_the_warning_names_the_load_only_above_the_threshold_over_a_long_enough_window():
    assert busy_warning(BUSY_OTHERS_CORES / 2 * 10.0, 10.0, "the benchmark") is None
    line = busy_warning(12.5, 10.0, "the benchmark")
    assert line.startswith("warning: other processes kept 1.25 of the ") and "the benchmark" in line
    assert f" {usable_cores()} CPUs this job may use busy" in line
    # A window of a few counter ticks says nothing: 2 ticks of 10 ms in 50 ms would read 0.40 CPUs.
    assert not is_busy(0.02, 0.05) and busy_warning(0.02, 0.05, "these calls") is None
    assert is_busy(0.4 * FLAG_MIN_WALL_S, FLAG_MIN_WALL_S)


def _spin_for_cpu(seconds: float, *, detached: bool) -> None:
    """A process that burns ``seconds`` of CPU: our child (waited for), or an orphan that is not."""
    code = SPIN.format(seconds=seconds)
    if detached:  # the shell exits at once: the spinner is reparented away from this process tree
        subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" >/dev/null 2>&1 &', code], check=True)
    else:
        subprocess.run([sys.executable, "-c", code], check=True)


def test_a_child_process_counts_as_ours_and_an_unrelated_one_as_others():
    start = cpu_snapshot()
    _spin_for_cpu(1.0, detached=False)
    end = cpu_snapshot()
    assert end.own_s - start.own_s >= 0.9  # the waited-for child's CPU is ours
    assert end.machine_busy_s - start.machine_busy_s >= 0.9  # and the machine saw it
    start = cpu_snapshot()
    _spin_for_cpu(1.5, detached=True)
    time.sleep(1.0)  # idle here, while the orphan spins
    end = cpu_snapshot()
    assert end.own_s - start.own_s < 0.3
    assert others_cores(start, end) >= 0.5, (start, end)


@pytest.mark.parametrize("field", ["wall_s", "machine_busy_s", "own_s"])
def test_snapshots_move_forward(field):
    start = cpu_snapshot()
    sum(i * i for i in range(300_000))  # some CPU of our own
    end = cpu_snapshot()
    assert getattr(end, field) >= getattr(start, field)


def _times(busy: float, idle: float = 100.0):
    return psutil_like(user=busy / 2, system=busy / 2, idle=idle)


def psutil_like(**fields):
    from types import SimpleNamespace

    return SimpleNamespace(**fields)


def test_only_the_cpus_this_job_may_use_count_when_their_ids_are_the_lists_positions():
    per_cpu = [_times(1.0), _times(10.0), _times(100.0), _times(1000.0)]
    assert busy_cpu_s(per_cpu, [0, 2], positions_are_ids=True) == 101.0
    assert busy_cpu_s(per_cpu, [3], positions_are_ids=True) == 1000.0
    # Unknown or unplaceable CPUs: all of them count (too high at worst, never a busy core hidden).
    assert busy_cpu_s(per_cpu, None, positions_are_ids=True) == 1111.0
    assert busy_cpu_s(per_cpu, [], positions_are_ids=True) == 1111.0
    assert busy_cpu_s(per_cpu, [0, 2], positions_are_ids=False) == 1111.0
    assert busy_cpu_s(per_cpu, [1, 4], positions_are_ids=True) == 1111.0  # CPU 4 is not in the list
    # Idle and iowait are not work; steal is (a virtual machine's host took the core).
    assert busy_cpu_s([psutil_like(user=1.0, steal=2.0, idle=50.0, iowait=7.0)], [0], positions_are_ids=True) == 3.0


@pytest.mark.parametrize(
    ("listed", "count", "expected"),
    [
        ("0-1\n", 2, True),
        ("0\n", 1, True),
        ("0-15", 16, True),
        ("0-3,5-7", 7, False),
        ("0-3", 8, False),
        ("", 1, False),
    ],
)
def test_per_cpu_positions_are_ids_only_when_the_online_cpus_are_0_to_n_minus_1(tmp_path, listed, count, expected):
    online = tmp_path / "online"
    online.write_text(listed)
    assert per_cpu_ids_are_positions(count, str(online)) is expected


def test_without_the_online_list_positions_are_not_trusted(tmp_path):
    assert per_cpu_ids_are_positions(2, str(tmp_path / "missing")) is False


SRC = PROJECT_ROOT / "src"
PINNED_SPIN = "import os\nos.sched_setaffinity(0, {{{cpu}}})\n" + SPIN


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin to"
)
def test_a_process_on_a_cpu_this_job_may_not_use_is_not_counted():
    ours, theirs = sorted(os.sched_getaffinity(0))[:2]
    # A job confined to one CPU watches a spinner pinned to another: the spinner's CPU shows in
    # the machine-wide sum over the same window, not in the job's own figure.
    watcher = f"""
import os, subprocess, sys, time, psutil
from presto.eval.machine_load import cpu_snapshot
os.sched_setaffinity(0, {{{ours}}})
start, start_all = cpu_snapshot(), psutil.cpu_times()
subprocess.Popen([sys.executable, "-c", {PINNED_SPIN.format(cpu=theirs, seconds=1.0)!r}]).wait()
end, end_all = cpu_snapshot(), psutil.cpu_times()
busy = lambda t: t.user + t.nice + t.system + t.irq + t.softirq + t.steal
print((end.machine_busy_s - start.machine_busy_s), busy(end_all) - busy(start_all))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", watcher], capture_output=True, text=True, check=True, env=env)
    counted, everything = map(float, result.stdout.split())
    assert everything - counted >= 0.7, (counted, everything)  # the spinner's second, on the other CPU

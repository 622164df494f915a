"""presto.eval.machine_load: the CPU other processes took while something was timed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from presto.eval.machine_load import (
    BUSY_OTHERS_CORES,
    FLAG_MIN_WALL_S,
    CpuSnapshot,
    as_cores,
    busy_warning,
    cpu_snapshot,
    is_busy,
    others_cpu_s,
    window_s,
)


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
    assert line.startswith("warning: other processes kept 1.25 of this machine's") and "the benchmark" in line
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

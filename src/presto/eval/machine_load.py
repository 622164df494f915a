"""How much CPU other work took while something was timed.

Timings from a shared CPU are not an idle machine's, and not by the share the other work
takes: vLLM's CPU backend binds one OpenMP thread per core and its threads wait for each
other at every layer, so one other busy process on those cores stalls them all (on the
2-core development machine, another process keeping about one CPU busy made the
quickstart's calls about 14 times slower). The benchmark therefore records, per chain, the
CPU that processes outside its own process tree used meanwhile, in cores (CPU seconds per
wall second), steal time of a virtual machine included. A side-by-side ratio is comparable
with an idle machine's when that figure is near zero for every setting it compares.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

BUSY_OTHERS_CORES = 0.25
"""Average CPUs taken by other processes above which a timing is flagged as made on a busy machine."""

FLAG_MIN_WALL_S = 1.0
"""Shortest window whose own figure is worth a flag: below it the 10 ms ticks of the counters dominate."""


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    machine_busy_s: float  # every CPU's non-idle time since boot, steal included
    own_s: float  # this process and its live descendants (and the children they reaped)


def cpu_snapshot() -> CpuSnapshot:
    import psutil

    times = psutil.cpu_times()
    # Linux counts guest time inside user time already; idle and iowait are not work.
    busy = sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))
    me = psutil.Process()
    own = _tree_cpu_s(me)
    for child in me.children(recursive=True):
        # Gone between the listing and the read: its parent collects its time.
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            own += _tree_cpu_s(child)
    return CpuSnapshot(time.perf_counter(), busy, own)


def _tree_cpu_s(process) -> float:
    t = process.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def others_cpu_s(start: CpuSnapshot, end: CpuSnapshot) -> float:
    """CPU seconds other processes used between two snapshots. The kernel counts CPU time in ticks
    (10 ms), so over a short window this is noisy and may even be negative: sum it over windows."""
    return (end.machine_busy_s - start.machine_busy_s) - (end.own_s - start.own_s)


def as_cores(cpu_s: float, wall_s: float) -> float:
    """Average CPUs kept busy: CPU seconds per wall second, within [0, the machine's CPUs]."""
    if wall_s <= 0:
        return 0.0
    return min(max(0.0, cpu_s / wall_s), float(os.cpu_count() or 1))


def window_s(start: CpuSnapshot, end: CpuSnapshot) -> float:
    return end.wall_s - start.wall_s


def is_busy(cpu_s: float, wall_s: float) -> bool:
    """Other processes' ``cpu_s`` over a window of ``wall_s`` seconds (sums of windows allowed) mark
    a busy machine: BUSY_OTHERS_CORES or more, over a window long enough to tell."""
    return wall_s >= FLAG_MIN_WALL_S and as_cores(cpu_s, wall_s) >= BUSY_OTHERS_CORES


def busy_warning(cpu_s: float, wall_s: float, what: str) -> str | None:
    """One line when :func:`is_busy`, else None."""
    if not is_busy(cpu_s, wall_s):
        return None
    return (
        f"warning: other processes kept {as_cores(cpu_s, wall_s):.2f} of this machine's {os.cpu_count()} CPUs busy "
        f"during {what}; its timings are not an idle machine's (rerun it alone for figures to compare)"
    )

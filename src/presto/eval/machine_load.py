"""How much CPU other work took while something was timed.

Timings from a shared CPU are not an idle machine's, and not by the share the other work
takes: vLLM's CPU backend binds one OpenMP thread per core and its threads wait for each
other at every layer, so one other busy process on those cores stalls them all (on the
2-core development machine, another process keeping about one CPU busy made the
quickstart's calls about 14 times slower). The benchmark therefore records, per chain, the
CPU that processes outside its own process tree used meanwhile, in cores (CPU seconds per
wall second), steal time of a virtual machine included. A side-by-side ratio is comparable
with an idle machine's when that figure is near zero for every setting it compares.

Only the CPUs this process may run on count (its affinity mask, which a cpuset container, a
Slurm allocation or ``taskset`` narrows): other jobs on the host's other cores do not slow it.
Limits: a container limited by a CPU quota rather than a cpuset still sees the whole host's
cores; on macOS and Windows psutil reports reaped children's CPU time as 0.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from presto.engines.threads import usable_cores

BUSY_OTHERS_CORES = 0.25
"""Average CPUs taken by other processes above which a timing is flagged as made on a busy machine."""

FLAG_MIN_WALL_S = 1.0
"""Shortest window whose own figure is worth a flag: below it the 10 ms ticks of the counters dominate."""


BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")
"""psutil's CPU-time fields that are work: Linux counts guest time inside user time already,
and idle and iowait are not work."""

ONLINE_CPUS = "/sys/devices/system/cpu/online"
"""Linux's list of online CPUs ("0-15", or "0-3,5-7" with CPU 4 offline)."""


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    machine_busy_s: float  # the usable CPUs' non-idle time since boot, steal included
    own_s: float  # this process and its live descendants (and the children they reaped)


def usable_cpu_ids() -> list[int] | None:
    """The CPUs this process may run on, or None where the platform cannot say (all of them)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def per_cpu_ids_are_positions(count: int, online_path: str = ONLINE_CPUS) -> bool:
    """Whether psutil's i-th per-CPU entry is CPU i: it lists the online CPUs in order, so only
    when they are exactly 0 .. count - 1 (no offline CPU in between)."""
    try:
        with open(online_path) as online:
            listed = online.read().strip()
    except OSError:
        return False
    return listed == ("0" if count == 1 else f"0-{count - 1}")


def busy_cpu_s(per_cpu: list, usable: list[int] | None, positions_are_ids: bool) -> float:
    """Non-idle CPU seconds of the ``usable`` CPUs among psutil's per-CPU times.

    Every CPU counts when the usable ones are unknown or cannot be told apart in that list
    (``positions_are_ids`` false): a figure too high at worst, never one that hides a busy core of ours.
    """
    fits = positions_are_ids and bool(usable) and max(usable) < len(per_cpu)
    chosen = [per_cpu[i] for i in usable] if fits else per_cpu
    return sum(getattr(times, name, 0.0) for times in chosen for name in BUSY_FIELDS)


def cpu_snapshot() -> CpuSnapshot:
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    busy = busy_cpu_s(per_cpu, usable_cpu_ids(), per_cpu_ids_are_positions(len(per_cpu)))
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
    """Average CPUs kept busy: CPU seconds per wall second, within [0, the CPUs this job may use]."""
    if wall_s <= 0:
        return 0.0
    return min(max(0.0, cpu_s / wall_s), float(usable_cores()))


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
        f"warning: other processes kept {as_cores(cpu_s, wall_s):.2f} of the {usable_cores()} CPUs this job may use "
        f"busy during {what}; its timings are not an idle machine's (rerun it alone for figures to compare)"
    )

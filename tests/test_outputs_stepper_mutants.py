"""Tests that kill the mutants a hand mutation review of three recently changed modules found surviving.

Ids of the review: O = runner/outputs.py (dumps' numpy fast path and its plain fallback, jsonl_lines,
the resume's verbatim copy of trees.jsonl, RunWriter's writes and close), M = eval/machine_load.py,
P = prefetch/presto.py (PrefetchStepper.run_block's per-block DecisionInputs) and samplers/kernel.py's
proposal_prefix (no P mutant survived the existing tests, so none is tested here).
Expected values are written by hand or computed with json.dumps from the plain Python record, not
read from the code under test. The full list, with what killed each mutant and why the survivors
are equivalent, is at the end of the file.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

import presto.eval.machine_load as machine_load
from presto.eval.machine_load import BUSY_OTHERS_CORES, as_cores, busy_cpu_s, busy_warning, cpu_snapshot, is_busy
from presto.runner import outputs
from presto.runner.outputs import RunWriter, dumps, read_jsonl, write_json_atomic, write_lines_atomic

# --- outputs.py: dumps ---------------------------------------------------------------------------


def test_dumps_refuses_what_is_not_json_or_numpy():
    """O25 (the hook writes anything as its str): an object json cannot write is an error, not a
    string that reads back as something else."""
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps({"a": object()})


# --- outputs.py: what reaches the disk -------------------------------------------------------------


@pytest.fixture
def synced_sizes(monkeypatch) -> list[int]:
    """The size of each file os.fsync was given, as the kernel saw it when fsync ran (the real fsync runs;
    directories, synced after a rename, are left out)."""
    import stat

    sizes: list[int] = []
    real = os.fsync

    def spy(fd):
        status = os.fstat(fd)
        if not stat.S_ISDIR(status.st_mode):
            sizes.append(status.st_size)
        return real(fd)

    monkeypatch.setattr(outputs.os, "fsync", spy)
    return sizes


def test_an_atomic_write_is_fsynced_with_all_its_text_written(tmp_path, synced_sizes):
    """O16 (fsync before the buffer is flushed): the fsync must cover the new file's whole text, else a
    power loss after the rename leaves a short summary.json or chains.jsonl."""
    path = tmp_path / "summary.json"
    lines = [f"line {i}\n" for i in range(50)]
    write_lines_atomic(path, lines)
    assert synced_sizes == [len("".join(lines))] and path.read_text() == "".join(lines)


def test_a_json_file_holds_plain_finite_values_only(tmp_path):
    """O24 (summary.json written by json.dumps with the numpy hook but without the plain conversion): a
    non-finite figure (a mean over no chains) is written as null, never as NaN/Infinity, which strict
    JSON readers (jq, JavaScript, W&B) refuse."""
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"mean": float("nan"), "rate": np.float32(0.5), "tail": [np.float64("-inf"), 2]})

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    assert json.loads(path.read_text(), parse_constant=refuse) == {"mean": None, "rate": 0.5, "tail": [None, 2]}


class _Handle:
    """A writer's file handle stand-in: calls ``on_close`` when closed, then closes the real one."""

    def __init__(self, real, on_close):
        self.real, self.on_close = real, on_close

    @property
    def closed(self) -> bool:
        return self.real.closed

    def close(self) -> None:
        try:
            self.on_close()
        finally:
            self.real.close()


def test_the_lock_is_released_only_once_every_record_is_in_the_files(tmp_path):
    """O20 (the lock closed first): another run may take the directory the moment the lock goes, so the
    rounds and chains still buffered must be in the files by then."""
    writer = RunWriter(tmp_path, resume=False)
    writer.append_tree({"prompt_id": "p", "chain": 0, "round": 0})  # buffered: not flushed
    seen: list[list] = []
    writer._lock = _Handle(writer._lock, lambda: seen.append(read_jsonl(tmp_path / "trees.jsonl")))
    writer.close()
    assert seen == [[{"prompt_id": "p", "chain": 0, "round": 0}]]


def test_close_closes_everything_and_raises_the_first_error(tmp_path):
    """O23 (the last error raised): with both files failing to close (a full disk), the chains file's
    error comes out, and every handle, the lock included, is closed."""
    writer = RunWriter(tmp_path, resume=False)
    handles = (writer._chains, writer._trees, writer._lock)

    def fail(name):
        def close():
            raise OSError(f"{name} cannot be flushed")

        return close

    writer._chains = _Handle(writer._chains, fail("chains"))
    writer._trees = _Handle(writer._trees, fail("trees"))
    with pytest.raises(OSError, match="chains cannot be flushed"):
        writer.close()
    assert all(handle.closed for handle in handles)


@pytest.mark.parametrize("chain", ["null", '"x"', "[0]", "0.5"])
def test_a_resume_drops_a_round_whose_chain_is_no_chain_index(tmp_path, chain):
    """A hand-edited (or otherwise damaged) trees.jsonl line that is a JSON object but names no chain, as
    chains.jsonl's lines are checked: the resume goes on with the finished chain's rounds only."""
    (tmp_path / "chains.jsonl").write_text(json.dumps({"prompt_id": "p", "chain": 0}) + "\n")
    kept = json.dumps({"prompt_id": "p", "chain": 0, "round": 0}) + "\n"
    (tmp_path / "trees.jsonl").write_text(kept + '{"prompt_id": "p", "chain": ' + chain + ', "round": 1}\n')
    RunWriter(tmp_path, resume=True).close()
    assert (tmp_path / "trees.jsonl").read_text() == kept


def test_a_resume_that_fails_midway_releases_the_directory_lock(tmp_path, monkeypatch):
    """A resume whose rewrite of the files fails (a full disk) must not leave the directory locked for
    the rest of the process: the exception's traceback keeps the half-built writer alive."""
    (tmp_path / "chains.jsonl").write_text(json.dumps({"prompt_id": "p", "chain": 0}) + "\n")

    def full_disk(path, lines):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs, "write_lines_atomic", full_disk)
    with pytest.raises(OSError, match="No space left") as failure:
        RunWriter(tmp_path, resume=True)
    monkeypatch.undo()
    assert failure.value.__traceback__ is not None  # the half-built writer is still referenced
    RunWriter(tmp_path, resume=True).close()  # no "another run is writing to ..."


def test_a_durable_atomic_write_also_syncs_its_directory(tmp_path, monkeypatch):
    """The rename of a durable write is on disk too (the directory's fsync, after the file's); a
    non-durable write syncs neither."""
    import stat

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(outputs.os, "fsync", recording_fsync)
    write_lines_atomic(tmp_path / "a.jsonl", ["x\n"])
    assert synced == ["file", "dir"] and (tmp_path / "a.jsonl").read_text() == "x\n"
    synced.clear()
    write_lines_atomic(tmp_path / "b.jsonl", ["y\n"], durable=False)
    assert synced == []


# --- machine_load.py ---------------------------------------------------------------------------------


def test_a_load_is_at_most_the_cpus_this_job_may_use(monkeypatch):
    """M2 (no upper clamp): counters read a tick apart can show more CPU than the usable CPUs give."""
    monkeypatch.setattr(machine_load, "usable_cores", lambda: 3)
    assert as_cores(10.0, 2.0) == 3.0
    assert as_cores(5.0, 2.0) == 2.5


def test_a_load_of_exactly_the_threshold_is_busy():
    """M3 (`>= BUSY_OTHERS_CORES` -> `>`): the docstring's 'BUSY_OTHERS_CORES or more'."""
    wall = 4.0  # BUSY_OTHERS_CORES * 4.0 / 4.0 is exact in binary
    assert is_busy(BUSY_OTHERS_CORES * wall, wall)
    assert busy_warning(BUSY_OTHERS_CORES * wall, wall, "x") is not None


@pytest.mark.parametrize(
    ("field", "counts"),
    [
        ("user", True),
        ("nice", True),
        ("system", True),
        ("irq", True),
        ("softirq", True),
        ("steal", True),
        ("idle", False),
        ("iowait", False),
        ("guest", False),  # Linux counts it in user already
        ("guest_nice", False),  # and in nice
    ],
)
def test_each_busy_field_counts_and_idle_ones_do_not(field, counts):
    """M5 (nice dropped), M6 (irq dropped): every non-idle field of psutil's Linux CPU times is work."""
    times = SimpleNamespace(**{field: 2.0})
    assert busy_cpu_s([times], [0], positions_are_ids=True) == (2.0 if counts else 0.0)


class _FakeProcess:
    """psutil.Process's cpu_times and children of one process of a fake tree."""

    def __init__(self, cpu: float, *kids: _FakeProcess) -> None:
        self.cpu, self.kids = cpu, kids

    def cpu_times(self):
        return SimpleNamespace(user=self.cpu, system=0.0, children_user=0.0, children_system=0.0)

    def children(self, recursive: bool = False):
        if not recursive:
            return list(self.kids)
        return [p for kid in self.kids for p in (kid, *kid.children(recursive=True))]


def test_a_grandchilds_cpu_counts_as_ours(monkeypatch):
    """M10 (only direct children): a child's live child (a worker a subprocess forked) is ours too,
    so its CPU must not show as other processes'."""
    import psutil

    tree = _FakeProcess(1.0, _FakeProcess(2.0, _FakeProcess(4.0, _FakeProcess(8.0))), _FakeProcess(16.0))
    monkeypatch.setattr(psutil, "Process", lambda: tree)
    assert cpu_snapshot().own_s == 31.0


# --- Mutants of the review (47: 37 killed by existing tests, 10 by this file, none equivalent) --------------------
# "Existing" means: test_runner_review_fixes, test_mutants_runner, test_long_runs_review, test_review_host_speed_change,
# test_interactions_run_lifecycle, test_tree_logging_review3, eval/test_metrics_review (outputs); eval/test_machine_load
# (machine_load); test_mutants_presto_stepper, test_exactness, test_prefetch_review, test_law, test_mutants_review
# (stepper); named tests of test_cli, test_interactions_host_scale and test_predictive_traversal for a few.
#
# outputs.py (26: 21 existing, 5 new)
#   O1 bool/None keys as str(k): test_review_host_speed_change bool/None keys. O2 non-finite floats kept, O4 numpy
#   scalars not .item()ed, O6 allow_nan dropped on the fast path, O7 fallback on TypeError only:
#   test_runner_review_fixes numpy scalars. O3 arrays' items not made plain, O5 only Python floats checked, O8
#   fallback on ValueError only (numpy key), O9 ensure_ascii=False, O10 sort_keys=True on the fast path:
#   test_runner_review_fixes dumps-equals-plain-conversion. O11 the kept last line without its newline, O14 CRLF kept
#   (newline=""): test_review_host_speed_change odd lines. O12 blank lines warned, O26 a bad line warned at once (a
#   torn last line too): test_long_runs_review line-by-line rules. O13 the noted bad line never cleared:
#   test_tree_logging_review3 damaged middle line. O15 unfinished chains' rounds kept: test_long_runs_review
#   unfinished rounds. O17 the .tmp sibling left after a failure: test_cli atomic write that fails. O18/O19
#   append_chain/flush_trees fsync without flush: test_mutants_runner on disk once written. O21 an appended chain not
#   marked finished: test_long_runs_review hands over earlier chains. O22 a new run appends to an old trees.jsonl:
#   test_cli tree log afresh.
#   O16 write_lines_atomic fsyncs before flushing, O20 the lock closed first, O23 the last close error raised, O24
#   write_json_atomic without the plain conversion (NaN written), O25 the numpy hook writes anything as its str: new.
#
# machine_load.py (12: 7 existing, 5 new)
#   M1 own CPU added, M12 `wall_s < 0` (a zero window divides): others-are-busy-less-ours test. M4 `wall_s >
#   FLAG_MIN_WALL_S`: warning threshold test. M7 empty usable list taken as CPU 0: only-the-usable-CPUs test. M8 one
#   CPU listed as "0-0": online-list test. M9 the affinity mask ignored: pinned-spinner test. M11 children_system
#   dropped: child-process test.
#   M2 no upper clamp, M3 `> BUSY_OTHERS_CORES`, M5 nice not work, M6 irq not work, M10 only direct children: new.
#
# prefetch/presto.py and samplers/kernel.py (9: all existing)
#   P1 the inputs cached by depth (stale after a round), P2 the cache kept across blocks (stale stage), P6 every
#   depth's requests from depth 0's inputs: test_mutants_presto_stepper record test. P3 the cache dropped (inputs
#   drawn again and again): test_interactions_host_scale draws-once test. P4 `start` late-bound in inputs (a
#   predictive rule reads a round's inputs after the next round began): test_predictive_traversal walks followed.
#   P7 proposal_prefix one token long: test_exactness BFS equals sequential. P8 numpy ints in the prefix:
#   test_mutants_review block extensions. P9 the prompt left out: test_prefetch_review discarded requests. P10 one
#   token short: test_law PowerMH law.

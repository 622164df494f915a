"""Run model-written code in a separate, locked-down process and say whether its tests pass.

Layers, each one optional and reported, so that a missing one weakens but never breaks
grading:

- a new session (process group) for the whole tree, killed with ``os.killpg`` at the end;
- ``unshare --user --map-root-user --net --pid --uts --fork --kill-child`` when it works
  here (root falls back to no user namespace): capabilities that hold only inside, no
  network interface but loopback, its own hostname, and a PID namespace in which the
  parent and every other process are invisible and whose processes all die with the judge;
- inside, the judge (:mod:`presto.tasks._judge`) sets RLIMIT_CPU, RLIMIT_AS (the program's
  memory on top of the judge's own), RLIMIT_NPROC and RLIMIT_NOFILE, applies Landlock
  (writes only in the work directory, no TCP, no signals to processes outside), and runs
  each test case in a forked child with its own RLIMIT_CPU and RLIMIT_FSIZE,
  a seccomp filter against new processes and file metadata changes (chmod, chown, utime,
  xattrs: Landlock lets those through) and a ``socket`` module that refuses to work, and
  without the expected outputs, which the judge compares itself; it accepts a case's
  report only with that case's random nonce (a program cannot pass by writing a fake
  report to the inherited pipe and exiting);
- an empty temporary working directory, a stripped environment, and a wall clock.

The limits are set by the judge itself rather than in ``preexec_fn``, because
``preexec_fn`` is unsafe in a threaded parent (graders run in thread pools), and the
judge is trusted code that runs before any untrusted line.

This is a grading sandbox, not a security boundary against a determined attacker; it
keeps accidents and ordinary malicious snippets (fork bombs, memory hogs, writes outside
the work directory, sockets, killing the parent) from harming the machine or the run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_JUDGE = Path(__file__).with_name("_judge.py")
JOB_FILE = ".presto-job.json"  # must match the judge's JOB_FILE


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one graded program; ``timeout_s`` is the wall clock of each test case."""

    timeout_s: float = 10.0
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_processes: int = 64

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb must be >= 64, got {self.memory_mb}")
        if self.file_size_mb < 1:
            raise ValueError(f"file_size_mb must be >= 1, got {self.file_size_mb}")
        if self.max_processes < 1:
            raise ValueError(f"max_processes must be >= 1, got {self.max_processes}")


@dataclass(frozen=True)
class RunResult:
    """How a sandboxed run ended: ``status`` is passed, failed, timeout or error."""

    status: str
    detail: str
    duration_s: float
    protections: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@functools.cache
def namespace_prefix() -> tuple[str, ...]:
    """The ``unshare`` command line that works on this machine, or () if none does.

    Other users need a user namespace to create the network, PID and UTS namespaces. Root
    can do without one, but takes one too where it can: its capabilities then hold only
    inside (a program run as root could otherwise set the host's clock, load kernel modules
    or reboot the machine). Probed once per process by running this interpreter on the
    judge's file: inside a user namespace root may no longer read another user's private
    folders (a venv under a 0750 home, run with sudo), and then the next prefix is taken.
    """
    exe = shutil.which("unshare")
    if exe is None or sys.platform != "linux":
        return ()
    namespaces = ["--net", "--pid", "--uts", "--fork"]  # --uts: a hostname change stays inside
    bases = [[exe, "--user", "--map-root-user", *namespaces]]
    if os.geteuid() == 0:
        bases.append([exe, *namespaces])
    # --kill-child (util-linux >= 2.32) is a nicety: killpg takes the judge down anyway
    candidates = [variant for base in bases for variant in ([*base, "--kill-child"], base)]
    for cmd in candidates:
        try:
            reach = [sys.executable, "-I", "-c", f"open({str(_JUDGE)!r}).close()"]
            probe = subprocess.run([*cmd, *reach], capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return tuple(cmd)
    return ()


def _tasks_of_user(uid: int) -> int:
    """Processes and threads owned by ``uid``: RLIMIT_NPROC counts them all, not just ours."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as fh:
                uid_line = threads = None
                for line in fh:
                    if line.startswith("Uid:"):
                        uid_line = line
                    elif line.startswith("Threads:"):
                        threads = line
                        break
            if uid_line and int(uid_line.split()[1]) == uid and threads:
                count += int(threads.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return count


def _nproc_limit(limits: SandboxLimits) -> int:
    """RLIMIT_NPROC for the child: a margin above what the user already runs (root is exempt)."""
    if os.geteuid() == 0 or not Path("/proc/self/status").exists():
        return limits.max_processes
    return _tasks_of_user(os.getuid()) + limits.max_processes


def _clean_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
    }


def _read_until(proc: subprocess.Popen[bytes], deadline: float, cap: int = 1 << 20) -> tuple[bytes | None, bytes, bool]:
    """Read stdout (up to ``cap``) and the tail of stderr until EOF or ``deadline``.

    Returns (stdout, stderr tail, timed_out); stdout is None if more than ``cap`` bytes
    came, which the judge's small verdict never is. Does not reap the process, so its
    process group id stays reserved until the caller has killed the group.
    """
    assert proc.stdout is not None and proc.stderr is not None
    out, err, overflow = bytearray(), bytearray(), False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        open_streams = 2
        while open_streams:
            left = deadline - time.monotonic()
            if left <= 0:
                return None if overflow else bytes(out), bytes(err), True
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                elif key.fileobj is proc.stdout:
                    overflow = overflow or len(out) + len(chunk) > cap
                    out += chunk[: max(0, cap - len(out))]
                else:
                    err = (err + chunk)[-4096:]
    return None if overflow else bytes(out), bytes(err), False


def _own_dirs(path: str) -> None:
    """Give the owner full rights on ``path`` and every directory below it, top down."""
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IRWXU)
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _own_dirs(entry.path)


def _remove_tree(path: str) -> None:
    """Remove a work directory, including what the program made hard to remove.

    A program can make a directory it may write but not list (``mkdir(d, 0o300)``), which
    a plain rmtree by a user other than root cannot empty; the directories are the
    program's (ours), so their owner may give themselves the rights back.
    """
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        _own_dirs(path)
        shutil.rmtree(path, ignore_errors=True)


def run_sandboxed(job: dict[str, Any], limits: SandboxLimits) -> RunResult:
    """Run one judge job (``kind`` script/stdio/call, ``code``, ``cases``...) under ``limits``.

    ``status`` is "error" only when the sandbox itself could not work (it could not start,
    or the judge failed before running any code): graders report that as "could not be
    graded". Everything the program can cause, including killing the judge, is "failed".
    """
    start = time.monotonic()
    n_children = max(1, len(job.get("cases") or ()))
    wall_s = limits.timeout_s * n_children + 10.0  # backstop; the judge enforces each case
    payload = {
        **job,
        "timeout_s": limits.timeout_s,
        "cpu_s": max(1, math.ceil(limits.timeout_s) + 1),  # each case's child
        # The judge itself reads and compares every case's output (call-mode results can be MBs
        # of JSON): one case's budget for the whole job would fail a correct solution.
        "judge_cpu_s": max(1, math.ceil(limits.timeout_s) + 1) * n_children + 1,
        "memory_bytes": limits.memory_mb * 2**20,
        "fsize_bytes": limits.file_size_mb * 2**20,
        "nproc": _nproc_limit(limits),
    }
    workdir = tempfile.mkdtemp(prefix="presto-sandbox-")
    try:
        os.chmod(workdir, 0o700)
        # a file, not a stdin pipe: a large job (LiveCodeBench's tests) can never block the parent
        with open(os.path.join(workdir, JOB_FILE), "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        # Isolated like -I (no user site, no script directory on sys.path), but without -E:
        # the environment is _clean_env's alone, and its PYTHONHASHSEED must reach the
        # interpreter the programs are forked from, or string hashes (a set's print order)
        # would change from run to run and a program's grade with them
        cmd = [*namespace_prefix(), sys.executable, "-s", "-P", "-B", str(_JUDGE)]
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=_clean_env(workdir),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            return RunResult("error", f"could not start the sandbox: {exc}", time.monotonic() - start)
        try:
            stdout, stderr, timed_out = _read_until(proc, time.monotonic() + wall_s)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        duration = time.monotonic() - start
        if timed_out:
            return RunResult("timeout", f"sandbox wall clock of {wall_s:.0f} s exceeded", duration)
        # A program can find the judge's stdout pipe in /proc and write a verdict into it;
        # the judge then adds its own (two objects: not a verdict) unless the program killed
        # it or padded its forgery past the cap. So only the whole output of a judge that
        # exited by itself counts, and only as one JSON object.
        verdict = None
        if stdout is not None and proc.returncode == 0:
            with contextlib.suppress(ValueError, RecursionError):
                verdict = json.loads(stdout.decode("utf-8", errors="replace"))
        if not isinstance(verdict, dict):
            if proc.returncode is not None and proc.returncode > 0:
                # the judge exits non-zero only if it could not run at all; programs can only kill it
                last = (stderr.decode("utf-8", errors="replace").strip().splitlines() or ["(no message)"])[-1]
                return RunResult("error", f"judge failed (exit status {proc.returncode}): {last}", duration)
            return RunResult("failed", f"judge gave no verdict (exit status {proc.returncode})", duration)
        protections = tuple(verdict.get("protections", ()))
        if namespace_prefix():
            userns = ("userns",) if "--user" in namespace_prefix() else ()
            protections = (*userns, "netns", "pidns", "utsns", *protections)
        return RunResult(str(verdict.get("status")), str(verdict.get("detail", "")), duration, protections)
    finally:
        _remove_tree(workdir)


@functools.cache
def probe_protections() -> tuple[str, ...]:
    """The protections a trivial sandboxed run gets on this machine (probed once).

    Tests use it to skip what this machine cannot enforce; the warning uses it to say
    what the sandbox actually is here.
    """
    result = run_sandboxed({"kind": "script", "code": "pass\n"}, SandboxLimits(timeout_s=10.0))
    return result.protections if result.passed else ()


_warned = False


def warn_code_execution(task: str) -> None:
    """Print, once per process, that model-written code will be executed and how it is confined."""
    global _warned
    if _warned:
        return
    _warned = True
    protections = ", ".join(probe_protections()) or "rlimits only"
    print(
        f"WARNING: {task}: dataset.allow_code_execution=true: model-written code will run on this machine "
        f"in a grading sandbox (rlimits, {protections}; not a security boundary)",
        file=sys.stderr,
        flush=True,
    )

"""Sandbox judge: runs inside the isolated process and executes model-written code.

This file is run as a script (``python -s -P -B _judge.py``, in a clean environment) by
:mod:`presto.tasks.sandbox`, never imported, and uses the standard library only. It reads one JSON job from a file in
its (otherwise empty, temporary) working directory and deletes it, locks itself down
(resource limits, Landlock), then runs each test case in a forked child that also gets
a seccomp filter (no new processes, no changes to file modes, owners, times or extended
attributes) and a ``socket`` module that refuses to work, and prints one JSON verdict on
stdout.

A child is a copy of the judge, so before it runs any untrusted line it drops the
expected outputs from its copy of the job: a program that walks up its interpreter's
frames finds the case's input, never its answer. The judge, not the child, compares a
stdin program's output and a call's result (sent back as JSON) with the answer.

Why a judge process and forked children: the judge is trusted code that stays in
control (it enforces the per-case wall clock and compares outputs), while the untrusted
program never sees the judge's stdout pipe, and forking an already-started interpreter
per test case is far cheaper than starting Python again.

The child reports how its case ended through a pipe it must inherit, so the program can
write to that pipe too (its descriptor is listed in /proc/self/fd). The judge therefore
accepts a report only if it is one JSON object carrying the case's nonce, a fresh random
token, and only from a child that exited normally: a program that writes ``{"ok": true}``
to every descriptor and exits before its tests fails. The child encodes and writes its
report with functions it took before the program ran, so a program that monkeypatches
``json`` or ``os`` does not rewrite it. (Code that deliberately digs the nonce out of its
own interpreter's frames or memory could still forge a report, just as it could subvert
tests that run in its process, e.g. by returning an object equal to everything: no
in-process test harness can prevent that, and this sandbox does not claim to.)
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import numbers
import os
import platform
import resource
import secrets
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable

JOB_FILE = ".presto-job.json"  # written by the parent into the work directory
_STARTED = False  # set once the first untrusted program has been forked

# --------------------------------------------------------------------------- Landlock

_LL_CREATE_RULESET, _LL_ADD_RULE, _LL_RESTRICT_SELF = 444, 445, 446  # same on all architectures
_PR_SET_NO_NEW_PRIVS = 38
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_WRITE_ALL_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write, remove, make*
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def apply_landlock(workdir: str) -> list[str]:
    """Allow writes only under ``workdir`` (and /dev/null); deny TCP; scope signals.

    Landlock is an unprivileged, irrevocable, inherited Linux sandbox. Reads stay allowed
    everywhere (the interpreter and its libraries live all over the file system); what
    it takes away is every way to change a file's contents or a directory's entries
    outside the work directory, to connect or bind a TCP socket (ABI 4+), and to signal a
    process outside the sandbox (ABI 6+). It does not cover a file's mode, owner, times
    or extended attributes: the children's seccomp filter refuses those calls.
    """
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_LL_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return []
    handled_fs = _FS_WRITE_ALL_V1
    if abi >= 2:
        handled_fs |= _FS_REFER
    if abi >= 3:
        handled_fs |= _FS_TRUNCATE
    attr = struct.pack("=Q", handled_fs)
    done = ["landlock-fs"]
    if abi >= 4:
        attr += struct.pack("=Q", _NET_BIND_TCP | _NET_CONNECT_TCP)
        done.append("landlock-net")
    if abi >= 6:
        attr += struct.pack("=Q", _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
        done.append("landlock-signal")
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(_LL_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return []
    try:
        for path, access in ((workdir, handled_fs), ("/dev/null", _FS_WRITE_FILE | (handled_fs & _FS_TRUNCATE))):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
                if libc.syscall(_LL_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0)) != 0:
                    return []
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return []
        if libc.syscall(_LL_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return []
    finally:
        os.close(ruleset)
    return done


# --------------------------------------------------------------------------- seccomp

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# syscall numbers: clone, clone3, and (x86_64 only) fork and vfork
_SYSCALLS = {"x86_64": {"clone": 56, "fork": 57, "vfork": 58, "clone3": 435}, "aarch64": {"clone": 220, "clone3": 435}}
# Calls that change a file's mode, owner, times or extended attributes, which Landlock
# does not restrict (a program could otherwise chmod 000 or, as root, chown any file).
# The filter cannot see paths, so it acts everywhere. A mode or a time change is made a
# no-op that reports success, as ordinary code does them in its own directory (shutil.copy
# copies the mode) and never depends on them: chmod family (incl. fchmodat2 452) and utime
# family. Owners and extended attributes fail with EPERM: chown family and
# setxattr/removexattr family (incl. setxattrat 463, removexattrat 466).
_MODE_TIME_SYSCALLS = {
    "x86_64": (90, 91, 268, 452, 132, 235, 261, 280),
    "aarch64": (52, 53, 452, 88),
}
_OWNER_XATTR_SYSCALLS = {
    "x86_64": (92, 93, 94, 260, 188, 189, 190, 197, 198, 199, 463, 466),
    "aarch64": (54, 55, 5, 6, 7, 14, 15, 16, 463, 466),
}
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EAGAIN, _ENOSYS, _EPERM = 11, 38, 1


def apply_seccomp_no_fork() -> bool:
    """Forbid creating processes (threads stay allowed): a fork bomb fails at its first fork.

    A classic BPF filter: ``fork``/``vfork`` and ``clone`` without ``CLONE_THREAD`` fail
    with EAGAIN; ``clone3`` fails with ENOSYS so that libc falls back to ``clone``, whose
    flags the filter can read. RLIMIT_NPROC cannot do this for root, which it exempts.
    File mode and time changes (:data:`_MODE_TIME_SYSCALLS`) do nothing and report success,
    owner and extended-attribute changes (:data:`_OWNER_XATTR_SYSCALLS`) fail with EPERM, anywhere.
    """
    machine = platform.machine()
    if sys.platform != "linux" or machine not in _AUDIT_ARCH:
        return False
    nrs = _SYSCALLS[machine]

    def stmt(code: int, k: int) -> tuple[int, int, int, int]:
        return (code, 0, 0, k)

    def jump(code: int, k: int, jt: int, jf: int) -> tuple[int, int, int, int]:
        return (code, jt, jf, k)

    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    deny_fork = _RET_ERRNO | _EAGAIN
    prog: list[tuple[int, int, int, int]] = [
        stmt(ld, 4),  # arch
        jump(jeq, _AUDIT_ARCH[machine], 1, 0),
        stmt(ret, _RET_ERRNO | _EPERM),  # any other ABI (e.g. int 0x80): refuse everything
        stmt(ld, 0),  # syscall number
    ]
    if machine == "x86_64":
        prog += [jump(jset, 0x40000000, 0, 1), stmt(ret, _RET_ERRNO | _EPERM)]  # x32 ABI
        prog += [jump(jeq, nrs["fork"], 0, 1), stmt(ret, deny_fork)]
        prog += [jump(jeq, nrs["vfork"], 0, 1), stmt(ret, deny_fork)]
    for nr in _MODE_TIME_SYSCALLS[machine]:
        prog += [jump(jeq, nr, 0, 1), stmt(ret, _RET_ERRNO | 0)]  # errno 0: the call returns 0, undone
    for nr in _OWNER_XATTR_SYSCALLS[machine]:
        prog += [jump(jeq, nr, 0, 1), stmt(ret, _RET_ERRNO | _EPERM)]
    prog += [
        jump(jeq, nrs["clone3"], 0, 1),
        stmt(ret, _RET_ERRNO | _ENOSYS),
        jump(jeq, nrs["clone"], 0, 3),
        stmt(ld, 16),  # low 32 bits of args[0] (clone flags)
        jump(jset, _CLONE_THREAD, 1, 0),
        stmt(ret, deny_fork),
        stmt(ret, _RET_ALLOW),
    ]
    raw = b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in prog)
    filt = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(filt, ctypes.c_void_p))
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    return libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) == 0


# --------------------------------------------------------------------------- limits

_FORBIDDEN_NET = "network access is disabled in the PreSTO sandbox"


def disable_sockets() -> None:
    """Make every socket constructor raise: a second, portable layer over the network namespace."""
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(_FORBIDDEN_NET)

    class NoSocket(socket.socket):
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise OSError(_FORBIDDEN_NET)

    socket.socket = NoSocket  # type: ignore[misc]
    for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo", "gethostbyname"):
        if hasattr(socket, name):
            setattr(socket, name, refuse)
    try:
        import _socket

        _socket.socket = NoSocket  # type: ignore[misc]
    except ImportError:
        pass


def _address_space_bytes() -> int:
    """This process's virtual memory now (0 where /proc does not say)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def set_limits(job: dict) -> None:
    """Per-process limits, inherited by every child: CPU, memory, processes (file size: the child's).

    ``memory_bytes`` is the program's: the address space limit is set on top of what the
    judge holds once it has read the job (the interpreter and the cases' inputs, which every
    forked child shares), so a job with MBs of inputs does not shrink what its program may use.
    The file size limit is set in each child (:func:`_child`): the judge writes the cases'
    inputs, which may be larger than what a program may write.
    """

    def limit(which: int, value: int) -> None:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            _soft, hard = resource.getrlimit(which)
            if hard == resource.RLIM_INFINITY or value <= hard:
                resource.setrlimit(which, (value, hard))

    limit(resource.RLIMIT_CORE, 0)
    # The judge's budget covers every case it compares; each case's child lowers it to its own.
    limit(resource.RLIMIT_CPU, int(job.get("judge_cpu_s", job["cpu_s"])))
    limit(resource.RLIMIT_AS, int(job["memory_bytes"]) + _address_space_bytes())
    limit(resource.RLIMIT_NPROC, int(job["nproc"]))
    limit(resource.RLIMIT_NOFILE, 256)


# --------------------------------------------------------------------------- running code

_LCB_PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics\n"
    "import itertools, functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
)


def _reopen_std_streams() -> None:
    """Fresh Python stream objects over fds 0-2, after they were redirected in the child."""
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115


def _finish_threads() -> None:
    """Join the program's non-daemon threads, as interpreter shutdown would."""
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:300] + "..."


def _run_program(job: dict, source: str, run_name: str) -> dict:
    """Child side: run ``source`` (written to solution.py) and report how it ended."""
    path = os.path.join(job["workdir"], "solution.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)
    import runpy

    try:
        runpy.run_path(path, run_name=run_name)
        _finish_threads()
    except SystemExit as exc:
        if job["kind"] == "script":
            return {"ok": False, "error": f"program exited (SystemExit: {exc.code}) before the tests finished"}
        if exc.code not in (None, 0):
            return {"ok": False, "error": f"SystemExit: {exc.code}"}
        _finish_threads()
    except BaseException as exc:
        return {"ok": False, "error": _short_error(exc)}
    return {"ok": True}


def _plain(value: object) -> object:
    """JSON for the numbers and arrays numpy-like libraries return (``np.int64(6) == 6``)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Number):  # Decimal too; the round trip check catches what float changed
        return float(value)
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


def _run_call(job: dict, case: dict, result_path: str) -> dict:
    """Child side: one LeetCode-style case, a call of ``Solution().<func_name>(*args)``.

    The result goes to ``result_path`` as JSON, and the judge compares it with the answer,
    which this process never holds. A result whose JSON is not equal to it (a nested
    tuple, an int dict key, NaN) equals no JSON answer either, so it is wrong here.
    """
    namespace: dict = {"__name__": "solution"}
    try:
        exec(compile(_LCB_PRELUDE + job["code"], "solution.py", "exec"), namespace)
        target = namespace["Solution"]() if "Solution" in namespace else None
        func = getattr(target, job["func_name"], None) if target is not None else namespace.get(job["func_name"])
        if func is None:
            return {"ok": False, "error": f"function {job['func_name']!r} not found"}
        args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
        got = func(*args)
        _finish_threads()
        if isinstance(got, tuple):  # as LiveCodeBench does, the top level only
            got = list(got)
        text = json.dumps(got, default=_plain)
        if json.loads(text) != got:
            return {"ok": False, "error": f"wrong answer: got {str(got)[:100]}, not a JSON value"}
        with open(result_path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except BaseException as exc:
        return {"ok": False, "error": _short_error(exc)}
    return {"ok": True}


def _reporter(result_fd: int, nonce: str, seccomp: bool) -> Callable[[bool, str], None]:
    """The child's report writer, made before the program runs.

    It encodes with the C JSON string encoder and writes with ``os.write`` as they were
    then, and hands the nonce to nothing the program could have replaced: a program that
    monkeypatches ``json.dumps`` (or anything else it can reach by import) to say
    ``"ok": true`` cannot turn its failed tests into a pass. ``"ok"`` comes last, after
    the escaped error text, so it is the one that counts.
    """
    write, quote = os.write, json.encoder.encode_basestring_ascii
    head = f'{{"nonce": "{nonce}", "seccomp": {"true" if seccomp else "false"}, '.encode()

    def send(ok: bool, error: str) -> None:
        tail = b'"ok": true}' if ok else b'"error": ' + quote(error[:300]).encode() + b', "ok": false}'
        write(result_fd, head + tail)  # under PIPE_BUF: one atomic write

    return send


def _child(job: dict, case: dict, paths: dict[str, str], result_fd: int, nonce: str, mode: str) -> None:
    """Forked child: redirect fds, lock down, run the untrusted code, report (with the nonce), _exit."""
    # taken now: a program that replaced os._exit would otherwise return from here into the
    # judge's code, as a second judge
    exit_now = os._exit
    try:
        # every case dict (``case`` too) is shared with the job: the program, which can walk up
        # its interpreter's frames to them, finds the inputs but no expected output
        for each in job.get("cases") or ():
            each.pop("output", None)
        cpu_s = int(job["cpu_s"])  # CPU time starts at 0 in a new process: the case's own budget
        fsize = int(job["fsize_bytes"])  # what the program may write (the judge wrote the inputs)
        for which, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_FSIZE, fsize)):
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, (value, value))
        stdin_path, out_path, err_path = paths["stdin"], paths["stdout"], paths["stderr"]
        fd_in = os.open(stdin_path, os.O_RDONLY)
        fd_out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        fd_err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for src, dst in ((fd_in, 0), (fd_out, 1), (fd_err, 2)):
            os.dup2(src, dst)
            os.close(src)
        os.closerange(3, result_fd)
        os.closerange(result_fd + 1, 1024)
        _reopen_std_streams()
        seccomp = apply_seccomp_no_fork()
        disable_sockets()
        send = _reporter(result_fd, nonce, seccomp)
        if mode == "call":
            report = _run_call(job, case, paths["result"])
        else:
            report = _run_program(job, job["source"], "__main__" if mode == "stdio" else "solution")
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException as exc:
            report = {"ok": False, "error": f"cannot write output: {_short_error(exc)}"}
        send(report.get("ok") is True, report.get("error") or "")
    except BaseException:
        with contextlib.suppress(BaseException):
            os.write(result_fd, json.dumps({"ok": False, "error": traceback.format_exc()[-300:]}).encode())
    finally:
        exit_now(0)


def _authentic(raw: bytes, nonce: str) -> dict | None:
    """The child's report if ``raw`` is exactly one JSON object with this case's nonce, else None.

    Anything the program itself wrote to the pipe either lacks the nonce or, written
    before the real report, makes the bytes more than one JSON object.
    """
    try:
        report = json.loads(raw.decode())
    except ValueError:
        return None
    if not isinstance(report, dict) or not secrets.compare_digest(str(report.pop("nonce", "")), nonce):
        return None
    return report


def _wait(pid: int, timeout_s: float) -> tuple[int | None, bool]:
    """Wait for ``pid`` up to ``timeout_s``; kill it on timeout. Returns (status, timed_out)."""
    deadline = time.monotonic() + timeout_s
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
            break
        if pidfd is not None:
            select.select([pidfd], [], [], left)
        else:
            time.sleep(min(0.01, left))
    if pidfd is not None:
        os.close(pidfd)
    return status, status is None


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        reason = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "file size limit"}.get(sig, "")
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return f"killed by {name}" + (f" ({reason})" if reason else "")
    return f"exit status {os.WEXITSTATUS(status)}"


def _run_case(job: dict, mode: str, case: dict, index: int) -> tuple[dict, str]:
    """Judge side: fork a child for one case, enforce its wall clock, collect its report.

    Returns the report and what the judge compares with the answer: a stdin program's
    output, or a call's result as JSON text.
    """
    workdir = job["workdir"]
    paths = {name: os.path.join(workdir, f".{name}{index}") for name in ("stdin", "stdout", "stderr", "result")}
    stdin_path = paths["stdin"]
    with open(stdin_path, "w", encoding="utf-8") as fh:
        fh.write(case.get("input", "") if mode == "stdio" else "")
    read_fd, write_fd = os.pipe()
    nonce = secrets.token_hex(16)  # per case: a nonce seen in one case is useless in the next
    sys.stdout.flush()
    sys.stderr.flush()
    global _STARTED
    _STARTED = True
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(job, case, paths, write_fd, nonce, mode)
    os.close(write_fd)
    chunks = []
    status, timed_out = _wait(pid, float(job["timeout_s"]))
    os.set_blocking(read_fd, False)
    try:
        while len(b"".join(chunks)) < 8192:
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    except BlockingIOError:
        pass
    os.close(read_fd)
    output = ""
    if mode in ("stdio", "call"):
        try:
            with open(paths["stdout" if mode == "stdio" else "result"], encoding="utf-8", errors="replace") as fh:
                output = fh.read(1 << 24)
        except OSError:
            output = ""
    if timed_out:
        return {"ok": False, "error": f"timed out after {job['timeout_s']} s"}, output
    report = _authentic(b"".join(chunks), nonce)
    if report is None and mode == "stdio" and status == 0:
        # a stdio program that ends with os._exit(0) skips the report but completed; its
        # output decides. A script's asserts may not have run, so script mode stays strict.
        report = {"ok": True}
    if report is None:
        report = {"ok": False, "error": f"no valid report from the program ({_describe_status(status or 0)})"}
    if status and not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        report = {"ok": False, "error": f"{_describe_status(status)}; {report.get('error', '')}".rstrip("; ")}
    return report, output


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def outputs_match(got: str, expected: str) -> bool:
    """LiveCodeBench's rule: same lines after stripping, or the same numbers token by token."""
    from decimal import Decimal, InvalidOperation

    got_lines, exp_lines = _lines(got), _lines(expected)
    if len(got_lines) != len(exp_lines):
        return False
    for g, e in zip(got_lines, exp_lines, strict=True):
        if g == e:
            continue
        try:
            if [Decimal(t) for t in g.split()] != [Decimal(t) for t in e.split()]:
                return False
        except InvalidOperation:
            return False
    return True


def results_match(got: str, expected: str) -> bool:
    """Whether a call's result (its JSON, written by the child) equals the JSON answer."""
    try:
        return bool(json.loads(got) == json.loads(expected))
    except (ValueError, RecursionError, MemoryError):
        return False  # the program wrote something else (or too deep) to its result file


def judge(job: dict) -> dict:
    """Run every case of the job; stop at the first failure, as the benchmarks do."""
    kind = job["kind"]
    if kind == "script":
        job["source"] = job["code"]
        report, _ = _run_case(job, kind, {}, 0)
        verdict = {"status": "passed" if report.get("ok") else "failed", "detail": report.get("error", "")}
        verdict["seccomp"] = bool(report.get("seccomp"))
        return verdict
    if kind in ("stdio", "call"):
        job["source"] = _LCB_PRELUDE + job["code"]
        seccomp = True
        for i, case in enumerate(job["cases"]):
            report, output = _run_case(job, kind, case, i)
            seccomp = seccomp and bool(report.get("seccomp"))
            if not report.get("ok"):
                return {"status": "failed", "detail": f"case {i}: {report.get('error', '')}", "seccomp": seccomp}
            if kind == "stdio" and not outputs_match(output, case["output"]):
                detail = f"case {i}: wrong answer: got {output[:100]!r}"
                return {"status": "failed", "detail": detail, "seccomp": seccomp}
            if kind == "call" and not results_match(output, case["output"]):
                detail = f"case {i}: wrong answer: got {output[:100]}, expected {case['output'][:100]}"
                return {"status": "failed", "detail": detail, "seccomp": seccomp}
        return {"status": "passed", "detail": f"{len(job['cases'])} cases", "seccomp": seccomp}
    return {"status": "error", "detail": f"unknown job kind {kind!r}"}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # no presto modules for programs
    workdir = os.getcwd()
    job_path = os.path.join(workdir, JOB_FILE)
    with open(job_path, encoding="utf-8") as fh:
        job = json.load(fh)
    os.remove(job_path)  # the program never sees the expected outputs
    job["workdir"] = workdir
    set_limits(job)
    protections = apply_landlock(job["workdir"]) if job.get("landlock", True) else []
    try:
        verdict = judge(job)
    except BaseException:
        # before any program ran it is the sandbox's fault (ungradable); after, the program's
        status = "failed" if _STARTED else "error"
        verdict = {"status": status, "detail": "judge: " + traceback.format_exc().strip().splitlines()[-1][:300]}
    if verdict.pop("seccomp", False):
        protections.append("seccomp-nofork")
    verdict["protections"] = protections
    sys.stdout.write(json.dumps(verdict))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

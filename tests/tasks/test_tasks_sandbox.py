"""Malicious programs end as "incorrect" within their timeout; the test process is unharmed.

Every test checks that this process is still alive (it would not be running otherwise),
that it has no leftover children, and that nothing was written outside the sandbox.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from presto.tasks.code_grader import grade_job
from presto.tasks.sandbox import SandboxLimits, probe_protections, run_sandboxed

TIMEOUT_S = 2.0
LIMITS = SandboxLimits(timeout_s=TIMEOUT_S, memory_mb=512, file_size_mb=4)
SLACK_S = 8.0  # process start-up on a busy 2-core machine


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    kids.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return kids


def run_malicious(code: str) -> tuple[bool | None, str, float]:
    start = time.monotonic()
    grade = grade_job({"kind": "script", "code": code}, code, LIMITS, True)
    elapsed = time.monotonic() - start
    assert not children_of(os.getpid()), "sandbox left processes behind"
    return grade.correct, grade.detail, elapsed


def needs(*protections: str) -> None:
    available = probe_protections()
    missing = [p for p in protections if p not in available]
    if missing:
        pytest.skip(f"sandbox here lacks {missing} (has {available})")


def test_protections_are_reported() -> None:
    protections = probe_protections()
    assert protections, "a trivial program failed in the sandbox"
    result = run_sandboxed({"kind": "script", "code": "pass\n"}, LIMITS)
    assert result.passed and result.protections == protections


def test_infinite_loop_times_out() -> None:
    correct, detail, elapsed = run_malicious("while True:\n    pass\n")
    assert correct is False and "timed out" in detail
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S


def test_sleep_times_out_on_the_wall_clock() -> None:
    correct, detail, elapsed = run_malicious("import time\ntime.sleep(60)\n")
    assert correct is False and "timed out" in detail
    assert elapsed < TIMEOUT_S + SLACK_S


def test_fork_bomb_is_stopped() -> None:
    needs("seccomp-nofork")
    correct, _, elapsed = run_malicious("import os\nwhile True:\n    os.fork()\n")
    assert correct is False and elapsed < TIMEOUT_S + SLACK_S


def test_fork_bomb_via_multiprocessing_is_stopped() -> None:
    needs("seccomp-nofork")
    code = (
        "import multiprocessing as mp\ndef boom():\n    while True:\n        mp.Process(target=boom).start()\nboom()\n"
    )
    correct, _, elapsed = run_malicious(code)
    assert correct is False and elapsed < TIMEOUT_S + SLACK_S


def test_memory_hog_is_stopped() -> None:
    for code in ("x = bytearray(8 * 2**30)\n", "xs = []\nwhile True:\n    xs.append(bytearray(2**24))\n"):
        correct, detail, elapsed = run_malicious(code)
        assert correct is False and elapsed < TIMEOUT_S + SLACK_S, detail


def test_writing_outside_the_work_directory_fails(tmp_path: Path) -> None:
    needs("landlock-fs")
    target = tmp_path / f"evil-{uuid.uuid4().hex}.txt"
    tmp_target = Path("/tmp") / f"presto-evil-{uuid.uuid4().hex}.txt"
    sentinel = tmp_path / "keep.txt"
    sentinel.write_text("keep")
    code = (
        f"import os, shutil\n"
        f"for p in ({str(target)!r}, {str(tmp_target)!r}):\n"
        f"    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n"
        f"for f in (lambda: os.remove({str(sentinel)!r}), lambda: shutil.rmtree({str(tmp_path)!r})):\n"
        f"    try:\n        f()\n    except OSError:\n        pass\n"
        f"open({str(target)!r}, 'w').write('x')\n"
    )
    correct, _, _ = run_malicious(code)
    assert correct is False
    assert not target.exists() and not tmp_target.exists()
    assert sentinel.read_text() == "keep"


def test_writing_inside_the_work_directory_is_allowed() -> None:
    code = "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'\n"
    correct, detail, _ = run_malicious(code)
    assert correct is True, detail


def test_opening_a_socket_fails() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    try:
        plain = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        # bypass the in-process socket patch: only the namespace / Landlock can stop this one
        bypass = (
            "import socket\nreal = [c for c in socket.socket.__mro__ if c.__module__ == '_socket'][0]\n"
            f"s = real(socket.AF_INET, socket.SOCK_STREAM)\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))\n"
        )
        for code in (plain, bypass):
            correct, detail, elapsed = run_malicious(code)
            assert correct is False and elapsed < TIMEOUT_S + SLACK_S, detail
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody got through
    finally:
        listener.close()


def test_killing_the_parent_fails() -> None:
    if not {"pidns", "landlock-signal"} & set(probe_protections()):
        pytest.skip("neither a PID namespace nor Landlock signal scoping here: the test would kill pytest")
    me = os.getpid()
    code = (
        "import os, signal\n"
        f"for pid in ({me}, os.getppid()):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
        "try:\n    os.killpg(0, signal.SIGKILL)\nexcept OSError:\n    pass\n"
        "assert False\n"
    )
    correct, _, elapsed = run_malicious(code)
    assert correct is False and elapsed < TIMEOUT_S + SLACK_S
    assert os.getpid() == me  # still here


def test_kill_everything_stays_inside_the_namespace() -> None:
    needs("pidns", "landlock-signal")
    correct, _, _ = run_malicious("import os, signal\nos.kill(-1, signal.SIGKILL)\n")
    assert correct is False


def test_a_program_has_no_capabilities_over_the_host() -> None:
    """Even when grading runs as root: its uid map is a user namespace's one line, not the host's full range."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", "--map-root-user", "true"], check=False).returncode:
        pytest.skip("no user namespaces on this machine")
    code = "maps = open('/proc/self/uid_map').read().split()\nassert maps[2] != '4294967295', maps\n"
    correct, detail, _ = run_malicious(code)
    assert correct is True, detail


def test_huge_output_is_cut_by_the_file_size_limit() -> None:
    correct, _, elapsed = run_malicious("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    assert correct is False and elapsed < TIMEOUT_S + SLACK_S


def test_environment_is_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRESTO_SECRET_TOKEN", "hunter2")
    correct, detail, _ = run_malicious("import os\nassert 'PRESTO_SECRET_TOKEN' not in os.environ\n")
    assert correct is True, detail


def test_program_cannot_read_its_job() -> None:
    correct, detail, _ = run_malicious(
        "import os\nassert not any('job' in f for f in os.listdir('.')), os.listdir('.')\n"
    )
    assert correct is True, detail  # the expected outputs are not there to be read


def test_a_broken_sandbox_is_ungradable_not_wrong(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No verdict at all: an error the run records as grade_error (and grades again on resume)."""
    import presto.tasks.sandbox as sandbox
    from presto.tasks.code_grader import SandboxError

    monkeypatch.setattr(sandbox, "_JUDGE", tmp_path / "missing_judge.py")
    with pytest.raises(SandboxError, match="judge failed"):
        grade_job({"kind": "script", "code": "assert True"}, "assert True", LIMITS, True)


FORGE_REPORT = (
    "import json, os\n"
    "for fd in map(int, os.listdir('/proc/self/fd')):\n"
    "    if fd > 2:\n"
    "        try:\n"
    "            os.write(fd, json.dumps({'ok': True, 'seccomp': True}).encode())\n"
    "        except OSError:\n"
    "            pass\n"
    "os._exit(0)\n"
)


def test_a_forged_report_does_not_pass() -> None:
    """Writing {"ok": true} to the inherited report pipe, then exiting, is not a pass."""
    correct, detail, _ = run_malicious(FORGE_REPORT + "assert False\n")
    assert correct is False, detail
    method = "".join(f"        {line}\n" for line in FORGE_REPORT.splitlines())
    code = f"class Solution:\n    def f(self, x):\n{method}"
    call_job = {"kind": "call", "code": code, "func_name": "f", "cases": [{"input": "1", "output": "2"}]}
    assert grade_job(call_job, code, LIMITS, True).correct is False

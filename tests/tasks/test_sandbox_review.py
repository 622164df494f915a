"""Adversarial programs that must not be graded correct: forged reports, stolen answers.

Each one attacks the judge from inside the program, without digging a secret out of raw
memory: by monkeypatching what the judge reports with, by reading the expected output
the judge still held, or by writing a verdict into the judge's own output pipe.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from presto.tasks.code_grader import mbpp_program
from presto.tasks.sandbox import SandboxLimits, probe_protections, run_sandboxed

LIMITS = SandboxLimits(timeout_s=3.0, memory_mb=512, file_size_mb=4)

# replaces json.dumps so that every dict it encodes (the judge's report) says ok
PATCH_JSON = (
    "import json\n_dumps = json.dumps\n"
    "json.dumps = lambda o, *a, **k: _dumps({**o, 'ok': True} if isinstance(o, dict) else o, *a, **k)\n"
)


def status(job: dict) -> str:
    return run_sandboxed(job, LIMITS).status


def test_a_patched_json_module_does_not_forge_a_pass() -> None:
    script = mbpp_program("", PATCH_JSON + "def sq(x):\n    return 0", ["assert sq(3) == 9"])
    assert status({"kind": "script", "code": script}) == "failed"
    call = PATCH_JSON + "def f(x):\n    return 0\n"
    cases = [{"input": "1", "output": "2"}]
    assert status({"kind": "call", "code": call, "func_name": "f", "cases": cases}) == "failed"
    # and the same patch does not make a correct program fail
    good = mbpp_program("", PATCH_JSON + "def sq(x):\n    return x * x", ["assert sq(3) == 9"])
    assert status({"kind": "script", "code": good}) == "passed"


# walks up the interpreter's frames to the judge's current case and takes its expected output
FIND_CASE = (
    "import sys, json\n"
    "def case():\n"
    "    f = sys._getframe()\n"
    "    while f is not None and not isinstance(f.f_locals.get('case'), dict):\n"
    "        f = f.f_back\n"
    "    return f.f_locals['case']\n"
)


def test_the_program_cannot_read_the_expected_output_from_the_judge() -> None:
    cases = [{"input": "1\n", "output": "12345\n"}, {"input": "2\n", "output": "999\n"}]
    stdio = FIND_CASE + "print(case().get('output'))\n"
    assert status({"kind": "stdio", "code": stdio, "cases": cases}) == "failed"
    call = FIND_CASE + "def f(x):\n    return json.loads(case().get('output') or 'null')\n"
    job = {"kind": "call", "code": call, "func_name": "f", "cases": [{"input": "1", "output": "[7, 8]"}]}
    assert status(job) == "failed"


def test_call_results_compare_as_before() -> None:
    """The judge compares the call's result (top-level tuple as list), as LiveCodeBench does."""
    for body, output, expected in (
        ("return (1, 2)", "[1, 2]", "passed"),
        ("return [1.0, 2]", "[1, 2]", "passed"),
        ("return True", "true", "passed"),
        ("return [(1, 2)]", "[[1, 2]]", "failed"),  # only the top level is converted
        ("return {1: 2}", '{"1": 2}', "failed"),  # int keys are not the string keys
        ("return float('nan')", "NaN", "failed"),
        ("return {1, 2}", "[1, 2]", "failed"),
        ("return object()", "null", "failed"),
        ("return None", "null", "passed"),
        ("from decimal import Decimal\n        return [Decimal(6), Decimal('0.5')]", "[6, 0.5]", "passed"),
        ("from decimal import Decimal\n        return Decimal('0.1')", "0.1", "failed"),  # as 0.1 != Decimal('0.1')
        ("return list(range(100000))", "[" + ", ".join(map(str, range(100000))) + "]", "passed"),
    ):
        code = f"class Solution:\n    def f(self, x):\n        {body}\n"
        job = {"kind": "call", "code": code, "func_name": "f", "cases": [{"input": "0", "output": output}]}
        assert status(job) == expected, body


def _judge_stdout_forgery(padding: int) -> str:
    """Finds the judge (the parent) in /proc and writes a passing verdict into its stdout pipe."""
    return (
        "import os, json\n"
        "me = os.readlink('/proc/self')\n"
        "ppid = [l.split()[1] for l in open(f'/proc/{me}/status') if l.startswith('PPid:')][0]\n"
        "try:\n"
        "    fd = os.open(f'/proc/{ppid}/fd/1', os.O_WRONLY)\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        f"    os.write(fd, json.dumps({{'status': 'passed', 'detail': ''}}).encode() + b' ' * {padding})\n"
        "assert False\n"
    )


@pytest.mark.parametrize("padding", [0, 2 << 20])
def test_a_verdict_written_into_the_judges_pipe_does_not_pass(padding: int) -> None:
    assert status({"kind": "script", "code": _judge_stdout_forgery(padding)}) == "failed"


def test_file_metadata_outside_the_work_directory_cannot_change(tmp_path: Path) -> None:
    if "seccomp-nofork" not in probe_protections():
        pytest.skip("no seccomp filter here")
    target = tmp_path / "keep.txt"
    target.write_text("keep")
    os.chmod(target, 0o644)
    before = target.stat()
    code = "import os\n" + "".join(
        f"try:\n    {call}\nexcept OSError:\n    pass\n"
        for call in (
            f"os.chmod({str(target)!r}, 0)",
            f"os.utime({str(target)!r}, (0, 0))",
            f"os.chown({str(target)!r}, 12345, 12345)",
            f"os.setxattr({str(target)!r}, 'user.x', b'1')",
        )
    )
    assert status({"kind": "script", "code": code}) == "passed"
    after = target.stat()
    assert (after.st_mode, after.st_mtime_ns, after.st_uid) == (before.st_mode, before.st_mtime_ns, before.st_uid)
    with pytest.raises(OSError):
        os.getxattr(target, "user.x")


def test_the_work_directory_is_removed_even_when_the_program_hid_a_directory(tmp_path: Path) -> None:
    """``mkdir(d, 0o300)``: writable, not listable, so a plain rmtree by its owner fails.

    Root reads it anyway, so as root the run goes through ``setpriv`` without the
    capabilities that override file permissions: the owner's view, as any other user has.
    """
    script = (
        "from presto.tasks.sandbox import SandboxLimits, run_sandboxed\n"
        "code = \"import os\\nos.mkdir('d', 0o300)\\nopen('d/f', 'w').write('x')\\n\"\n"
        "assert run_sandboxed({'kind': 'script', 'code': code}, SandboxLimits(timeout_s=3)).passed\n"
    )
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root, and no setpriv to run without CAP_DAC_OVERRIDE")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    subprocess.run([*prefix, sys.executable, "-c", script], env=env, check=True, timeout=60)
    assert not list(tmp_path.glob("presto-sandbox-*"))


def test_ordinary_file_mode_and_time_changes_in_the_work_directory_still_work() -> None:
    """The metadata filter cannot see paths: inside the work directory chmod and utime must not fail."""
    code = (
        "import os, shutil\nopen('a', 'w').write('x')\nos.chmod('a', 0o600)\nos.utime('a', (1, 1))\n"
        "shutil.copy('a', 'b')\nassert open('b').read() == 'x'\n"
    )
    assert status({"kind": "script", "code": code}) == "passed"


def test_many_large_call_results_are_compared_within_the_judges_budget() -> None:
    """The judge compares every case's result itself: its CPU budget must grow with the cases."""
    n = 400_000
    cases = [{"input": str(n), "output": "[" + ", ".join(map(str, range(n))) + "]"}] * 40
    job = {"kind": "call", "code": "def f(n):\n    return list(range(n))\n", "func_name": "f", "cases": cases}
    result = run_sandboxed(job, SandboxLimits(timeout_s=1.0, memory_mb=1024, file_size_mb=64))
    assert result.status == "passed", result.detail


def test_root_falls_back_to_no_user_namespace_when_that_hides_the_judge(tmp_path: Path, monkeypatch) -> None:
    """Inside a user namespace root cannot read another user's private folder (a venv in a 0750 home)."""
    from presto.tasks import sandbox

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    private = tmp_path / "home"
    private.mkdir()
    judge = private / "_judge.py"
    judge.write_text("")
    os.chown(private, 1234, 1234)
    os.chmod(private, 0o700)
    monkeypatch.setattr(sandbox, "_JUDGE", judge)
    sandbox.namespace_prefix.cache_clear()
    try:
        prefix = sandbox.namespace_prefix()
    finally:
        sandbox.namespace_prefix.cache_clear()  # the real judge's prefix for the tests after this one
    assert prefix and "--user" not in prefix and "--net" in prefix


def test_a_large_stdin_input_is_the_judges_to_write_and_does_not_shrink_the_programs_memory() -> None:
    """The judge writes each case's input and holds the job: neither may count against the program's limits."""
    text = "x" * (3 * 2**20)  # more than the program may write (1 MB), and MBs the judge holds
    cases = [{"input": text, "output": str(len(text))}, {"input": "ab", "output": "2"}]
    job = {"kind": "stdio", "code": "import sys\nprint(len(sys.stdin.read()))\n", "cases": cases}
    result = run_sandboxed(job, SandboxLimits(timeout_s=5.0, memory_mb=64, file_size_mb=1))
    assert result.status == "passed", result.detail


def test_the_inputs_the_judge_holds_do_not_count_against_the_programs_memory() -> None:
    text = "x" * (40 * 2**20)  # a LiveCodeBench-sized input: the judge holds it while the program runs
    code = (  # reads in chunks: the program itself needs little memory
        "import sys\nn = 0\nwhile True:\n    c = sys.stdin.read(65536)\n    if not c:\n"
        "        break\n    n += len(c)\nprint(n)\n"
    )
    job = {"kind": "stdio", "code": code, "cases": [{"input": text, "output": str(len(text))}]}
    result = run_sandboxed(job, SandboxLimits(timeout_s=10.0, memory_mb=64, file_size_mb=64))
    assert result.status == "passed", result.detail

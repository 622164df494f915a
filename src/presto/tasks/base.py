"""The task contract: a dataset is a list of :class:`Problem` plus a grader.

The runner knows tasks only through this module: ``build_task(cfg)`` returns an object
with ``load()`` (the first ``num_prompts`` problems, formatted as chat messages and as a
plain prompt) and ``grade(problem, completion)``. Keeping the contract this small is what
lets datasets be added without touching the sampler or the runner.

A grade is three-valued on purpose: ``correct=None`` means "could not be graded" (code
execution disabled, a reference that cannot be parsed, a sandbox that failed to start).
The runner counts those separately instead of silently dropping them or calling them
wrong, so an accuracy figure always says what it was computed over.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

#: End-of-sequence strings of the chat models people run. The chain runs past EOS (the
#: horizon is fixed), so a grader must only ever look at the text before the first one.
DEFAULT_STOP_STRINGS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "</s>",
)


class TaskDataError(ValueError):
    """A dataset could not be loaded: one line naming the file (and row) and what is wrong."""


class GradingError(RuntimeError):
    """The grader failed on every chain a run has finished so far (a broken sandbox, a missing package)."""


@dataclass(frozen=True)
class Problem:
    """One prompt of a dataset, ready for an engine, with what its grader needs."""

    index: int  # position in the loaded list (0..N-1); keys the random stream
    problem_id: str  # the dataset's own id, e.g. "HumanEval/0"
    messages: list[dict[str, str]]  # chat messages (system optional, user)
    raw_prompt: str  # plain-text prompt for models without a chat template
    reference: Any  # what the grader needs (answer, tests, letter, ...)


@dataclass(frozen=True)
class Grade:
    """The verdict on one completion; ``correct=None`` means it could not be graded."""

    correct: bool | None
    extracted: str | None  # the extracted answer/program, for logs
    detail: str = ""


@runtime_checkable
class Task(Protocol):
    """What the runner needs from a dataset: its problems and a grader.

    Besides ``load`` and ``grade``, every task carries ``chat_template_kwargs`` (extra
    ``apply_chat_template`` arguments, e.g. ``{"enable_thinking": False}``) and
    ``stop_strings`` (the end-of-sequence strings ``grade`` cuts at; a runner may add its
    tokenizer's EOS string: ``task.stop_strings += (tokenizer.eos_token,)``).
    """

    name: str
    stop_strings: tuple[str, ...]

    @property
    def chat_template_kwargs(self) -> dict[str, Any]: ...

    def load(self) -> list[Problem]: ...

    def grade(self, problem: Problem, completion: str) -> Grade: ...


def cut_at_stop(text: str, stop_strings: tuple[str, ...] | list[str] = DEFAULT_STOP_STRINGS) -> str:
    """Return ``text`` up to the first stop string.

    The caller already cuts at the tokenizer's EOS; this is the defensive second cut, since
    a decoded fixed-horizon chain may still contain an EOS string followed by more text
    that must never be graded.
    """
    cut = len(text)
    for stop in stop_strings:
        if stop:
            pos = text.find(stop)
            if 0 <= pos < cut:
                cut = pos
    return text[:cut]


# Full-width forms U+FF01..U+FF5E are ASCII 0x21..0x7E shifted; U+3000 is the ideographic space.
_HALF_WIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def half_width(text: str) -> str:
    """``text`` with full-width letters, digits and punctuation as ASCII ("Answer：Ｂ" -> "Answer:B").

    Models write these after CJK text. Only this block is mapped: a wider normalization (NFKC)
    would also turn "x²" into "x2" and change what a math answer says.
    """
    return text.translate(_HALF_WIDTH)


# words that make an answer phrase a supposition, not a statement, when one comes shortly
# before it in the same sentence: "suppose the answer is 204", "check if the answer is 5"
_HYPOTHETICAL = re.compile(r"\b(?:if|suppos(?:e|ing)|assum(?:e|ing)|whether|maybe|guess|say|check)\b", re.IGNORECASE)
# "say" after these states the answer rather than supposing it, and "if so" / "double-check"
# lead to a stated answer ("If so, the answer is B.", "Having double-checked, the answer is 5.")
_STATING = re.compile(
    r"\b(?:I'd|I\s+would|I\s+can|we\s+can|safe\s+to|so\s+I)\s+say\b|\bif\s+so\b|\bdouble[- ]check(?:ed|ing)?\b",
    re.IGNORECASE,
)
# a colon ends the clause too: "Let me double-check: the answer is C." states it after the check
_SENTENCE_END = re.compile(r"[.!?:\n]")


def is_hypothetical(text: str, lead_start: int) -> bool:
    """Whether the answer phrase at ``lead_start`` ("the answer is") is a supposition
    mid-reasoning rather than a statement: one of :data:`_HYPOTHETICAL` among the four words
    before it, in its sentence ("Maybe the answer is 3? Then", "if the answer is C, then").

    Shared by the math and choice graders: a truncated chain's guess under test must not
    count as its answer, nor override the firm answer stated before it.
    """
    before = _SENTENCE_END.split(text[max(0, lead_start - 200) : lead_start])[-1]
    before = _STATING.sub(" ", before)  # "I'd say the answer is 12." states it
    return _HYPOTHETICAL.search(" ".join(before.split()[-4:])) is not None


def stop_strings_from(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """``dataset.stop_strings``: a list of strings, or one string (one stop string, not a tuple
    of its characters, each of which would cut every completion at its first letter);
    the defaults when unset or empty."""
    stops = cfg.get("stop_strings") or DEFAULT_STOP_STRINGS
    stops = (stops,) if isinstance(stops, str) else stops
    if not isinstance(stops, Sequence) or not all(isinstance(stop, str) for stop in stops):
        raise TaskDataError(f"dataset.stop_strings must be a string or a list of strings, got {stops!r:.80}")
    return tuple(stops)


def chat_template_kwargs_from(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Extra ``apply_chat_template`` arguments: the thinking switch of Qwen3-style templates.

    ``enable_thinking=None`` passes nothing, so templates without the switch (and those
    whose default the user wants) are left alone.
    """
    enable_thinking = cfg.get("enable_thinking")
    return {} if enable_thinking is None else {"enable_thinking": bool(enable_thinking)}


# Registry: dataset name -> "module:callable". Modules are imported only when their task
# is built, so the heavy optional libraries (datasets, math-verify, reasoning-gym) are
# never imported by a run that does not use them.
_REGISTRY: dict[str, str] = {
    "toy": "presto.tasks.toy:ToyTask",
    "humaneval": "presto.tasks.code_tasks:HumanEvalTask",
    "mbpp": "presto.tasks.code_tasks:MBPPTask",
    "livecodebench": "presto.tasks.code_tasks:LiveCodeBenchTask",
    "math500": "presto.tasks.math_tasks:Math500Task",
    "aime24": "presto.tasks.math_tasks:AIME24Task",
    "aime25": "presto.tasks.math_tasks:AIME25Task",
    "gen_math": "presto.tasks.math_tasks:GenMathTask",
    "gpqa_diamond": "presto.tasks.choice_tasks:GPQATask",
    "mmlu": "presto.tasks.choice_tasks:MMLUTask",
    "mmlu_pro": "presto.tasks.choice_tasks:MMLUProTask",
}

TASK_NAMES: tuple[str, ...] = tuple(sorted(_REGISTRY))


def build_task(dataset_cfg: Mapping[str, Any]) -> Task:
    """Build the task named by ``dataset_cfg["name"]`` from the plain-dict dataset config."""
    if not isinstance(dataset_cfg, Mapping):
        raise TaskDataError(f"dataset config must be a mapping, got {type(dataset_cfg).__name__}")
    name = dataset_cfg.get("name")
    if name not in _REGISTRY:
        raise TaskDataError(f"unknown dataset {name!r}; allowed: {', '.join(TASK_NAMES)}")
    module_name, _, attr = _REGISTRY[name].partition(":")
    factory: Callable[[Mapping[str, Any]], Task] = getattr(importlib.import_module(module_name), attr)
    return factory(dict(dataset_cfg))

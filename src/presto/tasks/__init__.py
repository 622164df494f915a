"""Tasks: datasets, prompts and graders behind one small contract (see :mod:`presto.tasks.base`).

Importing this package is cheap: each dataset's module (and its heavy libraries) is only
imported by :func:`build_task` when that dataset is asked for.
"""

from presto.tasks.base import (
    DEFAULT_STOP_STRINGS,
    TASK_NAMES,
    Grade,
    GradingError,
    Problem,
    Task,
    TaskDataError,
    build_task,
    cut_at_stop,
)

__all__ = [
    "DEFAULT_STOP_STRINGS",
    "TASK_NAMES",
    "Grade",
    "GradingError",
    "Problem",
    "Task",
    "TaskDataError",
    "build_task",
    "cut_at_stop",
]

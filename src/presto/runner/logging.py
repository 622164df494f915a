"""Run loggers: where per-round, per-chain and summary records go besides the run directory.

The runner calls a logger at four points; ``logger=none`` does nothing, ``logger=wandb``
(presto.eval.wandb_logger) sends them to Weights & Biases. A logger must never make a run
fail: its errors are reported once and the run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol


class RunLogger(Protocol):
    def on_round(self, record: Mapping[str, Any]) -> None: ...
    def on_chain(self, record: Mapping[str, Any]) -> None: ...
    def on_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None: ...
    def finish(self, exit_code: int = 0) -> None: ...


class NullLogger:
    def on_round(self, record: Mapping[str, Any]) -> None:
        pass

    def on_chain(self, record: Mapping[str, Any]) -> None:
        pass

    def on_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        pass


def exit_status(error: BaseException | None) -> int:
    """The exit status of a run ending with ``error`` (None: it ended normally), as the CLI exits:
    143 for a SIGTERM (presto.cli raises it as a KeyboardInterrupt that says so), 130 for Ctrl-C,
    a SystemExit's own code, 2 for a user error (a bad setting, a broken grader: the CLI's one
    ``error:`` line), 1 for any other error. A logger's ``finish`` is told it, so that a tracker
    marks an interrupted or failed run as such."""
    from presto.cli import _TERMINATED, user_errors

    if error is None:
        return 0
    if isinstance(error, KeyboardInterrupt):
        return 143 if error.args == (_TERMINATED,) else 130
    if isinstance(error, SystemExit):
        return error.code if isinstance(error.code, int) else int(error.code is not None)
    return 2 if isinstance(error, user_errors()) else 1


def build_logger(logger_cfg: Mapping[str, Any] | None, run_config: Mapping[str, Any], run_dir: Path) -> RunLogger:
    """The logger named by ``logger.name`` (``none`` when the group is absent)."""
    name = (logger_cfg or {}).get("name")
    if name is None or name == "none":  # logger.name=null is no logger, as presto.config.validate allows
        return NullLogger()
    if name == "wandb":
        from presto.eval.wandb_logger import WandbLogger

        return WandbLogger(dict(logger_cfg), dict(run_config), run_dir)
    raise ValueError(f"logger={name} is not a logger; choose one of: none, wandb")

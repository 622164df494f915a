"""Train the epsilon-certainty predictor: `python src/train_predictor.py runs=[RUN_DIR,...] [key=value ...]`."""

from __future__ import annotations

import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from presto.cli import (  # noqa: E402
    check_group_choices,
    check_one_mode,
    check_output_dirs,
    check_overrides,
    fail,
    register_resolvers,
)

register_resolvers(PROJECT_ROOT)


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="train_predictor")
def main(cfg: DictConfig) -> float | None:
    """Returns the held-out log loss (what a sweeper over models and features minimizes)."""
    from presto.cli import _remove_if_empty, _run_dir
    from presto.config import ConfigError
    from presto.predictor import train

    try:
        check_predictor_keys(cfg)
        metrics = train.run_training(cfg)
    except train.UnservableModelError as err:  # a diverged fit: metrics.json written, nothing installed
        fail(str(err).splitlines()[0], code=1)
    except (ConfigError, OSError, ValueError) as err:  # OSError: a checkpoint or metrics write failed
        _remove_if_empty(_run_dir())  # Hydra made it before the mistake was found, as src/main.py does
        fail(str(err).splitlines()[0])
    print(train.format_metrics(metrics))
    warnings = (
        train.pooling_warning(metrics),
        train.setting_warning(metrics),
        train.absent_class_warning(metrics),
        train.early_stopping_warning(metrics),
        train.non_finite_warning(metrics),
        train.improvement_warning(metrics),
    )
    for warning in warnings:
        if warning:
            print(warning, file=sys.stderr)
    if cfg.require_improvement and not metrics["checkpoint"]:
        sys.exit(3)
    log_loss = metrics["cross_validation"]["model"]["log_loss"]
    return float("inf") if log_loss is None else log_loss  # a sweeper minimizing it needs a number (None: diverged)


def check_predictor_keys(cfg: DictConfig) -> None:
    """Name a key the predictor does not take as presto.config's checks do (ModelSettings would say
    ``__init__() got an unexpected keyword argument``)."""
    from dataclasses import fields

    from omegaconf import OmegaConf

    from presto.config import check_keys
    from presto.predictor.train import ModelSettings

    options = OmegaConf.to_container(cfg.predictor, resolve=True)
    owner = f"predictor={options.get('name')}"
    check_keys(options, "predictor", owner, tuple(field.name for field in fields(ModelSettings)))


if __name__ == "__main__":
    check_one_mode(sys.argv[1:])
    check_group_choices(PROJECT_ROOT / "conf", sys.argv[1:])
    check_output_dirs(sys.argv[1:])
    check_overrides(PROJECT_ROOT / "conf", sys.argv[1:], config_name="train_predictor")
    from presto.predictor.train import sweep_output_error

    one_for_all = sweep_output_error(sys.argv[1:])  # -m with one output= for several jobs: before any job
    if one_for_all:
        fail(one_for_all)
    main()

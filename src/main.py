"""Run power-sampling chains: `python src/main.py [group=option ...] [key=value ...] [-m]`."""

from __future__ import annotations

import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from presto.cli import (  # noqa: E402
    check_group_choices,
    check_launcher,
    check_one_mode,
    check_output_dirs,
    check_overrides,
    execute,
    options_first,
    register_resolvers,
    with_default_engine,
)

register_resolvers(PROJECT_ROOT)


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> float | None:
    return execute(cfg)


if __name__ == "__main__":
    sys.argv[1:] = options_first(with_default_engine(sys.argv[1:]))
    check_one_mode(sys.argv[1:])
    check_group_choices(PROJECT_ROOT / "conf", sys.argv[1:])
    check_output_dirs(sys.argv[1:])
    check_launcher(sys.argv[1:])
    check_overrides(PROJECT_ROOT / "conf", sys.argv[1:])
    main()

"""Figures from run directories: prefetched subtrees, per-transition traces, speedup scatter, ε-certainty.

    python scripts/plots.py RUN_DIR [RUN_DIR ...] --out DIR
    python scripts/plots.py outputs/multirun/2026-01-01_00-00-00 --out figures   # every run below it

A directory that holds no summary.json itself is searched for run directories below it
(a Hydra multirun directory). The speedup scatter needs a sequential run and PreSTO runs
of the same setting among them; when there are both but no such pair, a notice on stderr
says why. Prints the paths of the PNG files written.

DIR then shows these runs only: figures that an earlier invocation wrote there (listed in
DIR/.presto-plots.json) and that this one does not write again are removed. Other files in
DIR are never touched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories or directories holding them")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory for the PNG files (its stale figures from an earlier invocation are removed)",
    )
    parser.add_argument("--max-tree-panels", type=int, default=20, help="subtrees drawn per run")
    args = parser.parse_args(argv)
    if args.max_tree_panels < 1:
        parser.error(f"--max-tree-panels must be >= 1, got {args.max_tree_panels}")
    from presto.eval.plots import make_plots
    from presto.eval.runs import load_runs

    try:
        runs = load_runs(args.runs)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        written = make_plots(runs, args.out, max_tree_panels=args.max_tree_panels)
    except OSError as err:  # --out is a file, or not writable
        print(f"error: cannot write figures to {args.out}: {err}", file=sys.stderr)
        return 2
    if not written:
        print(
            f"no figures: none of the {len(runs)} runs has MH transitions with per-call times, or prefetch "
            "trees, to plot (test-time baselines only? a PreSTO run whose trees.jsonl is empty or missing?)",
            file=sys.stderr,
        )
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

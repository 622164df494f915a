"""How long the predictive rule's reach DP takes per plan, with and without path features.

    python scripts/plan_cost.py                          # N_pf 20 64 128, T = 256, 5 plans each
    python scripts/plan_cost.py --n-pf 64 --length 1024 --plans 3

The predictive traversal plans every round with :func:`presto.prefetch.allocation.shared_request_walk`.
A predictor whose features read the path (parent cut, gap, accepts on the path: ``features``
with ``tree``) makes the DP follow (node cut, agreement, accepts) states, O(N_pf^3) of them; one
that reads the root state only (the shipped predictors, cut fraction) merges them on the
agreement. This times both on the same cuts, with a logistic branch over those features as a
trained predictor's stands in for one (the model's own cost is one small matrix product per
depth), and prints milliseconds per plan and their ratio. On a GPU a model call takes 0.1-0.3 s,
so a plan should take a few milliseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))


def logistic_branch(length: int):
    """h(depth, cut, node cuts, accepts): acceptance falls with the cut's distance from the node's cut
    and with the accepts so far, as a path-feature predictor's may."""

    def branch(depth: int, cut: int, node_cuts: np.ndarray, accepts: np.ndarray) -> np.ndarray:
        gap = (np.asarray(node_cuts, dtype=np.float64) - cut) / length
        return 1.0 / (1.0 + np.exp(-(0.5 - 2.0 * gap - 0.2 * np.asarray(accepts) + cut / length)))

    return branch


def time_plans(n_pf: int, length: int, plans: int, path_dependent: bool, seed: int) -> float:
    """Mean seconds per plan over ``plans`` roots (uniform cuts, per-token log q of a low-temperature
    proposal, so repeats of the root's tokens are likely, as they are at tau = 1/4)."""
    from presto.prefetch.allocation import shared_request_walk

    rng = np.random.default_rng(seed)
    branch = logistic_branch(length)
    total = 0.0
    for _ in range(plans):
        cuts = rng.integers(0, length, size=n_pf)
        logq = np.log(rng.uniform(0.7, 1.0, size=length))
        start = time.perf_counter()
        shared_request_walk(cuts, length, branch, logq, path_dependent)
        total += time.perf_counter() - start
    return total / plans


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-pf", type=int, nargs="+", default=[20, 64, 128], help="planned depths per round")
    parser.add_argument("--length", type=int, default=256, help="answer length T (cuts are uniform in [0, T))")
    parser.add_argument("--plans", type=int, default=5, help="plans timed per setting (distinct roots)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.n_pf) < 1 or args.length < 1 or args.plans < 1:
        parser.error("--n-pf, --length and --plans must be >= 1")
    print("| N_pf | path features ms/plan | root features ms/plan | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for n_pf in args.n_pf:
        path = time_plans(n_pf, args.length, args.plans, True, args.seed)
        root = time_plans(n_pf, args.length, args.plans, False, args.seed)
        print(f"| {n_pf} | {1e3 * path:.1f} | {1e3 * root:.1f} | {path / root:.1f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

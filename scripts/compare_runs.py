"""Compare run directories: speedup, its decomposition, and paired TOST on quality.

    python scripts/compare_runs.py RUN_A RUN_B                  # A = baseline (e.g. sequential), B = variant
    python scripts/compare_runs.py A1 B1 A2 B2 ...              # several pairs, plus a pooled TOST
    python scripts/compare_runs.py A B --unit prompt --json out.json

Chains pair up by (prompt_id, chain); runs made with one seed are seed-matched. The two
runs of a pair must share their setting (engine, model, dataset, sampler options; the
traversal, budget and seed may differ): otherwise it stops naming what differs, unless
--allow-different-settings. For each pair it prints the speedup (mean summed model-call
time of A over B, the paper's eq. 20), the increase in time per call (ratio of the means
over prompts of each prompt's time per call: its chains' call time over their calls, as in
App. D.2) and the reduction in model calls (speedup x increase, which can differ from the
plain calls A/B printed beside it), transitions per call, and a paired TOST of B - A for
token-normalized log-likelihood and confidence at a margin of 0.2 baseline SDs (p_eq =
larger one-sided p), per prompt (its chains averaged) as in the paper, or per chain with
--unit chain. A test needs at least two paired units: a row without one shows its pairs and
why (runs of one prompt: --unit chain pairs their chains).
With several pairs, a fixed-effect pooled TOST per statistic follows when at least two
pairs that share no run have a TOST (a run enters once, as baseline or variant; a lone
pair's answer is its own paired TOST). A run that did not finish every chain it was configured for
(summary.json's complete, or for older runs config.yaml's prompts x chains) is one
`warning:` line on stderr, and a pair that holds fewer chains than a run configured is
noted under the table. Exit status 0; bad input is one `error:` line and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories, as baseline/variant pairs")
    parser.add_argument("--stats", nargs="+", default=["loglik", "confidence"], help="chain statistics to test")
    parser.add_argument(
        "--unit",
        choices=("chain", "prompt"),
        default="prompt",
        help="paired unit (prompt, the paper's: its chains averaged; chain: each chain on its own)",
    )
    parser.add_argument("--margin-sd", type=float, default=0.2, help="equivalence margin in baseline SDs")
    parser.add_argument("--level", type=float, default=0.05, help="equivalence when p_eq < level, in (0, 0.5)")
    parser.add_argument(
        "--allow-different-settings",
        action="store_true",
        help="compare runs whose engine, model, dataset or sampler options differ (named in the output)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if len(args.runs) % 2:
        parser.error(f"give run directories in baseline/variant pairs; got {len(args.runs)} directories")
    if not 0 < args.level < 0.5:
        parser.error(f"--level must be in (0, 0.5), got {args.level}")
    if not 0 < args.margin_sd < math.inf:
        parser.error(f"--margin-sd must be a positive number of baseline SDs, got {args.margin_sd}")
    args.stats = list(dict.fromkeys(args.stats))
    return args


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from presto.eval.report import comparison_lines
    from presto.eval.runs import check_output_file, compare, load_run, pool
    from presto.runner.outputs import write_json_atomic

    try:
        if args.json is not None:
            check_output_file(args.json, "--json")
        runs = [load_run(p) for p in args.runs]
    except (FileNotFoundError, ValueError) as err:
        return fail(str(err))
    for stat in args.stats:
        if not any(stat in record for run in runs for record in run.chains):
            known = sorted({k for run in runs for r in run.chains for k, v in r.items() if isinstance(v, int | float)})
            return fail(f"--stats {stat}: no chain of the given runs records it (they record {', '.join(known)})")
    warned: set[Path] = set()
    for run in runs:
        note = run.incomplete_note()
        if note and run.path.resolve() not in warned:  # a run given twice is warned about once
            warned.add(run.path.resolve())
            print(f"warning: {note}", file=sys.stderr, flush=True)
    comparisons = []
    for baseline, variant in zip(runs[::2], runs[1::2], strict=True):
        try:
            comparisons.append(
                compare(
                    baseline,
                    variant,
                    stats=args.stats,
                    unit=args.unit,
                    margin_sd=args.margin_sd,
                    level=args.level,
                    allow_different_settings=args.allow_different_settings,
                )
            )
        except ValueError as err:
            return fail(f"{baseline.path} vs {variant.path}: {err}")
    pooled = {s: pool(comparisons, s, margin_sd=args.margin_sd, level=args.level) for s in args.stats}
    lines = comparison_lines(comparisons, pooled if len(comparisons) > 1 else {}, level=args.level, stats=args.stats)
    print("\n".join(lines), flush=True)
    if args.json is not None:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(
                args.json,
                {
                    "pairs": [c.as_dict() for c in comparisons],
                    "pooled": {k: (v.as_dict() if v else None) for k, v in pooled.items()},
                },
            )
        except OSError as err:
            return fail(f"--json {args.json}: cannot write it ({err.strerror or err}); the tables above are complete")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

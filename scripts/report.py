"""One markdown report for a multirun (or any run directories): speed, quality, baselines, figures.

    python scripts/report.py MULTIRUN_DIR                      # writes MULTIRUN_DIR/report.md + figures/
    python scripts/report.py MULTIRUN_DIR SEQUENTIAL_RUN --out report/b.md   # report/b.md + b_figures/

A report named report.md keeps its figures in figures/ beside it, any other (NAME.md) in
NAME_figures/, so reports written into one folder keep their own figures.

Every directory below the arguments that holds a summary.json is a run. PreSTO runs are
compared with the sequential run of the same setting (same sampler, alpha, tau, n, B, K,
prompts, engine, model, dataset) when one is among them: speedup and its decomposition,
and a paired TOST on log-likelihood and confidence (a setting with one prompt has none:
the row says so). Settings whose headings would read alike name the keys that tell them
apart; each row names its run (its directory below the runs' common parent), so runs of
one setting (other seeds, repeats) are told apart; a PreSTO run without a sequential run
of its setting names the keys in which the nearest sequential run differs. Runs that did
not finish every configured chain are listed at the top; a row's figures are over the
chains chains.jsonl holds (peak KV, only summary.json's, is noted where that counts others).

Test-time baselines (sampler=lowtemp|best_of_n|power_smc) get Case Study 8 tables: one per
task (engine, model, dataset, alpha, n; a baseline's unused steps/block_size do not count),
with a row per run, MH runs (sequential and PreSTO) beside the baselines: options (K, B,
N_pf; N; P), answers, call and wall time and model calls per prompt, time relative to
lowtemp, accuracy, n. Runs that did not all run the same prompts are compared over the
prompts they share (a note says so; a run without finished chains is named and left
out of them); a note states the horizons (MH: all n tokens;
baselines: up to n, stopped at EOS). Prints the report's path.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="multirun directory (and any further run directories)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file (default: FIRST_DIR/report.md)")
    parser.add_argument("--no-figures", action="store_true", help="tables only")
    parser.add_argument("--margin-sd", type=float, default=0.2, help="TOST margin in baseline SDs")
    args = parser.parse_args(argv)
    if not 0 < args.margin_sd < math.inf:
        parser.error(f"--margin-sd must be a positive number of baseline SDs, got {args.margin_sd}")
    from presto.eval.report import build_report
    from presto.eval.runs import check_output_file, load_runs

    try:
        if args.out is not None:  # before the runs are read, so the error comes alone
            check_output_file(args.out, "--out")
        runs = load_runs(args.dirs)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = args.out or args.dirs[0] / "report.md"
    title = f"PreSTO report: {args.dirs[0].resolve().name}"
    try:
        written = build_report(runs, out, title=title, figures=not args.no_figures, margin_sd=args.margin_sd)
    except OSError as err:
        print(f"error: cannot write the report {out}: {err.strerror or err} ({err.filename or out})", file=sys.stderr)
        return 2
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

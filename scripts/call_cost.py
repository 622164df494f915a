"""How one model call's time grows with the rows it decodes, on this machine and engine.

    python scripts/call_cost.py                        # embedded default engine, rows 1 4 7 14 28 56 140
    python scripts/call_cost.py --rows 1 20 engine=hf  # Hydra overrides of conf/, in any order

PreSTO trades fewer calls for wider ones, so its speedup is bounded by how flat this
curve is: a call of N_pf requests costs "s/call x" times a one-request call. Each call
here generates ``--tokens`` tokens per row from one cached prompt, with distinct seeds,
once at the proposal temperature alone (sampler.tau, 1/alpha unless set) and once with
MultiTryMH's extra temperatures (sampler.temperatures with sampler=multitry, else its
default 0.25, 0.5, 1), whose statistics the vLLM recorder computes per row. It prints
seconds per call, per decode step and the ratio to the one-row call. Of the config it reads
the engine and model (engine.*, model.*) and the sampler's temperatures (sampler.alpha,
sampler.tau, sampler.temperatures); the prompt is --prompt-tokens synthetic tokens.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 7, 14, 28, 56, 140], help="rows per call")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per row")
    parser.add_argument("--prompt-tokens", type=int, default=200, help="length of the shared prompt")
    from benchmark import fail, split_overrides
    from presto.cli import user_errors

    own, overrides = split_overrides(argv)
    args = parser.parse_args(own)
    if min(args.rows) < 1 or args.tokens < 1 or args.prompt_tokens < 1:
        parser.error("--rows, --tokens and --prompt-tokens must be >= 1")
    try:
        return measure(args, overrides)
    except user_errors() as err:
        return fail(str(err) or type(err).__name__)
    except KeyboardInterrupt:  # each call's line is printed as it is measured: nothing else to keep
        print("\ninterrupted: the lines above are the calls measured", file=sys.stderr)
        return 130


def measure(args: argparse.Namespace, overrides: list[str]) -> int:
    from benchmark import load_config
    from presto.config import validate_sampler
    from presto.runner.run import engine_from_config
    from presto.samplers import build_kernel
    from presto.samplers.multitry import DEFAULT_TEMPERATURES

    _, cfg = load_config(overrides)
    sampler = validate_sampler(cfg)  # before the engine loads: a bad sampler option is one line
    tau = sampler.tau
    # The temperatures a MultiTryMH run would record: its kernel's with sampler=multitry, else the default set.
    temperatures = build_kernel(sampler).temperatures if sampler.name == "multitry" else DEFAULT_TEMPERATURES
    engine = engine_from_config(cfg)
    try:
        timings(engine, args, cfg, tau, temperatures)
    finally:  # also when interrupted: vLLM's engine core is a process of its own
        engine.close()
    return 0


def timings(engine, args: argparse.Namespace, cfg, tau: float, temperatures: tuple[float, ...]) -> None:
    """Print one line per (temperatures, rows) call, as each is measured."""
    from presto.engines.base import SuffixRequest
    from presto.eval.machine_load import busy_warning, cpu_snapshot, others_cpu_s, window_s

    # Token ids 100, 101, ...: ordinary tokens of a real vocabulary (a toy table's wraps around).
    vocab = getattr(engine, "vocab_size", None) or 100 + args.prompt_tokens
    prompt = tuple((100 + i) % vocab for i in range(args.prompt_tokens))
    # Warm-up of the measured shape; the prompt's KV is cached from here on.
    engine.generate([SuffixRequest(prompt, args.tokens, tau, 0, extra) for extra in ((), temperatures)])
    print(f"engine={cfg.engine.name} model={cfg.model.path} tokens/row={args.tokens} prompt={args.prompt_tokens}")
    reference = "x 1 row" if args.rows[0] == 1 else f"x {args.rows[0]} rows"  # ratios are to the first call
    print(f"{'temperatures':>12} {'rows':>5} {'call s':>8} {'ms/step':>8} {reference:>10}")
    seed = 1
    before = cpu_snapshot()
    for extra in ((), temperatures):
        single = None
        for rows in args.rows:
            requests = [SuffixRequest(prompt, args.tokens, tau, seed + i, extra) for i in range(rows)]
            seed += rows
            start = time.perf_counter()
            engine.generate(requests)
            seconds = time.perf_counter() - start
            single = single or seconds
            label = f"{tau:g}" if not extra else f"{tau:g}+" + ",".join(f"{t:g}" for t in extra)
            print(
                f"{label:>12} {rows:>5} {seconds:>8.3f} {1000 * seconds / args.tokens:>8.1f} {seconds / single:>9.2f}x",
                flush=True,
            )
    after = cpu_snapshot()
    warning = busy_warning(others_cpu_s(before, after), window_s(before, after), "these calls")
    if warning is not None:  # the ratios of a busy machine are not its idle curve
        print(warning, file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

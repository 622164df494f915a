"""Write a random toy Markov table for the exact toy engine (engine=toy).

    python scripts/toy_table.py table.json [--vocab 6] [--seed 0] [--scale 1.5]
    python src/main.py engine=toy model=toy engine.table=table.json dataset=toy

The table is {"bos_logits": [V], "logits": [[V] x V]} (presto/engines/toy.py): the logits of
the first token and of the token after each token, standard normal times ``--scale``.
Every probability of such a model is known in closed form, which is what the law tests use.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))

MAX_VOCAB = 4096
"""A V x V table is written as JSON text: 4096 tokens are 16.8M logits, about 350 MB, already far
past what closed-form checks need; 100000 would try to allocate 75 GB before writing anything."""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--vocab", type=int, default=6, help=f"tokens V (default 6, at most {MAX_VOCAB})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the logits, >= 0 (default 0)")
    parser.add_argument("--scale", type=float, default=1.5, help="logit scale: larger is sharper (default 1.5)")
    args = parser.parse_args(argv)

    from presto.engines.toy import ToyTableError, write_random_toy_table

    if args.seed < 0:  # numpy's seeding would fail with a traceback
        print(f"error: --seed must be >= 0, got {args.seed}", file=sys.stderr)
        return 2
    if args.vocab > MAX_VOCAB:
        print(f"error: --vocab {args.vocab}: a toy table has at most {MAX_VOCAB} tokens", file=sys.stderr)
        return 2
    if args.out.is_dir():
        print(f"error: {args.out} is a directory; name the table's file", file=sys.stderr)
        return 2
    if not args.out.parent.is_dir():
        print(f"error: {args.out}: no folder {args.out.parent}", file=sys.stderr)
        return 2
    try:
        path = write_random_toy_table(args.out, args.vocab, args.seed, args.scale)
    except ToyTableError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # unwritable, a dangling link, a full disk: one line, not a traceback
        print(f"error: cannot write {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"toy table with {args.vocab} tokens written to {path}; use it with engine=toy model=toy engine.table={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Profile one futoin_anyio scenario with cProfile and print the top functions.

From the repository root::

    python -m benchmarks.profile seq --backend trio -n 200000 --top 25
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

if __package__ in (None, ""):  # ``python benchmarks/profile.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from benchmarks._common import SCENARIOS, SIZES
from benchmarks._worker import scenarios_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--impl", default="futoin", choices=("futoin", "plain"))
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("-n", type=int, help="size (default: the quick-mode size)")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (default: tottime)")
    args = parser.parse_args(argv)

    func = scenarios_of(args.impl)[args.scenario]
    n = args.n or SIZES["quick"][args.scenario][-1]
    profiler = cProfile.Profile()
    profiler.enable()
    m = anyio.run(func, n, backend=args.backend)
    profiler.disable()
    print(f"{args.impl} {args.scenario} n={n} on {args.backend}: {m.value:.6g} (under cProfile)")
    pstats.Stats(profiler).strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Profile one futoin_anyio scenario with cProfile and print the top functions.

From the repository root::

    python -m benchmarks.profile seq --backend trio -n 200000 --top 25
    python -m benchmarks.profile tasks --backend trio --top 15     # a native-tier row

Scenarios: the FTN12 tier's and the AnyIO-native tier's rows (``benchmarks.native``);
``--impl plain`` profiles the plain-AnyIO side (``plain_cp``: row ``tasks`` only;
``plain_scope``: rows ``async_tasks`` and ``mutex_tasks``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
from pathlib import Path

if __package__ in (None, ""):  # ``python benchmarks/profile.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from benchmarks import _native
from benchmarks._common import SCENARIOS, SIZES, Scenario
from benchmarks._worker import scenarios_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("scenario", choices=(*SCENARIOS, *_native.ROWS))
    parser.add_argument(
        "--impl", default="futoin", choices=("futoin", "plain", "plain_cp", "plain_scope")
    )
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("-n", type=int, help="size (default: the quick-mode size)")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (default: tottime)")
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="disable the cyclic GC while profiling: its collections otherwise count as own"
        " time of whatever function allocated when one started",
    )
    args = parser.parse_args(argv)

    func: Scenario
    if args.scenario in _native.SIDES:
        side = "ours" if args.impl == "futoin" else args.impl
        if side not in _native.SIDES[args.scenario]:
            parser.error(f"{args.scenario} has no {side!r} side")
        func = _native.SIDES[args.scenario][side]
        n = args.n or _native.SIZES["full"][args.scenario]
    elif args.impl in ("plain_cp", "plain_scope"):
        parser.error(f"--impl {args.impl}: a side of native rows only")
    else:
        func = scenarios_of(args.impl)[args.scenario]
        n = args.n or SIZES["quick"][args.scenario][-1]
    tiny = _native.SIZES["tiny"].get(args.scenario) or SIZES["tiny"][args.scenario][0]
    anyio.run(func, tiny, backend=args.backend)  # unprofiled: lazy imports, first-use caches
    profiler = cProfile.Profile()
    if args.no_gc:
        gc.disable()
    profiler.enable()
    try:
        m = anyio.run(func, n, backend=args.backend)
    finally:
        profiler.disable()
        gc.enable()
    print(f"{args.impl} {args.scenario} n={n} on {args.backend}: {m.value:.6g} (under cProfile)")
    pstats.Stats(profiler).strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

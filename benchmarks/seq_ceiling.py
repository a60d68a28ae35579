"""The ceiling of the ``seq`` scenario: how fast CPython can call its step body at all.

    python -m benchmarks.seq_ceiling                 # 3 rounds of 1,000,000, beside the JS run
    python -m benchmarks.seq_ceiling --no-js --rounds 5

``seq`` is ``repeat(n, body)`` with a body that counts (``body(asi, i)``). Whatever the engine,
each step calls that Python function once with a step object and the iteration's ``int``. The
*bare call* row does only that, from C (``map()`` over ``itertools.repeat`` and ``range``,
drained by a ``deque`` of length 0): no step object, no engine, no event loop. An engine can
only be slower. The JS reference's ``seq`` runs in the same rounds (``node`` and
``futoin-asyncsteps`` as in ``benchmarks.run``), and so does our own ``seq`` on each backend,
each in its own process; each row keeps its best round. The last column, each row over the
JS figure, is what a ratio against the reference can be at most (bare call) and is (ours).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

N = 1_000_000


def bare_call(n: int) -> float:
    """Steps per second of ``body(None, i)`` called from C for ``i`` in ``range(n)``."""
    count = 0

    def body(asi: Any, i: int) -> None:
        nonlocal count
        count += 1

    t0 = time.perf_counter()
    collections.deque(map(body, itertools.repeat(None, n), range(n)), 0)
    dt = time.perf_counter() - t0
    if count != n:
        raise AssertionError(f"bare call: {count} != {n}")
    return n / dt


def _ours(backend: str, n: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks._worker",
         json.dumps({"impl": "futoin", "backend": backend, "scenarios": {"seq": [n]},
                     "repeat": 1})],
        capture_output=True, text=True, check=True, cwd=ROOT)
    return float(json.loads(out.stdout.splitlines()[-1])["value"])


def _bare(n: int) -> float:
    out = subprocess.run([sys.executable, "-c",
                          f"from benchmarks.seq_ceiling import bare_call; print(bare_call({n}))"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return float(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.seq_ceiling",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", type=int, default=N)
    parser.add_argument("--no-js", action="store_true", help="leave the JS reference out")
    parser.add_argument("--js-dir", help="a node_modules with futoin-asyncsteps (else npm)")
    args = parser.parse_args(argv)

    from benchmarks import run
    from futoin_anyio import COMPILED

    modules = None
    if not args.no_js:
        modules, _version, why = run.install_js(args.js_dir)
        if modules is None:
            print(f"JS reference n/a: {why}", file=sys.stderr)
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        got = {"bare call (no engine)": _bare(args.n),
               "futoin_anyio asyncio": _ours("asyncio", args.n),
               "futoin_anyio trio": _ours("trio", args.n)}
        if modules is not None:
            records = run.run_js(modules, {"seq": [args.n]}, 1, 5.0, False, False)
            got["JS futoin-asyncsteps"] = float(records[0]["value"])
        for key, value in got.items():
            best[key] = max(best.get(key, 0.0), value)
    js = best.get("JS futoin-asyncsteps")
    engine = "compiled" if COMPILED else "pure Python"
    print(f"seq, {args.n:,} steps, best of {args.rounds} rounds (CPython "
          f"{sys.version.split()[0]}, futoin_anyio engine: {engine})")
    print(f"{'':26} {'M steps/s':>10} {'ns/step':>8} {'/ JS':>6}")
    for key, value in best.items():
        ratio = f"{value / js:6.2f}" if js else "   n/a"
        print(f"{key:26} {value / 1e6:10.2f} {1e9 / value:8.0f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

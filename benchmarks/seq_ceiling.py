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

Both engines yield to their event loop once per burst of 100 steps, the reference with
``setImmediate()``, ours with the backend's own checkpoint (``asyncio.sleep(0)``,
``trio.lowlevel.checkpoint()``): a turn of the loop that no engine code can make cheaper. An
iteration of ``repeat()`` is one step of ours and two of the reference's (the body and the
loop's continuation), so the reference yields every 50 iterations, ours every 100. The second
table times one such turn alone, in a fresh process per backend (and node's ``setImmediate()``
turn, with the JS reference), its share of an iteration, and each engine's time per iteration
without that share: the step itself.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

N = 1_000_000
#: ``repeat()`` iterations between two turns of the event loop: ours (a burst of 100 steps, one
#: per iteration) and the reference's (``EXEC_BURST``, 100 steps, two per iteration).
BURST = {"asyncio": 100, "trio": 100, "JS": 50}


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


def _in_fresh_process(function: str, *args: object) -> float:
    """What ``function(*args)`` of this module returns, called in a process of its own."""
    call = f"{function}({', '.join(map(repr, args))})"
    out = subprocess.run([sys.executable, "-c",
                          f"from benchmarks.seq_ceiling import {function}; print({call})"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return float(out.stdout)


async def _turns(n: int, backend: str) -> float:
    if backend == "trio":
        import trio

        turn: Any = trio.lowlevel.checkpoint
    else:
        import asyncio

        def turn() -> Any:
            return asyncio.sleep(0)
    for _ in range(1000):  # warm-up
        await turn()
    t0 = time.perf_counter()
    for _ in range(n):
        await turn()
    return (time.perf_counter() - t0) / n


def loop_turn(backend: str, n: int) -> float:
    """Seconds per turn of ``backend``'s event loop, as the engine's driver yields for one."""
    import anyio

    seconds: float = anyio.run(_turns, n, backend, backend=backend)
    return seconds


#: One ``setImmediate()`` turn of node's event loop after another, ``N`` times: seconds each.
_JS_TURN = """
const n = Number(process.argv[1]);
let i = 0;
let t0;
const next = () => {
    if (++i < n) { setImmediate(next); return; }
    console.log(Number(process.hrtime.bigint() - t0) / 1e9 / n);
};
for (let w = 0; w < 1000; w++) setImmediate(() => {});
setImmediate(() => { t0 = process.hrtime.bigint(); setImmediate(next); });
"""


def _js_turn(n: int) -> float | None:
    node = shutil.which("node")
    if node is None:
        return None
    out = subprocess.run([node, "-e", _JS_TURN, str(n)], capture_output=True, text=True,
                         check=True)
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
    turns: dict[str, float] = {}  # seconds per turn, the best round's
    turn_n = max(args.n // BURST["JS"], 1_000)
    for _ in range(args.rounds):
        got = {"bare call (no engine)": _in_fresh_process("bare_call", args.n),
               "futoin_anyio asyncio": _ours("asyncio", args.n),
               "futoin_anyio trio": _ours("trio", args.n)}
        took = {backend: _in_fresh_process("loop_turn", backend, turn_n)
                for backend in ("asyncio", "trio")}
        if modules is not None:
            records = run.run_js(modules, {"seq": [args.n]}, 1, 5.0, False, False)
            got["JS futoin-asyncsteps"] = float(records[0]["value"])
            js_turn = _js_turn(turn_n)
            if js_turn is not None:
                took["JS"] = js_turn
        for key, value in got.items():
            best[key] = max(best.get(key, 0.0), value)
        for key, seconds in took.items():
            turns[key] = min(turns.get(key, math.inf), seconds)
    js = best.get("JS futoin-asyncsteps")
    engine = "compiled" if COMPILED else "pure Python"
    print(f"seq, {args.n:,} steps, best of {args.rounds} rounds (CPython "
          f"{sys.version.split()[0]}, futoin_anyio engine: {engine})")
    print(f"{'':26} {'M steps/s':>10} {'ns/step':>8} {'/ JS':>6}")
    for key, value in best.items():
        ratio = f"{value / js:6.2f}" if js else "   n/a"
        print(f"{key:26} {value / 1e6:10.2f} {1e9 / value:8.0f} {ratio}")
    print()
    print("A turn of the event loop (ours every 100 iterations, the reference's every 50):")
    print(f"{'':26} {'ns/turn':>10} {'ns/step':>8}")
    for key, seconds in turns.items():
        print(f"{key:26} {seconds * 1e9:10.0f} {seconds * 1e9 / BURST[key]:8.1f}")
    js_less = None if js is None or "JS" not in turns else 1 / js - turns["JS"] / BURST["JS"]
    print(f"{'':26} {'M steps/s':>10} {'ns/step':>8} {'/ JS':>6}")
    for backend in ("asyncio", "trio"):
        step_s = 1 / best[f"futoin_anyio {backend}"] - turns[backend] / BURST[backend]
        ratio = f"{js_less / step_s:6.2f}" if js_less else "   n/a"
        print(f"{backend + ' less its turns':26} {1e-6 / step_s:10.2f} {step_s * 1e9:8.0f} "
              f"{ratio}")
    if js_less is not None:
        print(f"{'JS less its turns':26} {1e-6 / js_less:10.2f} {js_less * 1e9:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

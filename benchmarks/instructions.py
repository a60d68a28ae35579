"""Instructions per item of the FTN12, native and gateway scenarios, counted by callgrind.

Wall time on a shared machine moves by several per cent from run to run; instruction counts of
the same program do not. Each scenario runs twice under ``valgrind --tool=callgrind``, at a
small and a large size, in a fresh process with a fixed hash seed; the difference of the two
totals divided by the difference of the sizes is the cost of one item (a step, a root, a
branch…), start-up and warm-up cancelled out. From the repository root::

    python -m benchmarks.instructions                       # every scenario, both backends
    python -m benchmarks.instructions --only seq,tasks --backend trio --json /tmp/after.json
    python -m benchmarks.instructions --compare /tmp/before.json /tmp/after.json
    python -m benchmarks.instructions --only mutex --gc-at-end   # see below

The cyclic garbage collector runs when its generation counters say so, not per item: whether
one more collection of an older generation falls between the small and the large size moves a
figure by several per cent (up to 15 % for the mutex scenario over some pairs of sizes), so two
trees that allocate alike can differ by a collection. ``--gc-at-end`` turns the automatic
collections off and makes one full collection at the end of each run: what items leave for the
collector is still paid for, in proportion, without the timing of generational collections.
Compare like with like (both figures with it, or both without).

The gateway scenarios count one request of ``benchmarks.gateway``'s front (``gateway_ok``,
``gateway_retried``: backend ``b`` answers the retry code to the first call, and
``gateway_rejected``: every request refused by the admission), run in process with its
backends in memory (``benchmarks.account``); ``--side plain`` counts the plain twin. On trio
they run in virtual time (``MockClock``) with trio's random order of each batch of ready tasks
seeded: otherwise the same build's count moves by about 1 % between runs.

The process's memory layout moves some counts too: ``parallel`` on asyncio went 18,818 ->
19,360 per item in one tree with nothing changed but ``PYTHONPATH`` set or not (what
start-up allocates shifts every object's address, and what depends on addresses, such as
identity hashes, with it). To compare two trees, put them at paths of the same length and
run each with ``PYTHONPATH`` set to its own root.

``--cycles`` runs each process under ``valgrind --tool=cachegrind`` with its cache and branch
simulations instead, and reports, per item, the first-level instruction and data cache misses,
the mispredicted branches and an estimate of the cycles: KCachegrind's cycle estimation,
``CEst = Ir + 10 Bm + 10 L1m + 100 LLm`` (instructions, mispredicted branches, first-level
misses, last-level misses). Compiled code that runs once per item is fetched cold: it misses
the instruction cache far more often per instruction than the interpreter's loop, so a ratio of
instructions understates the ratio of CPU time, and the estimate follows the timed ratio more
closely (``docs/performance.rst``, "Instructions and cycles"). The simulated caches are fixed,
not the host's: 32 KiB, 8-way first-level caches and an 8 MiB, 16-way last level, 64-byte lines.
With ``--json``, the estimate is the figure written.

Needs ``valgrind`` (Debian package). A run of everything takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import astuple, dataclass
from pathlib import Path

if __package__ in (None, ""):  # ``python benchmarks/instructions.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: Scenario -> (tier, small size, large size). Sizes keep one valgrind run under a minute.
PLAN: dict[str, tuple[str, int, int]] = {
    "seq": ("ftn12", 2_000, 22_000),
    "chain": ("ftn12", 1_000, 11_000),
    "instances": ("ftn12", 500, 5_500),
    "parallel": ("ftn12", 500, 5_500),
    "mutex": ("ftn12", 500, 5_500),
    "errors": ("ftn12", 1_000, 11_000),
    "async_loop": ("native", 500, 5_500),
    "async_tasks": ("native", 300, 3_300),
    "tasks": ("native", 500, 5_500),
    "mutex_tasks": ("native", 300, 3_300),
    "gateway_ok": ("gateway", 500, 1_500),
    "gateway_retried": ("gateway", 500, 1_500),
    "gateway_rejected": ("gateway", 1_000, 3_000),
}
#: The sides a gateway scenario has (``benchmarks.account``'s in-memory front).
GATEWAY_SIDES = ("ours", "plain")

_CHILD = """
import sys, anyio, gc
if sys.argv[5] == "1":
    gc.disable()
from benchmarks._worker import scenarios_of
from benchmarks import _native
name, side, backend, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if name.startswith("gateway_"):
    from benchmarks.account import run_requests
    options = {}
    if backend == "trio":
        import trio.testing
        import trio._core._run
        # Virtual time: the timeout alarms' task wakes at stale deadlines as often as the
        # run's real time allows, which callgrind's slowness would set. And one order of every
        # batch of ready tasks: trio reverses a batch at random (its module's own Random, which
        # trio's Hypothesis plugin seeds the same way for reproducible tests).
        options = {"clock": trio.testing.MockClock()}
        trio._core._run._r.seed(0)
    impl = "futoin" if side == "ours" else side
    anyio.run(run_requests, impl, backend, n, name[len("gateway_"):], backend=backend,
              backend_options=options)
    sys.exit(0)
if name in _native.SIDES:
    func = _native.SIDES[name][side]
else:
    func = scenarios_of("futoin" if side == "ours" else side)[name]
anyio.run(func, n, backend=backend)
if sys.argv[5] == "1":
    gc.collect()
"""

_TOTAL = re.compile(r"Collected : (\d+)")

#: The simulated caches of ``--cycles`` (size, associativity, line size), fixed so that a
#: figure does not depend on the host's caches.
_CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64")


@dataclass(frozen=True)
class Cost:
    """What one process (or, as a difference, one item) cost under ``--cycles``."""

    instructions: float
    #: First-level misses: instruction fetches, data reads and writes.
    i1_misses: float
    d1_misses: float
    #: Last-level misses, all kinds.
    ll_misses: float
    #: Mispredicted branches: conditional and indirect.
    mispredicted: float

    @property
    def cycles(self) -> float:
        """KCachegrind's cycle estimation: ``Ir + 10 Bm + 10 L1m + 100 LLm``."""
        return (self.instructions + 10 * self.mispredicted
                + 10 * (self.i1_misses + self.d1_misses) + 100 * self.ll_misses)

    def __sub__(self, other: Cost) -> Cost:
        return Cost(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __truediv__(self, n: float) -> Cost:
        return Cost(*(a / n for a in astuple(self)))


def _run(name: str, side: str, backend: str, n: int, gc_at_end: bool,
         tool: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    cmd = ["valgrind", *tool, sys.executable, "-c", _CHILD, name, side, backend, str(n),
           "1" if gc_at_end else "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parent.parent, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} n={n} on {backend} failed:\n{proc.stderr[-2000:]}")
    return proc


def count(name: str, side: str, backend: str, n: int, gc_at_end: bool = False) -> int:
    """Instructions of one process running ``name`` at size ``n``."""
    proc = _run(name, side, backend, n, gc_at_end,
                ["--tool=callgrind", "--callgrind-out-file=/dev/null"])
    found = _TOTAL.search(proc.stderr)
    if found is None:
        raise RuntimeError(f"{name} n={n} on {backend}: no total in\n{proc.stderr[-2000:]}")
    return int(found.group(1))


def simulate(name: str, side: str, backend: str, n: int, gc_at_end: bool = False) -> Cost:
    """The cache and branch simulation of one process running ``name`` at size ``n``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cachegrind.out"
        _run(name, side, backend, n, gc_at_end,
             ["--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes", *_CACHES,
              f"--cachegrind-out-file={out}"])
        return cost_of(out.read_text())


def cost_of(cachegrind_out: str) -> Cost:
    """The totals of a cachegrind output file (its ``events:`` and ``summary:`` lines) of a run
    with ``--cache-sim=yes --branch-sim=yes``."""
    lines = cachegrind_out.splitlines()
    try:
        events = next(line.split()[1:] for line in lines if line.startswith("events:"))
        totals = next(line.split()[1:] for line in lines if line.startswith("summary:"))
        got = dict(zip(events, map(int, totals), strict=True))
        return Cost(instructions=got["Ir"], i1_misses=got["I1mr"],
                    d1_misses=got["D1mr"] + got["D1mw"],
                    ll_misses=got["ILmr"] + got["DLmr"] + got["DLmw"],
                    mispredicted=got["Bcm"] + got["Bim"])
    except (StopIteration, KeyError, ValueError) as exc:
        raise ValueError("not the output of cachegrind with --cache-sim=yes "
                         f"--branch-sim=yes ({type(exc).__name__}: {exc})") from None


def per_item(name: str, side: str, backend: str, gc_at_end: bool = False) -> float:
    _, small, large = PLAN[name]
    return (count(name, side, backend, large, gc_at_end)
            - count(name, side, backend, small, gc_at_end)) / (large - small)


def cost_per_item(name: str, side: str, backend: str, gc_at_end: bool = False) -> Cost:
    _, small, large = PLAN[name]
    return (simulate(name, side, backend, large, gc_at_end)
            - simulate(name, side, backend, small, gc_at_end)) / (large - small)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"comma-separated scenarios (default: {','.join(PLAN)})")
    parser.add_argument("--backend", choices=("asyncio", "trio"),
                        help="one backend (default: both)")
    parser.add_argument("--side", default="ours",
                        help="ours (default), plain, plain_cp or plain_scope (native rows)")
    parser.add_argument("--gc-at-end", action="store_true",
                        help="no automatic collections; one full collection at the end of a run")
    parser.add_argument("--cycles", action="store_true",
                        help="simulate caches and branches (cachegrind): misses and estimated "
                             "cycles per item")
    parser.add_argument("--json", help="write {scenario: {backend: instructions/item}} here "
                                       "(estimated cycles/item with --cycles)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="print the ratio of two --json files and exit")
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        print("| scenario | backend | before | after | after/before |\n|---|---|---|---|---|")
        for name, cells in after.items():
            for backend, value in cells.items():
                old = before.get(name, {}).get(backend)
                ratio = f"{value / old:.3f}" if old else "n/a"
                print(f"| {name} | {backend} | {old or 'n/a'} | {value:.0f} | {ratio} |")
        return 0
    names = args.only.split(",") if args.only else list(PLAN)
    unknown = [n for n in names if n not in PLAN]
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)}")
    if args.side not in GATEWAY_SIDES and any(PLAN[n][0] == "gateway" for n in names):
        parser.error(f"--side {args.side}: the gateway scenarios have the sides "
                     f"{', '.join(GATEWAY_SIDES)}")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    backends = [args.backend] if args.backend else ["asyncio", "trio"]
    engine = subprocess.run(
        [sys.executable, "-c", "import futoin_anyio; print(futoin_anyio.COMPILED)"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent)
    print(f"futoin_anyio engine: {'compiled' if engine.stdout.strip() == 'True' else 'pure'}",
          flush=True)
    result: dict[str, dict[str, float]] = {}
    for name in names:
        for backend in backends:
            if args.cycles:
                cost = cost_per_item(name, args.side, backend, args.gc_at_end)
                value = cost.cycles
                print(f"{name:16} {backend:8} {cost.instructions:12,.0f} instructions, "
                      f"{cost.i1_misses:9,.0f} I1 misses, {cost.d1_misses:9,.0f} D1 misses, "
                      f"{cost.mispredicted:9,.0f} mispredicted, {value:12,.0f} est. cycles/item",
                      flush=True)
            else:
                value = per_item(name, args.side, backend, args.gc_at_end)
                print(f"{name:16} {backend:8} {value:12,.0f} instructions/item", flush=True)
            result.setdefault(name, {})[backend] = round(value)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

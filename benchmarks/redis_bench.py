"""Limits across processes: futoin_anyio.redis against redis-py's ``Lock`` and ``limits``.

    python -m benchmarks.redis_bench            # 10 s per run, the issue's figures
    python -m benchmarks.redis_bench --quick    # 1.5 s per run: the harness still works

Needs ``redis-server`` on PATH and the ``bench`` extra (coredis, redis-py, limits). Starts its
own server on 127.0.0.1 and a free port. Each run is 4 OS processes on one name:

- *mutex*: each process loops "enter, leave" on a shared mutex of 1 (ours: ``RedisMutex``,
  two asyncio and two trio processes; redis-py: ``redis.asyncio`` ``Lock``, with its default
  ``sleep=0.1`` and tuned to ``sleep=0.001``). Every entry and exit is stamped with the wall
  clock (one host, one clock); the table gives hand-offs per second, the p50/p99 latency from
  a release to the next holder's entry (when someone waited), and overlapping holders (the
  invariant: must be 0).
- *limiter*: each process runs 8 tasks entering as fast as they can through a shared rate of
  1000 per second (ours: ``RedisLimiter(concurrent=32, rate=50, period_ms=50)``, waiting in
  its queue; ``limits``: its moving window of 1000 per second on the same Redis, a refused hit
  retried after 1 ms, the usual way to wait with it). The table gives the rate held (entries
  per second between the first and the last entry), rejected or refused entries, and the
  worst number of entries seen in any 1 s sliding window.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from itertools import pairwise
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RATE = int(os.environ.get("FUTOIN_BENCH_RATE", "500"))  # entries per second, limiter runs
TASKS = 8  # tasks per process in the limiter runs


# -- workers (one OS process each) -------------------------------------------------------------


async def _ours_mutex(port: int, name: str, start_at: float, duration: float) -> list[Any]:
    import anyio
    import coredis

    from futoin_anyio.redis import RedisMutex

    stamps: list[tuple[int, int]] = []
    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        mutex = RedisMutex(client, name)
        await anyio.sleep(max(0.0, start_at - time.time()))
        end = time.time() + duration
        while time.time() < end:
            async with mutex:
                t0 = time.time_ns()
                t1 = time.time_ns()
            stamps.append((t0, t1))
    return stamps


async def _redispy_mutex(port: int, name: str, start_at: float, duration: float,
                         sleep: float) -> list[Any]:
    import asyncio

    import redis.asyncio as aioredis

    stamps: list[tuple[int, int]] = []
    client = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        lock = client.lock(name, timeout=30, sleep=sleep)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        end = time.time() + duration
        while time.time() < end:
            await lock.acquire()
            t0 = time.time_ns()
            t1 = time.time_ns()
            await lock.release()
            stamps.append((t0, t1))
    finally:
        await client.aclose()
    return stamps


async def _ours_limiter(port: int, name: str, start_at: float, duration: float) -> list[Any]:
    import anyio
    import coredis

    from futoin_anyio import FutoInError
    from futoin_anyio.redis import RedisLimiter

    stamps: list[int] = []
    rejected = 0
    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        lim = RedisLimiter(client, name, concurrent=32, max_queue=None, rate=RATE // 20,
                           period_ms=50, burst=None)
        await anyio.sleep(max(0.0, start_at - time.time()))
        end = time.time() + duration

        async def task() -> None:
            nonlocal rejected
            while time.time() < end:
                try:
                    async with lim:
                        stamps.append(time.time_ns())
                except FutoInError:
                    rejected += 1

        async with anyio.create_task_group() as tg:
            for _ in range(TASKS):
                tg.start_soon(task)
    return [stamps, rejected]


async def _limits_limiter(port: int, name: str, start_at: float, duration: float) -> list[Any]:
    import asyncio

    from limits import RateLimitItemPerSecond
    from limits.aio.storage import RedisStorage
    from limits.aio.strategies import MovingWindowRateLimiter

    storage = RedisStorage(f"async+redis://127.0.0.1:{port}", implementation="redispy")
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerSecond(RATE)
    stamps: list[int] = []
    refused = 0
    await asyncio.sleep(max(0.0, start_at - time.time()))
    end = time.time() + duration

    async def task() -> None:
        nonlocal refused
        while time.time() < end:
            if await limiter.hit(item, name):
                stamps.append(time.time_ns())
            else:
                refused += 1
                await asyncio.sleep(0.001)

    await asyncio.gather(*(task() for _ in range(TASKS)))
    return [stamps, refused]


def _worker(argv: list[str]) -> None:
    impl, backend, port, name, start_at, duration = argv
    args = (int(port), name, float(start_at), float(duration))
    import anyio

    if impl == "ours-mutex":
        result = anyio.run(_ours_mutex, *args, backend=backend)
    elif impl == "redispy-mutex":
        result = anyio.run(_redispy_mutex, *args, 0.1, backend="asyncio")
    elif impl == "redispy-mutex-1ms":
        result = anyio.run(_redispy_mutex, *args, 0.001, backend="asyncio")
    elif impl == "ours-limiter":
        result = anyio.run(_ours_limiter, *args, backend=backend)
    else:
        result = anyio.run(_limits_limiter, *args, backend="asyncio")
    json.dump(result, sys.stdout)


# -- the runs and their figures ----------------------------------------------------------------


def _run(port: int, impl: str, backends: list[str], duration: float) -> list[Any]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    start_at = time.time() + 2.0  # every process imported and connected by then
    procs = [subprocess.Popen(
        [sys.executable, "-m", "benchmarks.redis_bench", "--worker", impl, b, str(port), name,
         repr(start_at), repr(duration)], cwd=ROOT, stdout=subprocess.PIPE)
        for b in backends]
    out = []
    for p in procs:
        data, _ = p.communicate(timeout=duration + 120)
        if p.returncode:
            raise RuntimeError(f"{impl} worker failed ({p.returncode})")
        out.append(json.loads(data))
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def mutex_figures(results: list[list[list[int]]]) -> dict[str, Any]:
    stamps = sorted((t0, t1, w) for w, r in enumerate(results) for t0, t1 in r)
    overlaps = sum(1 for a, b in pairwise(stamps) if b[0] < a[1])
    # Release-to-entry: the next holder is another process (it waited meanwhile).
    gaps = [(b[0] - a[1]) / 1e6 for a, b in pairwise(stamps) if a[2] != b[2]]
    span = (stamps[-1][1] - stamps[0][0]) / 1e9 if stamps else 0.0
    return {"entries": len(stamps), "per_s": len(stamps) / span if span else 0.0,
            "handoffs_per_s": len(gaps) / span if span else 0.0,
            "p50_ms": _pct(gaps, 0.50), "p99_ms": _pct(gaps, 0.99), "overlaps": overlaps}


def limiter_figures(results: list[list[Any]]) -> dict[str, Any]:
    stamps = sorted(t for r in results for t in r[0])
    rejected = sum(r[1] for r in results)
    span = (stamps[-1] - stamps[0]) / 1e9 if len(stamps) > 1 else 0.0
    worst = 0
    j = 0
    for i, t in enumerate(stamps):  # the most entries in any 1 s window
        while stamps[j] <= t - 1_000_000_000:
            j += 1
        worst = max(worst, i - j + 1)
    rate = (len(stamps) - 1) / span if span else 0.0
    return {"entries": len(stamps), "rate": rate, "error_pct": 100.0 * (rate - RATE) / RATE,
            "rejected": rejected, "worst_1s": worst}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        _worker(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1.5 s per run")
    parser.add_argument("--duration", type=float, help="seconds per run (default 10)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    duration = args.duration or (1.5 if args.quick else 10.0)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from redis_support.server import RedisServer

    server = RedisServer()
    figures: dict[str, Any] = {}
    try:
        mixed = ["asyncio", "trio", "asyncio", "trio"]
        four = ["asyncio"] * 4
        figures["RedisMutex(1)"] = mutex_figures(_run(server.port, "ours-mutex", mixed,
                                                      duration))
        figures["redis-py Lock (sleep=0.1)"] = mutex_figures(
            _run(server.port, "redispy-mutex", four, duration))
        figures["redis-py Lock (sleep=0.001)"] = mutex_figures(
            _run(server.port, "redispy-mutex-1ms", four, duration))
        figures["RedisLimiter"] = limiter_figures(_run(server.port, "ours-limiter", mixed,
                                                       duration))
        figures["limits moving window"] = limiter_figures(
            _run(server.port, "limits-limiter", four, duration))
    finally:
        server.close()

    print(f"Mutex hand-offs, 4 processes, {duration:g} s each run")
    print("(a hand-off: the next holder is another process, which waited; p50/p99: from that")
    print(" release to that entry)")
    print(f"{'':30} {'entries':>8} {'per s':>9} {'handoff/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'overlaps':>8}")
    for key in ("RedisMutex(1)", "redis-py Lock (sleep=0.1)", "redis-py Lock (sleep=0.001)"):
        f = figures[key]
        print(f"{key:30} {f['entries']:8d} {f['per_s']:9.0f} {f['handoffs_per_s']:9.0f} "
              f"{f['p50_ms']:8.2f} {f['p99_ms']:8.2f} {f['overlaps']:8d}")
    ours, base = figures["RedisMutex(1)"], figures["redis-py Lock (sleep=0.1)"]
    if base["per_s"] and base["handoffs_per_s"]:
        print(f"RedisMutex / redis-py Lock (default): {ours['per_s'] / base['per_s']:.2f}x "
              f"acquisitions/s, {ours['handoffs_per_s'] / base['handoffs_per_s']:.1f}x "
              "hand-offs/s")
    print(f"\nRate limit of {RATE}/s, 4 processes x {TASKS} tasks, {duration:g} s each run")
    print(f"{'':30} {'entries':>8} {'rate/s':>9} {'error %':>8} {'rejected':>9} {'max/1s':>7}")
    for key in ("RedisLimiter", "limits moving window"):
        f = figures[key]
        print(f"{key:30} {f['entries']:8d} {f['rate']:9.1f} {f['error_pct']:8.2f} "
              f"{f['rejected']:9d} {f['worst_1s']:7d}")
    if args.json:
        with open(args.json, "w") as fp:
            json.dump(figures, fp, indent=1)
    bad = ours["overlaps"] or figures["RedisLimiter"]["rejected"] or \
        figures["RedisLimiter"]["worst_1s"] > RATE + RATE // 20
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

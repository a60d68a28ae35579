"""Limits across processes: futoin_anyio.redis against redis-py's ``Lock`` and ``limits``.

    python -m benchmarks.redis_bench                 # 10 s per run, the issue's figures
    python -m benchmarks.redis_bench --quick         # 0.5 s per run: the harness still works
    python -m benchmarks.redis_bench --only mutex    # mutex runs only (or: limiter)

Needs ``redis-server`` on PATH and the ``bench`` extra (coredis, redis-py, limits). Starts its
own server on 127.0.0.1 and a free port. Each run is 4 OS processes on one name; they connect,
warm up (a first entry, or one per task, without timing: scripts loaded, connections open), say
they are ready, and start together when every one is.

- *mutex*: each process loops "acquire, tiny work, release" on a shared mutex of 1 (ours:
  ``RedisMutex``, two asyncio and two trio processes; redis-py: ``redis.asyncio`` ``Lock``,
  with its default ``sleep=0.1`` and tuned to ``sleep=0.001``). Every entry and exit is stamped
  with the wall clock (one host, one clock). The table gives acquisitions per second across
  the 4 processes, the hand-offs among them (the next holder is another process, which
  waited), the p50/p99 latency from a release to the next holder's entry at a hand-off, the
  CPU time the 4 processes spent per acquisition, and overlapping holders (the invariant:
  must be 0). The *floor* run is no lock at all: the 4 processes pass one token round the
  ring, each ``BLPOP`` on its own list and ``RPUSH`` to the next one's, through the same
  client (coredis), and again through redis-py (a lighter client, asyncio only); it is the
  most hand-offs per second a push wake-up through Redis can give on this machine.
- *limiter*: each process runs 8 tasks entering as fast as they can through a shared rate
  (``--rate``, default 1000 per second; ours: ``RedisLimiter(concurrent=32, rate=rate/20,
  period_ms=50)``, waiting in its queue; ``limits``: its moving window of ``rate`` per second
  on the same Redis, a refused hit retried after 1 ms, the usual way to wait with it). The
  table gives the rate held (entries from the first one to the end of the run, over that
  time), rejected or refused
  entries, the most entries seen in any 1 s sliding window, and CPU per entry.
- *rounds* (``--rounds N``, mutex runs): after the table, ``N`` more pairs of runs,
  ``RedisMutex(1)`` and the coredis ring back to back (in alternating order), each pair's
  hand-off ratio taken under the same load, and the median over the pairs. On a shared
  machine a single run of either side varies by up to 2x from one minute to the next: the
  median of pairs is the ratio to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from itertools import pairwise
from typing import Any, cast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TASKS = int(os.environ.get("FUTOIN_BENCH_TASKS", "8"))  # tasks per process, limiter runs
MIXED = ["asyncio", "trio", "asyncio", "trio"]
_PROFILE: Any = None  # the worker's cProfile.Profile, from the start of its run to its end
FOUR = ["asyncio"] * 4

#: Table rows: label -> (worker kind, the 4 processes' backends).
MUTEX_RUNS = {
    "RedisMutex(1)": ("ours-mutex", MIXED),
    "redis-py Lock (sleep=0.1)": ("redispy-mutex", FOUR),
    "redis-py Lock (sleep=0.001)": ("redispy-mutex-1ms", FOUR),
    "floor: BLPOP/RPUSH ring": ("floor", MIXED),
    "floor: ring via redis-py": ("floor-redispy", FOUR),
    "floor: ring + 1 script": ("floor-script", MIXED),
}
#: Durable grants (``wait_replicas=1``): run only when the server has a replica (``main``
#: starts one; the quick test's server has none).
DURABLE_RUNS = {
    "RedisMutex(1) wait_replicas=1": ("ours-mutex-durable", MIXED),
}
LIMITER_RUNS = {
    "RedisLimiter": ("ours-limiter", MIXED),
    "RedisThrottle": ("ours-throttle", MIXED),
    "limits moving window": ("limits-limiter", FOUR),
    "control: RedisMutex(32)": ("ours-control", MIXED),
}
#: Rows whose rate is under test (the control has no rate: it shows what the tasks can offer).
RATED = ("RedisLimiter", "RedisThrottle", "limits moving window")


# -- workers (one OS process each) -------------------------------------------------------------


async def _go() -> float:
    """Say ready; return the start time the parent sends once every worker is ready."""
    import anyio.to_thread

    print("ready", flush=True)
    start_at = float(await anyio.to_thread.run_sync(sys.stdin.readline))
    import anyio

    await anyio.sleep(max(0.0, start_at - time.time()))
    if _PROFILE is not None:
        _PROFILE.enable()
    return start_at


def _result(stamps: Any, cpu0: float, **extra: Any) -> dict[str, Any]:
    if _PROFILE is not None:
        _PROFILE.disable()
    return {"stamps": stamps, "cpu": time.process_time() - cpu0, **extra}


async def _ours_mutex(port: int, name: str, duration: float, rate: int, idx: int,
                      replicas: int = 0) -> Any:
    import coredis

    from futoin_anyio.redis import RedisMutex

    stamps: list[tuple[int, int]] = []
    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        mutex = RedisMutex(client, name, wait_replicas=replicas)
        async with mutex:  # warm up: scripts loaded, connections open
            pass
        end = await _go() + duration
        cpu0 = time.process_time()
        while time.time() < end:
            async with mutex:
                t0 = time.time_ns()
                t1 = time.time_ns()
            stamps.append((t0, t1))
        return _result(stamps, cpu0)


async def _ring(name: str, duration: float, idx: int, blpop: Any, push: Any,
                extra: Any = None) -> Any:
    """The lock-free floor: pass a token around 4 processes through Redis lists, stamping each
    hand-off. ``blpop(key)`` and ``push(key)`` are the client's own calls; ``extra()``, when
    given, is one more call after each push (off the token's path, as a lock's acquiring
    script is: it runs while another process holds the token)."""
    stamps: list[tuple[int, int]] = []
    mine, nxt = f"{name}:ring:{idx}", f"{name}:ring:{(idx + 1) % 4}"
    end = await _go() + duration
    cpu0 = time.process_time()
    if idx == 0:
        await push(mine)
    while time.time() < end:
        if await blpop(mine) is None:
            continue
        t0 = time.time_ns()
        t1 = time.time_ns()
        stamps.append((t0, t1))
        await push(nxt)
        if extra is not None:
            await extra()
    return _result(stamps, cpu0)


async def _floor(port: int, name: str, duration: float, rate: int, idx: int) -> Any:
    import coredis

    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        return await _ring(name, duration, idx,
                           lambda key: client.blpop([key], timeout=0.5),
                           lambda key: client.rpush(key, [b"t"]))


async def _floor_script(port: int, name: str, duration: float, rate: int, idx: int) -> Any:
    """The ring plus one script per hand-off: the command count of a FIFO lock whose entry
    is a script (take the permit or queue), its wake-up a push, its release a script."""
    import coredis

    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        script = client.register_script("return redis.call('ZCARD', KEYS[1])")
        key = f"{name}:extra"
        await script(keys=[key], args=[])  # loaded
        return await _ring(name, duration, idx,
                           lambda key: client.blpop([key], timeout=0.5),
                           lambda key: client.rpush(key, [b"t"]),
                           lambda: script(keys=[key], args=[idx]))


async def _floor_redispy(port: int, name: str, duration: float, rate: int, idx: int) -> Any:
    import redis.asyncio as aioredis

    client = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        await client.ping()
        return await _ring(name, duration, idx,
                           lambda key: client.blpop([key], timeout=0.5),
                           lambda key: client.rpush(key, b"t"))
    finally:
        await client.aclose()


async def _redispy_mutex(port: int, name: str, duration: float, sleep: float) -> Any:
    import redis.asyncio as aioredis

    stamps: list[tuple[int, int]] = []
    client = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        lock = client.lock(name, timeout=30, sleep=sleep)
        await lock.acquire()  # warm up
        await lock.release()
        end = await _go() + duration
        cpu0 = time.process_time()
        while time.time() < end:
            await lock.acquire()
            t0 = time.time_ns()
            t1 = time.time_ns()
            await lock.release()
            stamps.append((t0, t1))
        return _result(stamps, cpu0)
    finally:
        await client.aclose()


async def _ours_limiter(port: int, name: str, duration: float, rate: int, kind: str) -> Any:
    import anyio
    import coredis

    from futoin_anyio import FutoInError
    from futoin_anyio.redis import RedisLimiter, RedisMutex, RedisThrottle

    stamps: list[int] = []
    rejected = 0
    per = max(1, rate // 20)
    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        lim: Any
        if kind == "ours-limiter":
            lim = RedisLimiter(client, name, concurrent=4 * TASKS, max_queue=None, rate=per,
                               period_ms=50, burst=None)
        elif kind == "ours-throttle":
            lim = RedisThrottle(client, name, per, period_ms=50)
        else:
            lim = RedisMutex(client, name, max=4 * TASKS)

        async def warm_up() -> None:  # scripts loaded, connections open (one period's worth)
            async with lim:
                pass

        async with anyio.create_task_group() as tg:
            for _ in range(TASKS):
                tg.start_soon(warm_up)
        end = await _go() + duration
        cpu0 = time.process_time()

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
        return _result(stamps, cpu0, rejected=rejected)


async def _limits_limiter(port: int, name: str, duration: float, rate: int, idx: int) -> Any:
    import asyncio

    from limits import RateLimitItemPerSecond
    from limits.aio.storage import RedisStorage
    from limits.aio.strategies import MovingWindowRateLimiter

    storage = RedisStorage(f"async+redis://127.0.0.1:{port}", implementation="redispy")
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerSecond(rate)
    await asyncio.gather(*(limiter.test(item, name) for _ in range(TASKS)))  # warm up
    stamps: list[int] = []
    refused = 0
    end = await _go() + duration
    cpu0 = time.process_time()

    async def task() -> None:
        nonlocal refused
        while time.time() < end:
            if await limiter.hit(item, name):
                stamps.append(time.time_ns())
            else:
                refused += 1
                await asyncio.sleep(0.001)

    await asyncio.gather(*(task() for _ in range(TASKS)))
    return _result(stamps, cpu0, rejected=refused)


def _worker(argv: list[str]) -> None:
    impl, backend, port, name, duration, rate, idx = argv
    out = os.environ.get("FUTOIN_BENCH_PROFILE")
    if out and idx == "0":  # cProfile the first worker's run (see --profile)
        import cProfile

        global _PROFILE
        _PROFILE = cProfile.Profile()
        _work(impl, backend, port, name, duration, rate, idx)
        _PROFILE.dump_stats(f"{out}.{impl}")
        return
    _work(impl, backend, port, name, duration, rate, idx)


def _work(impl: str, backend: str, port: str, name: str, duration: str, rate: str,
          idx: str) -> None:
    import anyio

    args = (int(port), name, float(duration))
    if impl == "redispy-mutex":
        result = anyio.run(_redispy_mutex, *args, 0.1, backend="asyncio")
    elif impl == "redispy-mutex-1ms":
        result = anyio.run(_redispy_mutex, *args, 0.001, backend="asyncio")
    elif impl == "ours-mutex-durable":
        result = anyio.run(_ours_mutex, *args, int(rate), int(idx), 1, backend=backend)
    else:
        func: Any = {"ours-mutex": _ours_mutex, "floor": _floor, "floor-redispy": _floor_redispy,
                     "floor-script": _floor_script,
                     "limits-limiter": _limits_limiter}.get(impl)
        if func is None:  # ours-limiter, ours-throttle, ours-control
            result = anyio.run(_ours_limiter, *args, int(rate), impl, backend=backend)
        else:
            result = anyio.run(func, *args, int(rate), int(idx), backend=backend)
    json.dump(result, sys.stdout)


# -- the runs and their figures ----------------------------------------------------------------


def run(port: int, impl: str, backends: list[str], duration: float, rate: int) -> dict[str, Any]:
    """Run 4 worker processes together; return their results and the run's window."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "benchmarks.redis_bench", "--worker", impl, b, str(port), name,
         repr(duration), str(rate), str(i)], cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True) for i, b in enumerate(backends)]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{impl} worker did not start")
        start_at = time.time() + 0.05
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{start_at!r}\n")
            p.stdin.close()
        out = []
        for p in procs:
            assert p.stdout is not None
            data = p.stdout.read()
            if p.wait(timeout=duration + 120):
                raise RuntimeError(f"{impl} worker failed ({p.returncode})")
            out.append(json.loads(data))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    pipe.close()
    return {"workers": out, "start": start_at, "duration": duration, "rate": rate}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def mutex_figures(result: dict[str, Any]) -> dict[str, Any]:
    workers = result["workers"]
    stamps = sorted((t0, t1, w) for w, r in enumerate(workers) for t0, t1 in r["stamps"])
    overlaps = sum(1 for a, b in pairwise(stamps) if b[0] < a[1])
    # Release-to-entry at a hand-off: the next holder is another process (it waited).
    gaps = [(b[0] - a[1]) / 1e6 for a, b in pairwise(stamps) if a[2] != b[2]]
    span = (stamps[-1][1] - stamps[0][0]) / 1e9 if len(stamps) > 1 else 0.0
    cpu = sum(r["cpu"] for r in workers)
    return {"entries": len(stamps), "per_s": len(stamps) / span if span else 0.0,
            "handoffs_per_s": len(gaps) / span if span else 0.0,
            "p50_ms": _pct(gaps, 0.50), "p99_ms": _pct(gaps, 0.99), "overlaps": overlaps,
            "cpu_ms": 1000.0 * cpu / len(stamps) if stamps else float("nan")}


def limiter_figures(result: dict[str, Any]) -> dict[str, Any]:
    workers, rate = result["workers"], result["rate"]
    stamps = sorted(t for r in workers for t in r["stamps"])
    # The window starts at the first entry (a process that wakes late is not the limit's
    # doing) and ends with the run.
    end = int((result["start"] + result["duration"]) * 1e9)
    start = stamps[0] if stamps else end
    inside = sum(1 for t in stamps if t < end)
    worst = 0
    j = 0
    for i, t in enumerate(stamps):  # the most entries in any 1 s window
        while stamps[j] <= t - 1_000_000_000:
            j += 1
        worst = max(worst, i - j + 1)
    held = inside * 1e9 / (end - start) if end > start else 0.0
    cpu = sum(r["cpu"] for r in workers)
    return {"entries": len(stamps), "rate": held, "error_pct": 100.0 * (held - rate) / rate,
            "rejected": sum(r["rejected"] for r in workers), "worst_1s": worst,
            "cpu_ms": 1000.0 * cpu / len(stamps) if stamps else float("nan")}


def check(figures: dict[str, Any]) -> list[str]:
    """The invariants of a run (whatever its speed): empty when they hold."""
    bad = []
    for key in (*MUTEX_RUNS, *DURABLE_RUNS):
        f = figures.get(key)
        if f is not None and (f["overlaps"] or not f["entries"]):
            bad.append(f"{key}: {f['overlaps']} overlapping holders, {f['entries']} entries")
    for key in ("RedisLimiter", "RedisThrottle"):
        f = figures.get(key)
        if f is None:
            continue
        rate = figures["rate"]
        if f["rejected"] or not f["entries"]:
            bad.append(f"{key}: {f['rejected']} rejected, {f['entries']} entries")
        # Periods are back to back: any 1 s window holds at most one period's worth more.
        if f["worst_1s"] > rate + max(1, rate // 20):
            bad.append(f"{key}: {f['worst_1s']} entries in 1 s for a rate of {rate}")
    return bad


def measure(port: int, parts: list[str], duration: float, rate: int,
            durable: bool = False) -> dict[str, Any]:
    """The runs of ``parts``; ``durable``: also the durable rows (the server has a replica)."""
    figures: dict[str, Any] = {"duration": duration, "rate": rate}
    if "mutex" in parts:
        runs = {**MUTEX_RUNS, **(DURABLE_RUNS if durable else {})}
        for key, (impl, backends) in runs.items():
            figures[key] = mutex_figures(run(port, impl, backends, duration, rate))
    if "limiter" in parts:
        for key, (impl, backends) in LIMITER_RUNS.items():
            figures[key] = limiter_figures(run(port, impl, backends, duration, rate))
    return figures


#: The pair of rows that ``--rounds`` alternates: ours against its floor.
PAIR = ("RedisMutex(1)", "floor: BLPOP/RPUSH ring")


def alternate(port: int, rounds: int, duration: float, rate: int) -> list[dict[str, Any]]:
    """``rounds`` pairs of runs of :data:`PAIR`, back to back, the order alternating from one
    pair to the next (so that a drift of the machine's load favours neither side)."""
    pairs = []
    for i in range(rounds):
        pair = {}
        for key in (PAIR if i % 2 == 0 else PAIR[::-1]):
            impl, backends = MUTEX_RUNS[key]
            pair[key] = mutex_figures(run(port, impl, backends, duration, rate))
        pairs.append(pair)
    return pairs


def rounds_summary(pairs: list[dict[str, Any]]) -> dict[str, float]:
    """The medians over the pairs: hand-off ratio (ours / floor), and each side's p99."""
    ours, floor = PAIR

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    ratios = [p[ours]["handoffs_per_s"] / p[floor]["handoffs_per_s"]
              for p in pairs if p[floor]["handoffs_per_s"]]
    return {"ratio": median(ratios), "ours_p99_ms": median([p[ours]["p99_ms"] for p in pairs]),
            "floor_p99_ms": median([p[floor]["p99_ms"] for p in pairs])}


def profile_shares(path: str) -> dict[str, float]:
    """Share of a worker's profiled time (own time of functions, waiting excluded) by
    package: where the CPU of an entry goes."""
    import pstats

    stats: Any = cast(Any, pstats.Stats(path)).stats
    shares: dict[str, float] = {}
    for (file, _line, func), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        if "poll" in func or "select" in func:
            continue  # idle: waiting for the socket
        group = "other"
        for part in ("futoin_anyio", "coredis", "anyio", "trio", "asyncio", "redis", "limits"):
            if f"/{part}/" in file:
                group = part
                break
        else:
            if "send" in func or "recv" in func:
                group = "socket send/recv"
        shares[group] = shares.get(group, 0.0) + tottime
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}


def report(figures: dict[str, Any]) -> None:
    duration, rate = figures["duration"], figures["rate"]
    if "RedisMutex(1)" in figures:
        print(f"Mutex of 1, 4 processes each looping acquire -> tiny work -> release, "
              f"{duration:g} s per run")
        print(f"{'':28} {'entries':>8} {'acq/s':>7} {'handoff/s':>9} {'p50 ms':>7} "
              f"{'p99 ms':>7} {'CPU ms/acq':>10} {'overlaps':>8}")
        for key in (*MUTEX_RUNS, *DURABLE_RUNS):
            f = figures.get(key)
            if f is None:
                continue
            print(f"{key:28} {f['entries']:8d} {f['per_s']:7.0f} {f['handoffs_per_s']:9.0f} "
                  f"{f['p50_ms']:7.2f} {f['p99_ms']:7.2f} {f['cpu_ms']:10.3f} "
                  f"{f['overlaps']:8d}")
        ours = figures["RedisMutex(1)"]
        for key in ("redis-py Lock (sleep=0.1)", "redis-py Lock (sleep=0.001)",
                    "floor: BLPOP/RPUSH ring", "floor: ring via redis-py",
                    "floor: ring + 1 script"):
            base = figures[key]
            if base["per_s"] and base["handoffs_per_s"]:
                print(f"RedisMutex / {key}: {ours['per_s'] / base['per_s']:.2f}x acquisitions/s,"
                      f" {ours['handoffs_per_s'] / base['handoffs_per_s']:.2f}x hand-offs/s")
        for key in DURABLE_RUNS:
            f = figures.get(key)
            if f is not None and f["handoffs_per_s"]:
                print(f"{key} / RedisMutex(1): {f['handoffs_per_s'] / ours['handoffs_per_s']:.2f}x"
                      f" hand-offs/s (the cost of waiting for the replica)")
    pairs = figures.get("rounds")
    if pairs:
        ours, floor = PAIR
        print(f"\n{ours} against {floor}, {len(pairs)} pairs of runs back to back")
        print(f"{'pair':>4} {'ours hand-off/s':>15} {'floor hand-off/s':>16} {'ratio':>6} "
              f"{'ours p99 ms':>11} {'floor p99 ms':>12}")
        for i, p in enumerate(pairs, 1):
            a, b = p[ours], p[floor]
            ratio = a["handoffs_per_s"] / b["handoffs_per_s"] if b["handoffs_per_s"] else 0.0
            print(f"{i:4d} {a['handoffs_per_s']:15.0f} {b['handoffs_per_s']:16.0f} "
                  f"{ratio:6.2f} {a['p99_ms']:11.2f} {b['p99_ms']:12.2f}")
        summary = rounds_summary(pairs)
        print(f"median: {summary['ratio']:.2f}x the floor's hand-offs/s; p99 release-to-entry "
              f"{summary['ours_p99_ms']:.2f} ms (the floor's {summary['floor_p99_ms']:.2f} ms)")
    if "RedisLimiter" in figures:
        print(f"\nRate limit of {rate}/s, 4 processes x {TASKS} tasks, {duration:g} s per run")
        print(f"{'':28} {'entries':>8} {'rate/s':>9} {'error %':>8} {'rejected':>9} "
              f"{'max/1s':>7} {'CPU ms/entry':>12}")
        for key in LIMITER_RUNS:
            f = figures[key]
            err = f"{f['error_pct']:8.2f}" if key in RATED else f"{'-':>8}"
            print(f"{key:28} {f['entries']:8d} {f['rate']:9.1f} {err} "
                  f"{f['rejected']:9d} {f['worst_1s']:7d} {f['cpu_ms']:12.3f}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        _worker(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="0.5 s per run")
    parser.add_argument("--duration", type=float, help="seconds per run (default 10)")
    parser.add_argument("--rate", type=int, default=1000, help="limiter runs: entries per s")
    parser.add_argument("--only", choices=("mutex", "limiter"), help="one kind of run")
    parser.add_argument("--rounds", type=int, default=0, metavar="N",
                        help="mutex runs: N more pairs of RedisMutex(1) and the coredis ring, "
                             "back to back, and the median ratio")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--profile", metavar="FILE",
                        help="cProfile the first worker of each run into FILE.<kind> and print "
                             "where its time went, by package")
    args = parser.parse_args(argv)
    duration = args.duration or (0.5 if args.quick else 10.0)
    parts = [args.only] if args.only else ["mutex", "limiter"]
    if args.rounds < 0:
        parser.error(f"--rounds must be 0 or more, not {args.rounds}")
    if args.rounds and "mutex" not in parts:
        parser.error("--rounds pairs mutex runs: it cannot go with --only limiter")
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from redis_support.server import RedisServer

    if args.profile:
        os.environ["FUTOIN_BENCH_PROFILE"] = os.path.abspath(args.profile)
    server = RedisServer()
    replica = None
    try:
        # A replica on the same host, for the durable rows (wait_replicas=1).
        replica = RedisServer(replica_of=server)
        replica.link_up()
        figures = measure(server.port, parts, duration, args.rate, durable=True)
        if args.rounds:
            figures["rounds"] = alternate(server.port, args.rounds, duration, args.rate)
    finally:
        if replica is not None:
            replica.close()
        server.close()
    report(figures)
    if args.profile:
        runs = {**MUTEX_RUNS, **DURABLE_RUNS, **LIMITER_RUNS}
        for key, (impl, _) in runs.items():
            path = f"{os.path.abspath(args.profile)}.{impl}"
            if os.path.exists(path):
                shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in profile_shares(path).items())
                print(f"profile of {key} (one worker, own time): {shares}")
    if args.json:
        with open(args.json, "w") as fp:
            json.dump(figures, fp, indent=1)
    bad = check(figures)
    for line in bad:
        print("INVARIANT BROKEN:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The gateway tier: a JSON-lines gateway on loopback, plain Trio/AnyIO against futoin_anyio.

From the repository root::

    python -m benchmarks.gateway              # full: 3 rounds, 3,200 requests per phase
    python -m benchmarks.gateway --quick      # a smoke test of the harness, well under a minute

Per request the gateway (``_gateway_front.py``, a process of its own) admits through a
concurrency and a rate limit, applies a 200 ms deadline, calls two backends in parallel,
retries one of them once on a given error code, cancels everything when the client hangs up,
and replies; the module of the front says how each side is written. The backends run in a
second process (``_gateway_load.py``), the closed-loop clients in this one; all on loopback.

Per backend and round, a ``plain`` and a ``futoin`` front run one after the other, the order
rotating from round to round, and a ``floor`` front (first in one round, last in the next)
whose reject phase is that phase's floor: what the contract alone makes a refusal cost (see
``_gateway_front.py``). Each front serves a warm-up, then three measured phases of the same
number of requests (each client sends its share, so a seed gives the same requests):

* ``ok``: every request is answered by both backends at once;
* ``mixed``: seeded kinds, 75 % ok, 10 % retried, 6 % failed, 5 % timed out, 4 % hung up;
* ``reject``: the admission is replaced by one whose rate limit admits 3 % of the phase's
  requests per hour: the first 3 % are served, the other 97 % rejected at once by the limit,
  the same number on both sides.

Figure: the front's CPU (its own ``time.process_time()``, read by a ``!mark`` control line
before and after the phase) per request; each cell is the **median** of the rounds. Every
reply is checked against its request's kind, and the front's outcome counts must equal what
the clients saw: otherwise the run is ``FAILED`` (exit status 1). A stalled machine may make
the front miss the deadline (a request of another kind answered ``timeout``) or miss it and
the slow answer too (a ``slow`` request answered ``ok``): such replies are allowed and
reported as late. Targets (issue 25), each
backend: futoin/plain <= 1.15 in the ok and mixed phases, <= 1.25 in the reject phase (exit
status 2 in full mode when one fails).

Also reported (Linux): how often per request the front's peers were woken from a sleep (the
voluntary context switches of the backends' process and of the clients'). A front that spends
more CPU between its sends lets its peers drain their sockets and sleep, and each ``send()``
that wakes one costs the front more: the gap between the sides on the wire is larger than
their gap in process (``benchmarks.account``). And, on every platform, the front's cyclic
collector (``gc.callbacks``): its collections per 1,000 requests and the CPU they took per
request. With requests in flight on many connections, how often a collection comes depends on
how the objects of the requests in flight are made and freed, not only on how many each makes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python benchmarks/gateway.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import VerificationError, check
from benchmarks._gateway_front import FLOOR, IMPLS, LIMIT
from benchmarks._gateway_load import OUTCOMES, Client, Load, kinds_of
from benchmarks.service import STEP_TIMEOUT, _Control

REPO = Path(__file__).resolve().parent.parent
BACKENDS = ("asyncio", "trio")
PHASES = ("ok", "mixed", "reject")
TARGETS = {"ok": 1.15, "mixed": 1.15, "reject": 1.25}
#: The front's peers whose wake-ups per request are reported: the backends' process, and the
#: clients' (this one).
PEERS = ("backends", "clients")
#: The reject phase admits this share of its requests (the first ones: the rate limit's period
#: is an hour), so both sides reject the same number.
ADMITTED_SHARE = 0.03
REJECT_PERIOD_MS = 3_600_000


@dataclass(frozen=True)
class Mode:
    clients: int = 64
    requests: int = 3200  # per measured phase
    warmup: int = 640
    rounds: int = 3


FULL = Mode()
QUICK = Mode(clients=32, requests=640, warmup=128, rounds=1)


@dataclass(frozen=True)
class Phase:
    """One phase of a front's run: ``per_client`` requests from each client."""

    name: str
    per_client: int
    mixed: bool = False
    allow_rejected: bool = False
    #: Control lines sent before the phase (``!admit ...``, ``!pin``).
    before: tuple[bytes, ...] = ()
    #: The admission places still held after the phase (``!pin`` holds them all).
    held_after: int = 0


def bench_phases(mode: Mode) -> list[Phase]:
    """The warm-up and the three measured phases of the benchmark."""
    per_client = max(1, mode.requests // mode.clients)
    rate = max(1, round(per_client * mode.clients * ADMITTED_SHARE))
    admit = b"!admit %d %d %d\n" % (LIMIT, rate, REJECT_PERIOD_MS)
    return [
        Phase("warmup", max(1, mode.warmup // mode.clients)),
        Phase("ok", per_client),
        Phase("mixed", per_client, mixed=True),
        Phase("reject", per_client, allow_rejected=True, before=(admit,)),
    ]


async def start_backends() -> tuple[asyncio.subprocess.Process, tuple[int, int]]:
    """The backends' process and its two ports; it ends when its stdin is closed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks._gateway_load", cwd=REPO, env=_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT)
    check(first.startswith(b"ports "), f"the backends did not start: {first!r}")
    a, b = (int(p) for p in first.split()[1:])
    return proc, (a, b)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _wakeups(backends_pid: int) -> tuple[int, int] | None:
    """The voluntary context switches so far of the backends' process and of this one (the
    clients'): each is a sleep the process was woken from, which a sender (the front) paid for
    in its ``send()``. ``None`` where ``/proc`` does not tell (not Linux)."""
    try:
        with open(f"/proc/{backends_pid}/status") as status:
            backends = next(int(line.split()[1]) for line in status
                            if line.startswith("voluntary_ctxt_switches:"))
        import resource

        return backends, resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    except (OSError, StopIteration, ImportError):
        return None


async def _counts(control: _Control, before: dict[str, int], sent: int) -> dict[str, Any]:
    """Mark until the front has counted every request of the phase (a hang-up is counted when
    the front sees the end of the stream); bounded by ``STEP_TIMEOUT``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STEP_TIMEOUT
    while True:
        mark = await control.mark()
        delta = {k: mark["counts"][k] - before[k] for k in OUTCOMES}
        if sum(delta.values()) >= sent or loop.time() > deadline:
            mark["delta"] = delta
            return mark
        await asyncio.sleep(0.01)


async def _phase(clients: list[Client], control: _Control, phase: Phase,
                 backends_pid: int) -> dict[str, Any]:
    for line in phase.before:
        await control.ask(line)
    load = Load(phase.per_client, phase.mixed, phase.allow_rejected)
    first = await control.mark()
    woken = _wakeups(backends_pid)
    for c in clients:
        c.start(load)
    await asyncio.wait_for(load.done.wait(), STEP_TIMEOUT)
    last = await _counts(control, first["counts"], load.sent)
    woken_after = _wakeups(backends_pid)
    delta = last["delta"]
    name = phase.name
    check(not load.wrong, f"{name}: wrong replies: {load.wrong[:3]}")
    check(load.sent == phase.per_client * len(clients), f"{name}: {load.sent} requests sent")
    check(sum(delta.values()) == load.sent,
          f"{name}: {load.sent} requests, the front counted {delta}")
    seen = {k: load.seen.get(k, 0) for k in OUTCOMES}
    check(seen == delta, f"{name}: the clients saw {seen}, the front counted {delta}")
    check(last["held"] == phase.held_after,
          f"{name}: {last['held']} admission places held after the phase")
    cpu = last["cpu"] - first["cpu"]
    return {"requests": load.sent, "counts": delta, "late": load.late,
            "expected": {k: load.expected.get(k, 0) for k in OUTCOMES}, "cpu": cpu,
            "cpu_per_request": cpu / load.sent, "wall": last["wall"] - first["wall"],
            "rejected_share": delta["rejected"] / load.sent,
            "wakeups": None if woken is None or woken_after is None else {
                peer: (woken_after[i] - woken[i]) / load.sent
                for i, peer in enumerate(PEERS)},
            "collector": _collector(first["gc"], last["gc"], load.sent)}


def _collector(before: dict[str, Any] | None, after: dict[str, Any] | None,
               sent: int) -> dict[str, float] | None:
    """The front's cyclic collector over a phase: collections (every generation) per 1,000
    requests, and its time per request in seconds (part of the front's CPU)."""
    if before is None or after is None:
        return None
    collections = sum(after["collections"]) - sum(before["collections"])
    return {"per_1000": collections * 1000 / sent,
            "seconds_per_request": (after["seconds"] - before["seconds"]) / sent}


async def run_front(impl: str, backend: str, clients: int, phases: list[Phase],
                    seed: int = 1) -> dict[str, Any]:
    """Start the backends and a front of ``impl`` on ``backend``; run ``phases`` with
    ``clients`` closed-loop clients; stop everything. The result of each phase by name."""
    loop = asyncio.get_running_loop()
    backends, ports = await start_backends()
    front: asyncio.subprocess.Process | None = None
    conns: list[Client] = []
    try:
        front = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks._gateway_front", impl, backend, *map(str, ports),
            cwd=REPO, env=_env(), stdout=subprocess.PIPE)
        assert front.stdout is not None
        first = await asyncio.wait_for(front.stdout.readline(), STEP_TIMEOUT)
        check(first.startswith(b"port "), f"the front did not start: {first!r}")
        port = int(first.split()[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        control = _Control(reader, writer)
        for i in range(clients):
            client = Client(port, kinds_of(seed, i))
            await loop.create_connection(_factory(client), "127.0.0.1", port)
            conns.append(client)
        results = {}
        for phase in phases:
            results[phase.name] = await _phase(conns, control, phase, backends.pid)
        writer.close()
        return results
    finally:
        for c in conns:
            c.close()
        if front is not None and front.returncode is None:
            front.terminate()
            await front.wait()
        await _stop(backends)


def _factory(client: Client) -> Any:
    return lambda: client


# --------------------------------------------------------------------------- rounds and table


def run_backend(backend: str, mode: Mode, seed: int = 1) -> dict[str, Any]:
    """Both fronts on ``backend``, ``mode.rounds`` rounds, the order rotating; median cells."""
    runs: dict[str, dict[str, list[float]]] = {p: {i: [] for i in IMPLS} for p in PHASES}
    shares: dict[str, dict[str, list[float]]] = {p: {i: [] for i in IMPLS} for p in PHASES}
    woken: dict[str, dict[str, list[dict[str, float] | None]]] = {
        p: {i: [] for i in IMPLS} for p in PHASES}
    collector: dict[str, dict[str, list[dict[str, float] | None]]] = {
        p: {i: [] for i in IMPLS} for p in PHASES}
    expected: dict[str, dict[str, int]] = {}
    late: dict[str, int] = dict.fromkeys(IMPLS, 0)
    floor: list[float] = []
    floor_shares: list[float] = []
    for r in range(mode.rounds):
        # The floor's front first in one round, last in the next. It serves every phase, so
        # that it comes to the reject phase as the others do (its ok and mixed requests run
        # the futoin path); only its reject phase counts.
        order = (*IMPLS, FLOOR) if r % 2 == 0 else (FLOOR, *IMPLS[::-1])
        for impl in order:
            print(f"  gateway {backend} round {r + 1}: {impl}", file=sys.stderr, flush=True)
            res = asyncio.run(run_front(impl, backend, mode.clients, bench_phases(mode), seed))
            if impl == FLOOR:
                floor.append(res["reject"]["cpu_per_request"])
                floor_shares.append(res["reject"]["rejected_share"])
                continue
            for p in PHASES:
                runs[p][impl].append(res[p]["cpu_per_request"])
                shares[p][impl].append(res[p]["rejected_share"])
                woken[p][impl].append(res[p]["wakeups"])
                collector[p][impl].append(res[p]["collector"])
                late[impl] += res[p]["late"]
            expected[impl] = res["mixed"]["expected"]
    # The same admission on both: the floor refuses what the plain front refuses.
    check(floor_shares == shares["reject"]["plain"],
          f"reject phase: the floor refused {floor_shares}, plain {shares['reject']['plain']}")
    # Same seed, same requests: each reply was checked against its kind (a late reply
    # aside), so both sides gave these outcomes.
    check(expected["plain"] == expected["futoin"],
          f"mixed requests differ: plain {expected['plain']}, futoin {expected['futoin']}")
    cells = {}
    for p in PHASES:
        plain, ours = (statistics.median(runs[p][i]) for i in ("plain", "futoin"))
        cells[p] = {"plain": plain, "futoin": ours, "ratio": ours / plain,
                    "target": TARGETS[p], "status": _status(ours / plain <= TARGETS[p]),
                    "runs": runs[p],
                    "rejected_share": {i: statistics.median(shares[p][i]) for i in IMPLS},
                    "wakeups": _median_wakeups(woken[p]),
                    "collector": _median_collector(collector[p])}
    reject = cells["reject"]
    reject["floor"] = statistics.median(floor)
    reject["floor_runs"] = floor
    return {"backend": backend, "cells": cells, "mixed_counts": expected["plain"], "late": late,
            "rounds": mode.rounds, "requests": mode.requests, "clients": mode.clients}


def _median_wakeups(runs: dict[str, list[dict[str, float] | None]]
                    ) -> dict[str, dict[str, float]] | None:
    """Per side, the median over the rounds of each peer's wake-ups per request."""
    if any(w is None for side in runs.values() for w in side):
        return None
    return {impl: {peer: statistics.median(w[peer] for w in side if w is not None)
                   for peer in PEERS} for impl, side in runs.items()}


def _median_collector(runs: dict[str, list[dict[str, float] | None]]
                      ) -> dict[str, dict[str, float]] | None:
    """Per side, the median over the rounds of the collector's figures (see :func:`_collector`)."""
    if any(c is None for side in runs.values() for c in side):
        return None
    return {impl: {key: statistics.median(c[key] for c in side if c is not None)
                   for key in ("per_1000", "seconds_per_request")}
            for impl, side in runs.items()}


def _status(good: bool) -> str:
    return "PASS" if good else "FAIL"


def render(rows: list[dict[str, Any]]) -> str:
    """The Markdown table: CPU per request of the front, futoin/plain, the targets."""
    out = [
        "| backend | phase | plain CPU/req | futoin CPU/req | futoin / plain | target | status |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        for p in PHASES:
            c = row["cells"][p]
            out.append(f"| {row['backend']} | {p} | {c['plain'] * 1e6:.0f} µs "
                       f"| {c['futoin'] * 1e6:.0f} µs | {c['ratio']:.2f} | <= {c['target']:g} "
                       f"| {c['status']} |")
    out.append("")
    out.append("Rejected in the reject phase (median): " + "; ".join(
        f"{row['backend']} plain {row['cells']['reject']['rejected_share']['plain']:.1%}, "
        f"futoin {row['cells']['reject']['rejected_share']['futoin']:.1%}" for row in rows)
        + ". Mixed phase, the outcomes its seed asks for (each reply checked, on both"
        " sides): " + "; ".join(
        f"{row['backend']} " + ", ".join(f"{k} {v}" for k, v in row["mixed_counts"].items())
        for row in rows) + ". Late replies (a request of another kind answered timeout, or a"
        " slow one answered ok: the front's loop did not run in time on a busy machine;"
        " allowed, counted over all phases and rounds): " + "; ".join(
        f"{row['backend']} plain {row['late']['plain']}, futoin {row['late']['futoin']}"
        for row in rows) + ".")
    floors = [(row["backend"], row["cells"]["reject"]) for row in rows
              if "floor" in row["cells"]["reject"]]
    if floors:
        out += ["", "The reject phase's floor (median): a front that pays, for a refused request,"
                " only what the contract makes any implementation pay (a state with the"
                " refusal as `last_exception`, raised out of an awaited coroutine to a caller"
                " holding the state), with the plain side's admission:", "",
                "| backend | plain CPU/req | floor CPU/req | floor / plain | futoin / floor |",
                "| --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {backend} | {c['plain'] * 1e6:.0f} µs | {c['floor'] * 1e6:.0f} µs"
                f" | {c['floor'] / c['plain']:.2f} | {c['futoin'] / c['floor']:.2f} |"
                for backend, c in floors]
    woken = [(row["backend"], p, row["cells"][p]["wakeups"]) for row in rows for p in PHASES
             if row["cells"][p].get("wakeups")]
    if woken:
        out += ["", "Peers woken per request (median; voluntary context switches of the"
                " backends' process and of the clients' process, each a sleep the peer was"
                " woken from, which the front's `send()` paid for):", "",
                "| backend | phase | backends: plain | backends: futoin | clients: plain"
                " | clients: futoin |", "| --- | --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {backend} | {p} | {w['plain']['backends']:.2f} | {w['futoin']['backends']:.2f}"
                f" | {w['plain']['clients']:.2f} | {w['futoin']['clients']:.2f} |"
                for backend, p, w in woken]
    collected = [(row["backend"], p, row["cells"][p]["collector"]) for row in rows
                 for p in PHASES if row["cells"][p].get("collector")]
    if collected:
        out += ["", "The front's cyclic collector (median; collections of every generation per"
                " 1,000 requests, and the CPU they took per request, part of the figures above):",
                "", "| backend | phase | collections: plain | collections: futoin | plain"
                " | futoin |", "| --- | --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {backend} | {p} | {c['plain']['per_1000']:.1f} | {c['futoin']['per_1000']:.1f}"
                f" | {c['plain']['seconds_per_request'] * 1e6:.1f} µs"
                f" | {c['futoin']['seconds_per_request'] * 1e6:.1f} µs |"
                for backend, p, c in collected]
    return "\n".join(out)


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets in the shape of ``benchmarks.run``'s."""
    return [{"target": f"gateway {row['backend']} {p}: futoin/plain CPU per request",
             "value": row["cells"][p]["ratio"], "bound": TARGETS[p], "op": "<=",
             "status": row["cells"][p]["status"], "reason": ""}
            for row in rows for p in PHASES]


def run_tier(mode_name: str, backends: list[str], rounds: int | None = None) -> dict[str, Any]:
    """The tier for ``benchmarks.run``: rows, targets, or ``failed`` with the reason."""
    mode = QUICK if mode_name == "quick" else FULL
    if rounds:
        mode = Mode(mode.clients, mode.requests, mode.warmup, rounds)
    tier: dict[str, Any] = {"mode": mode_name, "rounds": mode.rounds, "clients": mode.clients,
                            "requests": mode.requests, "rows": [], "targets": [],
                            "failed": []}
    for backend in backends:
        try:
            tier["rows"].append(run_backend(backend, mode))
        except VerificationError as e:
            tier["failed"].append(f"gateway {backend}: {e}")
    tier["targets"] = targets(tier["rows"])
    return tier


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test of the harness")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--rounds", type=int, help="rounds per backend (median counts)")
    parser.add_argument("--requests", type=int, help="requests per measured phase")
    parser.add_argument("--seed", type=int, default=1, help="the seed of the mixed phase")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    if args.rounds:
        mode = Mode(mode.clients, mode.requests, mode.warmup, args.rounds)
    if args.requests:
        mode = Mode(mode.clients, args.requests, mode.warmup, mode.rounds)
    rows = []
    try:
        for backend in args.backends.split(","):
            rows.append(run_backend(backend, mode, args.seed))
    except VerificationError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    print(f"{mode.clients} closed-loop clients, {mode.requests} requests per phase, median of "
          f"{mode.rounds} round(s); CPU = the front process's time.process_time()")
    print()
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps({"mode": mode.__dict__, "rows": rows}, indent=1))
    failing = any(c["status"] == "FAIL" for row in rows for c in row["cells"].values())
    return 0 if args.quick or not failing else 2



if __name__ == "__main__":
    sys.exit(main())

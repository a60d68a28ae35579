"""A real-I/O service tier: futoin_anyio against plain Trio / plain AnyIO on loopback TCP.

From the repository root::

    python -m benchmarks.service              # full: 3 rounds, 3 s per phase, both backends
    python -m benchmarks.service --quick      # a smoke test of the harness, a few seconds
    python -m benchmarks.service --profile trio [--phase reject] --top 15   # cProfile, futoin front

The front (``_service_front.py``, a process of its own) answers each request line by a round
trip over TCP to a backend; this process runs the backend and a closed-loop load generator of
64 clients (plain asyncio protocols, cheap, so that the front is the bottleneck). Per backend
and round, the ``plain``, ``plain_scope`` (plain with a cancel scope per request) and ``futoin``
fronts run one after the other in a rotating order; each cell keeps its best round. Two phases
per front:

* ``ok``: every request is admitted; figures: ok requests/s and the front's CPU (its own
  ``time.process_time()``) per request;
* ``reject``: the admission is held full, every request is answered ``busy``: a
  ``DefenseRejected`` from a full ``Limiter`` against ``if in_flight >= limit: reply busy``;
  figure: the front's CPU per rejected request (its I/O included).

Every reply is checked (the backend's answer to that very request, or ``busy`` where expected)
and every client's last request must be answered: otherwise the run is ``FAILED`` (exit status
1). Targets, each backend: futoin ok req/s >= 0.9x plain; CPU per rejection <= 1.2x plain;
CPU per ok request <= 1.2x ``plain_scope`` (issue 25)
(exit status 2 in full mode when one fails).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python benchmarks/service.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import VerificationError, check

REPO = Path(__file__).resolve().parent.parent
BACKENDS = ("asyncio", "trio")
IMPLS = ("plain", "plain_scope", "futoin")
OK_TARGET = 0.9
REJECT_TARGET = 1.2
#: futoin CPU per ok request against ``plain_scope``'s (issue 25).
SCOPE_TARGET = 1.2
#: A step of the harness that takes longer than this means a broken front, never a hang.
STEP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Mode:
    clients: int = 64
    warmup: float = 0.5
    duration: float = 3.0
    rounds: int = 3


FULL = Mode()
QUICK = Mode(warmup=0.05, duration=0.25, rounds=1)


# --------------------------------------------------------------------------- backend + clients


def _answer(request_id: bytes) -> bytes:
    return b"%s:%d\n" % (request_id, int(request_id) * 7 + 1)


class _Backend(asyncio.Protocol):
    """The backend: answers each line ``id`` with ``id:7*id+1``."""

    def __init__(self) -> None:
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data
        while (end := buf.find(b"\n")) >= 0:
            self._transport.write(_answer(buf[:end]))
            buf = buf[end + 1:]
        self._buf = buf


@dataclass
class _Load:
    """The clients' shared counters for one phase."""

    expect_busy: bool
    running: bool = True
    counting: bool = False
    sent: int = 0
    replies: int = 0
    ok: int = 0
    busy: int = 0
    counted: int = 0
    wrong: list[bytes] = field(default_factory=list)
    idle: int = 0
    all_idle: asyncio.Event = field(default_factory=asyncio.Event)
    first_counted: asyncio.Event = field(default_factory=asyncio.Event)


class _Client(asyncio.Protocol):
    """One closed-loop client: a request, its reply, the next request."""

    def __init__(self, load: _Load, total: int) -> None:
        self.load = load
        self.total = total
        self._buf = b""
        self._next = 0
        self.outstanding: bytes | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def start(self, load: _Load) -> None:
        self.load = load
        self.send()

    def send(self) -> None:
        self._next += 1
        self.outstanding = b"%d" % self._next
        self.load.sent += 1
        self.transport.write(self.outstanding + b"\n")

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data
        while (end := buf.find(b"\n")) >= 0:
            self._reply(buf[: end + 1])
            buf = buf[end + 1:]
        self._buf = buf

    def _reply(self, line: bytes) -> None:
        load = self.load
        load.replies += 1
        if self.outstanding is None:
            load.wrong.append(b"unexpected " + line)
            return
        if line == b"busy\n" and load.expect_busy:
            load.busy += 1
        elif not load.expect_busy and line == _answer(self.outstanding):
            load.ok += 1
        else:
            load.wrong.append(line)
        if load.counting:
            load.counted += 1
            load.first_counted.set()
        self.outstanding = None
        if load.running:
            self.send()
        else:
            load.idle += 1
            if load.idle == self.total:
                load.all_idle.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class _Control:
    """A control connection to the front: ``!mark`` and ``!pin``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def ask(self, line: bytes) -> bytes:
        self.writer.write(line)
        answer = await asyncio.wait_for(self.reader.readline(), STEP_TIMEOUT)
        check(answer.endswith(b"\n"), f"the front did not answer {line!r}")
        return answer

    async def mark(self) -> dict[str, Any]:
        report: dict[str, Any] = json.loads(await self.ask(b"!mark\n"))
        report["wall"] = asyncio.get_running_loop().time()
        return report


# --------------------------------------------------------------------------- one front


async def _phase(clients: list[_Client], control: _Control, mode: Mode,
                 expect_busy: bool) -> dict[str, Any]:
    """Run the clients closed-loop; measure between two marks; stop, check every reply."""
    load = _Load(expect_busy=expect_busy)
    for c in clients:
        c.start(load)
    await asyncio.sleep(mode.warmup)
    first = await control.mark()
    load.counting = True
    await asyncio.sleep(mode.duration)
    # A very short window on a busy machine may see no reply yet: measure until one came.
    await asyncio.wait_for(load.first_counted.wait(), STEP_TIMEOUT)
    load.counting = False
    second = await control.mark()
    load.running = False
    await asyncio.wait_for(load.all_idle.wait(), STEP_TIMEOUT)
    after = await control.mark()
    check(not load.wrong, f"wrong replies: {load.wrong[:3]}")
    check(load.replies == load.sent, f"{load.sent} requests, {load.replies} replies")
    check((load.busy if expect_busy else load.ok) == load.sent,
          f"{load.sent} requests: {load.ok} ok, {load.busy} busy")
    check(load.counted > 0, "no reply in the measured window")
    wall = second["wall"] - first["wall"]
    cpu = second["cpu"] - first["cpu"]
    return {"requests": load.sent, "counted": load.counted, "per_s": load.counted / wall,
            "cpu_per_request": cpu / load.counted, "cpu_share": cpu / wall,
            "held_after": after["held"]}


async def run_front(impl: str, backend: str, mode: Mode, profile: Path | None = None,
                    phase: str = "ok") -> dict[str, Any]:
    """Start a front process of ``impl`` on ``backend``, load it (both phases), stop it.

    With ``profile``, the front runs under cProfile during the measured window of ``phase``
    and writes its stats there."""
    loop = asyncio.get_running_loop()
    back = await loop.create_server(_Backend, "127.0.0.1", 0)
    back_port = back.sockets[0].getsockname()[1]
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if profile is not None:
        env["FUTOIN_SERVICE_PROFILE"] = str(profile)
        env["FUTOIN_SERVICE_PROFILE_MARK"] = "1" if phase == "ok" else "4"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks._service_front", impl, backend, str(back_port),
        cwd=REPO, env=env, stdout=subprocess.PIPE)
    clients: list[_Client] = []
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT)
        check(first.startswith(b"port "), f"the front did not start: {first!r}")
        port = int(first.split()[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        control = _Control(reader, writer)
        placeholder = _Load(expect_busy=False)
        for _ in range(mode.clients):
            _, client = await loop.create_connection(
                lambda: _Client(placeholder, mode.clients), "127.0.0.1", port)
            clients.append(client)
        ok = await _phase(clients, control, mode, expect_busy=False)
        check(ok["held_after"] == 0, f"{ok['held_after']} admission places held after the run")
        await control.ask(b"!pin\n")
        reject = await _phase(clients, control, mode, expect_busy=True)
        writer.close()
        return {"impl": impl, "backend": backend, "ok": ok, "reject": reject}
    finally:
        for c in clients:
            c.transport.close()
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        back.close()


# --------------------------------------------------------------------------- rounds and table


def run_backend(backend: str, mode: Mode) -> dict[str, Any]:
    """Plain and futoin fronts on ``backend``, ``mode.rounds`` rounds in rotating order."""
    best: dict[str, dict[str, float]] = {}
    runs: dict[str, int] = dict.fromkeys(IMPLS, 0)
    for r in range(mode.rounds):
        k = r % len(IMPLS)
        order = IMPLS[k:] + IMPLS[:k]
        for impl in order:
            print(f"  {backend} round {r + 1}: {impl}", file=sys.stderr, flush=True)
            res = asyncio.run(run_front(impl, backend, mode))
            runs[impl] += res["ok"]["requests"] + res["reject"]["requests"]
            cell = best.setdefault(impl, {"per_s": 0.0, "cpu_ok": float("inf"),
                                          "cpu_reject": float("inf"), "cpu_share": 0.0})
            if res["ok"]["per_s"] > cell["per_s"]:
                cell["per_s"] = res["ok"]["per_s"]
                cell["cpu_share"] = res["ok"]["cpu_share"]
            cell["cpu_ok"] = min(cell["cpu_ok"], res["ok"]["cpu_per_request"])
            cell["cpu_reject"] = min(cell["cpu_reject"], res["reject"]["cpu_per_request"])
    plain, scoped, ours = best["plain"], best["plain_scope"], best["futoin"]
    return {
        "backend": backend, "plain": plain, "plain_scope": scoped, "futoin": ours,
        "requests_checked": runs,
        "ratio_ok": ours["per_s"] / plain["per_s"],
        "ratio_cpu": ours["cpu_ok"] / plain["cpu_ok"],
        "ratio_cpu_scope": ours["cpu_ok"] / scoped["cpu_ok"],
        "ratio_reject": ours["cpu_reject"] / plain["cpu_reject"],
    }


def _status(good: bool) -> str:
    return "PASS" if good else "FAIL"


def render(rows: list[dict[str, Any]]) -> str:
    """The Markdown tables: figures, ratios futoin/plain, targets; then the ``plain_scope``
    side (a cancel scope per request) where the rows have it."""
    out = [
        "| backend | plain ok req/s | futoin ok req/s | ratio (>= 0.9) "
        "| plain CPU/req | futoin CPU/req | ratio "
        "| plain CPU/reject | futoin CPU/reject | ratio (<= 1.2) |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        p, f = row["plain"], row["futoin"]
        out.append(
            f"| {row['backend']} | {p['per_s']:,.0f} | {f['per_s']:,.0f} "
            f"| {row['ratio_ok']:.2f} {_status(row['ratio_ok'] >= OK_TARGET)} "
            f"| {p['cpu_ok'] * 1e6:.0f} µs | {f['cpu_ok'] * 1e6:.0f} µs | {row['ratio_cpu']:.2f} "
            f"| {p['cpu_reject'] * 1e6:.1f} µs | {f['cpu_reject'] * 1e6:.1f} µs "
            f"| {row['ratio_reject']:.2f} {_status(row['ratio_reject'] <= REJECT_TARGET)} |")
    scoped = [row for row in rows if "plain_scope" in row]
    if scoped:
        out += [
            "",
            "CPU per ok request against a plain front with a cancel scope per request"
            " (`plain_scope`):",
            "",
            "| backend | plain CPU/req | plain_scope CPU/req | futoin CPU/req "
            "| futoin / plain_scope (<= 1.2) |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for row in scoped:
            r = row["ratio_cpu_scope"]
            out.append(
                f"| {row['backend']} | {row['plain']['cpu_ok'] * 1e6:.0f} µs "
                f"| {row['plain_scope']['cpu_ok'] * 1e6:.0f} µs "
                f"| {row['futoin']['cpu_ok'] * 1e6:.0f} µs "
                f"| {r:.2f} {_status(r <= SCOPE_TARGET)} |")
    out.append("")
    out.append("Front busy (CPU s per wall s) in the best ok round: " + "; ".join(
        f"{row['backend']} plain {row['plain']['cpu_share']:.2f}, "
        f"futoin {row['futoin']['cpu_share']:.2f}" for row in rows)
        + " (below 1: the front was not the only limit; compare CPU/req).")
    return "\n".join(out)


def targets_hold(rows: list[dict[str, Any]]) -> bool:
    return all(r["ratio_ok"] >= OK_TARGET and r["ratio_reject"] <= REJECT_TARGET
               and r.get("ratio_cpu_scope", 0.0) <= SCOPE_TARGET for r in rows)


def profile(impl: str, backend: str, mode: Mode, top: int, phase: str) -> int:
    """One front under cProfile (one phase's measured window): the top functions by own time."""
    import pstats
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "front.prof"
        res = asyncio.run(run_front(impl, backend, mode, stats_file, phase))[phase]
        print(f"{impl} front on {backend}, {phase} phase under cProfile (CPU time): "
              f"{res['per_s']:,.0f} req/s, {res['counted']} requests profiled")
        stats = pstats.Stats(str(stats_file))
        stats.strip_dirs().sort_stats("tottime").print_stats(top)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test of the harness")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--rounds", type=int, help="rounds per backend (best counts)")
    parser.add_argument("--duration", type=float, help="seconds measured per phase")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--profile", choices=BACKENDS,
                        help="only profile the futoin front on this backend (cProfile)")
    parser.add_argument("--impl", choices=IMPLS, default="futoin", help="with --profile")
    parser.add_argument("--top", type=int, default=15, help="with --profile: functions shown")
    parser.add_argument("--phase", choices=("ok", "reject"), default="ok",
                        help="with --profile: the phase profiled")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    if args.rounds:
        mode = Mode(mode.clients, mode.warmup, mode.duration, args.rounds)
    if args.duration:
        mode = Mode(mode.clients, mode.warmup, args.duration, mode.rounds)
    if args.profile:
        return profile(args.impl, args.profile, mode, args.top, args.phase)
    rows = []
    try:
        for backend in args.backends.split(","):
            rows.append(run_backend(backend, mode))
    except VerificationError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    print(f"{mode.clients} closed-loop clients, {mode.duration} s per phase, "
          f"best of {mode.rounds} round(s); CPU = the front process's time.process_time()")
    print()
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps({"mode": mode.__dict__, "rows": rows}, indent=1))
    return 0 if args.quick or targets_hold(rows) else 2


if __name__ == "__main__":
    sys.exit(main())

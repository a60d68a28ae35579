"""The front of ``benchmarks.gateway``: a JSON-lines gateway on loopback, written twice.

``python -m benchmarks._gateway_front IMPL BACKEND PORT_A PORT_B`` listens on a free port of
127.0.0.1 and prints ``port N``. Per request (the protocol: ``benchmarks._gateway_load``) the
gateway admits it through a concurrency and a rate limit (``rejected`` at once when full),
gives it a 200 ms deadline (``timeout``), calls backends ``a`` and ``b`` in parallel, retries
``b`` once when it answers ``Retry`` (``retried``), fails on any other backend error
(``failed``, the other call cancelled), cancels everything when the client hangs up
(``hung_up``, no reply), and replies ``a + b`` (``ok``). Written twice, same semantics:

* ``plain``: plain Trio on trio (``trio.open_nursery``, ``trio.move_on_after``), plain AnyIO on
  asyncio (task group, ``anyio.move_on_after``); a small :class:`Admission` class; the
  backend error caught out of the nursery's exception group;
* ``futoin``: a root per request, ``asi.sync(limiter, gateway)`` on a
  ``Limiter(concurrent, max_queue=0, rate, burst=0)``; the step does ``asi.set_timeout(200)``
  and ``asi.parallel()`` of two ``async def`` branches, ``b``'s error handler adds the retry;
  ``await root.promise()`` in the connection's task; a hang-up is ``root.cancel()``.

A third front, ``floor``, measures what the contract makes any implementation pay for a
refusal (the reject phase's floor): the plain side's admission, and for a refused request only
what ``promise()`` must do by the contract, without the engine: a state holding the variables
and the pre-defined keys, the ``DefenseRejected`` error kept in it as ``last_exception``, raised
out of an awaited coroutine to a caller that holds the state, so that the error, its traceback,
the caller's frame and the state wait for the cyclic collector (:class:`_FloorRoot`). The
requests it admits run the ``futoin`` path, their Limiter never full.

Everything else is shared: per client connection, one connection to each backend, a reader
task that hands request lines to the connection's task through a memory channel and, at the
end of the stream, marks the connection hung up and cancels the request in flight (the plain
side's deadline scope, the futoin side's root). Backend replies of requests given up are
skipped by their id.

Control lines (their own connection) start with ``!``: ``!mark`` answers a JSON line
(``time.process_time()``, the outcome counts, the admission places held, the cyclic
collector's collections and time so far); ``!admit C R P`` replaces the admission by one of
``C`` places and ``R`` entries per ``P`` ms; ``!pin`` holds every place, so that every request
is rejected.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus

from benchmarks._gateway_load import DEADLINE_MS, FAIL_CODE, OUTCOMES, RETRY_CODE
from benchmarks._service_front import Lines, Send, connect, io_of, serve_tcp
from futoin_anyio import AsyncSteps, Errors, FutoInError, Limiter

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

IMPLS = ("plain", "futoin")
#: The reject phase's floor (see the module's docstring): only its reject phase counts.
FLOOR = "floor"
#: Requests inside at once; the benchmark's clients never fill it unless pinned.
LIMIT = 64
#: Entries per period in the ok and mixed phases: the rate never binds there.
RATE, PERIOD_MS = 1_000_000, 1000
DEADLINE_S = DEADLINE_MS / 1000
#: The front ends by itself after this long (the driver terminates it long before).
LIFETIME_S = 900.0
#: The outcome of a root that ``promise()`` raised with this code.
FUTOIN_OUTCOME = {"DefenseRejected": "rejected", "Timeout": "timeout", "Cancelled": "hung_up",
                  FAIL_CODE: "failed"}


class BackendFailed(Exception):
    """A backend answered an error (plain side)."""


class Link:
    """One connection to one backend: a request line out, its reply line back. The replies of
    requests given up earlier (timed out) come first; they are skipped by their id."""

    __slots__ = ("lines", "send", "stream")

    def __init__(self, lines: Any, send: Send, stream: Any) -> None:
        self.lines, self.send, self.stream = lines, send, stream

    async def call(self, req: dict[str, Any], attempt: int) -> tuple[int, str | None]:
        """``(value, None)`` or ``(0, error code)``."""
        rid = req["id"]
        await self.send(json.dumps({"id": rid, "kind": req["kind"], "attempt": attempt})
                        .encode() + b"\n")
        while True:
            line = await self.lines.line()
            if line is None:
                raise ConnectionError("the backend closed the connection")
            reply = json.loads(line)
            if reply["id"] == rid and reply["attempt"] == attempt:
                return reply.get("value", 0), reply.get("error")


@dataclass
class Conn:
    """One client connection: its backend links, its request in flight, whether it ended."""

    send: Send
    a: Any = None
    b: Any = None
    #: What the reader cancels at a hang-up: the plain deadline scope, or the futoin root.
    current: Any = None
    hung_up: bool = False


class Admission:
    """The plain side's admission: at most ``concurrent`` requests inside, at most ``rate``
    entries per period (a period starts with the first entry after the last one ended, as
    :class:`~futoin_anyio.Throttle`'s); a full one refuses at once."""

    __slots__ = ("clock", "concurrent", "entries", "in_flight", "period", "period_end", "rate")

    def __init__(self, concurrent: int, rate: int, period_s: float,
                 clock: Callable[[], float]) -> None:
        self.concurrent, self.rate, self.period, self.clock = concurrent, rate, period_s, clock
        self.in_flight = self.entries = 0
        self.period_end = float("-inf")

    def enter(self) -> bool:
        if self.in_flight >= self.concurrent:
            return False
        now = self.clock()
        if now >= self.period_end:
            self.period_end = now + self.period
            self.entries = 0
        if self.entries >= self.rate:
            return False
        self.entries += 1
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1


class Collector:
    """The cyclic collector's work in this process (a ``gc.callbacks`` entry): collections per
    generation and the time spent in them, for ``!mark``. Both sides allocate differently, and
    a concurrent server's collections scan the young objects of every request in flight."""

    __slots__ = ("_started", "collections", "seconds")

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    def report(self) -> dict[str, Any]:
        return {"collections": list(self.collections), "seconds": self.seconds}


class _Results:
    __slots__ = ("a", "b", "retried")

    def __init__(self) -> None:
        self.a = self.b = 0
        self.retried = False


# --------------------------------------------------------------------------- futoin steps


def _gateway(asi: AsyncSteps) -> None:
    asi.set_timeout(DEADLINE_MS)
    branches = asi.parallel()
    branches.add(_call_a)
    branches.add(_call_b, _retry_b)


async def _call_a(asi: AsyncSteps) -> None:
    st = asi.state
    value, error = await st.conn.a.call(st.req, 1)
    if error is not None:
        asi.error(error)
    st.a = value


async def _call_b(asi: AsyncSteps) -> None:
    st = asi.state
    value, error = await st.conn.b.call(st.req, st.attempt)
    if error is not None:
        asi.error(error)
    st.b = value


def _retry_b(asi: AsyncSteps, code: str) -> None:
    st = asi.state
    if code == RETRY_CODE and st.attempt == 1:
        st.attempt = 2
        asi.add(_call_b)


class _FloorRoot:
    """The floor's root of a refused request: a state, and the refusal ``promise()`` raises."""

    __slots__ = ("state",)

    def __init__(self, variables: dict[str, Any]) -> None:
        self.state = {**variables, "error_info": None, "last_exception": None, "async_stack": ()}

    async def refused(self) -> None:
        error = FutoInError(Errors.DefenseRejected, _FLOOR_INFO)
        state = self.state
        state["error_info"] = _FLOOR_INFO
        state["last_exception"] = error
        raise error


_FLOOR_INFO = "the floor's admission refused it"


# --------------------------------------------------------------------------- the front


class Front:
    """The gateway: admission, outcome counts, the connection handler, both request paths."""

    def __init__(self, impl: str, backend: str, ports: tuple[int, int] = (0, 0)) -> None:
        self.impl, self.backend, self.ports = impl, backend, ports
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.tg: Any = None
        #: Watches the collector while the front serves (see :func:`serve`); ``!mark`` reports it.
        self.collector: Collector | None = None
        if backend == "trio":
            import trio

            self.open_nursery: Any = trio.open_nursery
            self.move_on_after: Any = trio.move_on_after
            self.clock: Callable[[], float] = trio.current_time
            self.channel: Any = trio.open_memory_channel
        else:
            self.open_nursery = anyio.create_task_group
            self.move_on_after = anyio.move_on_after
            self.clock = anyio.current_time
            self.channel = anyio.create_memory_object_stream
        self.process: Callable[[Conn, dict[str, Any]], Awaitable[tuple[str, int]]] = {
            "plain": self.process_plain, "futoin": self.process_futoin,
            FLOOR: self.process_floor}[impl]
        self.admission = Admission(LIMIT, RATE, PERIOD_MS / 1000, self.clock)
        self.limiter = Limiter(concurrent=LIMIT, max_queue=0, rate=RATE, period_ms=PERIOD_MS,
                               burst=0)

    # -- plain ----------------------------------------------------------------------------------

    async def process_plain(self, conn: Conn, req: dict[str, Any]) -> tuple[str, int]:
        admission = self.admission
        if not admission.enter():
            return "rejected", 0
        results = _Results()
        failed = False
        try:
            with self.move_on_after(DEADLINE_S) as deadline:
                conn.current = deadline
                try:
                    async with self.open_nursery() as nursery:
                        nursery.start_soon(self._call_a, conn, req, results)
                        nursery.start_soon(self._call_b, conn, req, results)
                except BaseExceptionGroup as group:
                    # ``except* BackendFailed:`` written out (split is what it does): the
                    # benchmarks run on Python 3.10 too.
                    _, rest = group.split(BackendFailed)
                    if rest is not None:
                        raise rest from None
                    failed = True
        finally:
            conn.current = None
            admission.leave()
        if deadline.cancelled_caught:
            return ("hung_up" if conn.hung_up else "timeout"), 0
        if failed:
            return "failed", 0
        return ("retried" if results.retried else "ok"), results.a + results.b

    @staticmethod
    async def _call_a(conn: Conn, req: dict[str, Any], results: _Results) -> None:
        value, error = await conn.a.call(req, 1)
        if error is not None:
            raise BackendFailed(error)
        results.a = value

    @staticmethod
    async def _call_b(conn: Conn, req: dict[str, Any], results: _Results) -> None:
        value, error = await conn.b.call(req, 1)
        if error == RETRY_CODE:
            results.retried = True
            value, error = await conn.b.call(req, 2)
        if error is not None:
            raise BackendFailed(error)
        results.b = value

    # -- futoin ---------------------------------------------------------------------------------

    async def process_futoin(self, conn: Conn, req: dict[str, Any]) -> tuple[str, int]:
        root = AsyncSteps({"conn": conn, "req": req, "attempt": 1, "a": 0, "b": 0})
        root.sync(self.limiter, _gateway)
        conn.current = root
        try:
            await root.promise()
        except FutoInError as e:
            return FUTOIN_OUTCOME[e.code], 0  # another code: a KeyError ends the run
        finally:
            conn.current = None
        st = root.state
        return ("retried" if st.attempt == 2 else "ok"), st.a + st.b

    # -- the reject phase's floor ----------------------------------------------------------------

    async def process_floor(self, conn: Conn, req: dict[str, Any]) -> tuple[str, int]:
        admission = self.admission
        if not admission.enter():
            root = _FloorRoot({"conn": conn, "req": req, "attempt": 1, "a": 0, "b": 0})
            try:
                await root.refused()
            except FutoInError as e:
                return FUTOIN_OUTCOME[e.code], 0
        try:
            return await self.process_futoin(conn, req)  # its Limiter is never full
        finally:
            admission.leave()

    # -- connections ----------------------------------------------------------------------------

    async def link(self, port: int) -> Link:
        receive, send, eof, stream = await connect(self.backend, port)
        return Link(Lines(receive, eof), send, stream)

    async def handle(self, stream: Any) -> None:
        receive, send, eof = io_of(self.backend, stream)
        conn = Conn(send)
        try:
            conn.a = await self.link(self.ports[0])
            conn.b = await self.link(self.ports[1])
            tx, rx = self.channel(1)
            async with self.open_nursery() as nursery:
                nursery.start_soon(self._read, Lines(receive, eof), conn, tx)
                await self._serve(conn, rx)
        finally:
            for link in (conn.a, conn.b):
                if link is not None:
                    await link.stream.aclose()
            await stream.aclose()

    async def _read(self, lines: Lines, conn: Conn, tx: Any) -> None:
        try:
            while (line := await lines.line()) is not None:
                if line[0] == 33:  # b"!"
                    await self.control(line, conn.send)
                else:
                    tx.send_nowait(line)  # closed loop: one request at a time
        finally:
            conn.hung_up = True
            tx.close()
            if conn.current is not None:
                conn.current.cancel()

    async def _serve(self, conn: Conn, rx: Any) -> None:
        counts, process = self.counts, self.process
        async for line in rx:
            if conn.hung_up:  # the client left before its request started
                counts["hung_up"] += 1
                return
            req = json.loads(line)
            outcome, value = await process(conn, req)
            counts[outcome] += 1
            if outcome == "hung_up":
                return
            reply: dict[str, Any] = {"id": req["id"], "outcome": outcome}
            if value:
                reply["value"] = value
            await conn.send(json.dumps(reply).encode() + b"\n")

    # -- control --------------------------------------------------------------------------------

    async def control(self, line: bytes, send: Send) -> None:
        words = line[1:].split()
        if words[0] == b"mark":
            held = self.limiter.statistics().held if self.impl == "futoin" \
                else self.admission.in_flight
            report = {"cpu": time.process_time(), "counts": self.counts, "held": held,
                      "gc": None if self.collector is None else self.collector.report()}
            await send(json.dumps(report).encode() + b"\n")
        elif words[0] == b"admit":
            concurrent, rate, period_ms = (int(w) for w in words[1:])
            self.admission = Admission(concurrent, rate, period_ms / 1000, self.clock)
            if self.impl != FLOOR:  # (the floor admits with the plain side's admission)
                self.limiter = Limiter(concurrent=concurrent, max_queue=0, rate=rate,
                                       period_ms=period_ms, burst=0)
            await send(b"admitted\n")
        elif words[0] == b"pin":
            if self.impl == "futoin":
                for _ in range(self.admission.concurrent):
                    await self.tg.start(self._hold, self.limiter)
            else:
                self.admission.in_flight += self.admission.concurrent
            await send(b"pinned\n")
        else:
            raise ValueError(f"unknown control line {line!r}")

    @staticmethod
    async def _hold(limiter: Limiter, *,
                    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with limiter:
            task_status.started()
            await anyio.sleep_forever()


async def serve(impl: str, backend: str, ports: tuple[int, int]) -> None:
    """Serve until terminated by the driver, or for :data:`LIFETIME_S` at most (a driver that
    died leaves no front behind)."""
    front = Front(impl, backend, ports)
    front.collector = Collector()
    gc.callbacks.append(front.collector)
    try:
        with anyio.move_on_after(LIFETIME_S):
            async with anyio.create_task_group() as tg:
                front.tg = tg
                await serve_tcp(backend, front.handle)
    finally:
        gc.callbacks.remove(front.collector)


def main(argv: list[str]) -> int:
    impl, backend, port_a, port_b = argv
    if impl not in (*IMPLS, FLOOR) or backend not in ("asyncio", "trio"):
        raise SystemExit(f"usage: {__doc__.splitlines()[2]}")
    anyio.run(serve, impl, backend, (int(port_a), int(port_b)), backend=backend)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

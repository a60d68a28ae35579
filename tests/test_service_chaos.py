"""Chaos: a loopback TCP service of ``async def`` steps under timeouts, rejections and hang-ups.

The service a Trio user writes (issue 16): a task per connection, a root per request with a
``set_timeout()`` and a :class:`~futoin_anyio.Limiter`, and an ``async def`` step that opens a
TCP connection to a backend and receives the answer while a nursery child sends the request.
64 seeded clients send 8 requests each; a quarter of the backend's answers come after the step's
timeout; some clients hang up mid-request (the front's watcher then cancels that request).

Variants: AnyIO I/O on asyncio and trio; raw Trio I/O on trio (``trio.open_tcp_stream``,
``trio.open_nursery``, ``trio.serve_listeners``). Checked:

* every request is accounted for exactly once: answered ``ok``, ``Timeout`` or
  ``DefenseRejected``, or cancelled by its client's hang-up;
* every client that waited got exactly that one answer (the engine before issue 16's fix lost
  some on raw Trio I/O: a group of ``Cancelled`` escaped the request);
* the request step's cancel handler ran once per failed or cancelled request;
* no backend connection, Limiter place or task is left behind.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, Limiter
from futoin_anyio._alarm import TASK_NAME as ALARM_TASK

pytestmark = pytest.mark.anyio

SEED = 1616
CLIENTS = 64
REQUESTS = 8  # per client
STEP_TIMEOUT_MS = 100  # not less: on a busy 2-core machine a request takes a few ms of CPU
SLOW_RATIO = 0.25  # backend answers after 120-150 ms, past the step's timeout
FAST_MS = (0, 5)
SLOW_MS = (120, 150)
HANGUP_AFTER_S = (0, 0.06)
BACKOFF_S = (0.005, 0.03)
HANGUP_RATIO = 0.15
CODES = {"ok", Errors.Timeout, Errors.DefenseRejected}
ANYIO_EOF = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


class Io:
    """The front's I/O: AnyIO's, or raw Trio's."""

    def __init__(self, raw_trio: bool) -> None:
        self.raw_trio = raw_trio
        if raw_trio:
            import trio

            self._trio = trio
            self.eof: tuple[type[Exception], ...] = (trio.BrokenResourceError,
                                                     trio.ClosedResourceError, anyio.EndOfStream)
        else:
            self.eof = ANYIO_EOF

    async def connect(self, port: int) -> Any:
        if self.raw_trio:
            return await self._trio.open_tcp_stream("127.0.0.1", port)
        return await anyio.connect_tcp("127.0.0.1", port)

    def nursery(self) -> AbstractAsyncContextManager[Any]:
        return self._trio.open_nursery() if self.raw_trio else anyio.create_task_group()

    async def send(self, stream: Any, data: bytes) -> None:
        await (stream.send_all(data) if self.raw_trio else stream.send(data))

    async def receive(self, stream: Any) -> bytes:
        """Some bytes; ``b""`` at the end of the stream."""
        try:
            data: bytes = await (stream.receive_some() if self.raw_trio else stream.receive())
        except self.eof:
            return b""
        return data

    async def line(self, stream: Any) -> bytes:
        """One line (the peer sends one at a time); ``b""`` if the stream ends first."""
        buf = b""
        while not buf.endswith(b"\n"):
            data = await self.receive(stream)
            if not data:
                return b""
            buf += data
        return buf

    async def serve(self, handler: Callable[[Any], Awaitable[None]],
                    task_status: anyio.abc.TaskStatus[int]) -> None:
        if self.raw_trio:
            listeners = await self._trio.open_tcp_listeners(0, host="127.0.0.1")
            task_status.started(listeners[0].socket.getsockname()[1])
            await self._trio.serve_listeners(handler, listeners)
        else:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
            task_status.started(listener.extra(SocketAttribute.local_port))
            async with listener:
                await listener.serve(handler)


@dataclass
class Front:
    """The service under test, with its counters."""

    io: Io
    backend_port: int
    #: Run each request's root with ``execute()`` in this shared tool, instead of ``promise()``.
    tool: AsyncTool | None = None
    limiter: Limiter = field(default_factory=lambda: Limiter(
        concurrent=8, max_queue=8, rate=10**6, period_ms=1000))
    connections: int = 0
    received: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    reply_failed: int = 0
    cancel_handlers: int = 0
    started: int = 0  # requests whose step ran (a root cancelled before it never set a handler)
    succeeded: int = 0  # roots that ended ok (a hang-up may still cancel the wait for the end)
    backend_open: int = 0

    async def handle(self, stream: Any) -> None:
        self.connections += 1
        try:
            while line := await self.io.line(stream):
                self.received += 1
                if not await self._request(stream, line):
                    return
        finally:
            self.connections -= 1
            await stream.aclose()

    async def _request(self, client: Any, line: bytes) -> bool:
        """Run one request's root; ``False`` when the client has gone."""
        io = self.io

        async def call_backend(asi: AsyncSteps) -> bytes:
            stream = await io.connect(self.backend_port)
            self.backend_open += 1
            try:
                async with io.nursery() as nursery:  # send while this step receives
                    nursery.start_soon(io.send, stream, line)
                    answer = await io.line(stream)
            finally:
                self.backend_open -= 1
                await stream.aclose()
            if not answer:
                raise FutoInError(Errors.CommError, "the backend hung up")
            return answer

        def request(asi: AsyncSteps) -> None:
            self.started += 1
            asi.set_timeout(STEP_TIMEOUT_MS)
            asi.set_cancel(self._cancelled)
            asi.sync(self.limiter, call_backend)

        code: str | None = None
        async with io.nursery() as nursery:

            async def watch_hangup() -> None:
                if await io.receive(client):
                    raise AssertionError("a client sent a request before its answer")
                nursery.cancel_scope.cancel()  # the client hung up: cancel the request

            nursery.start_soon(watch_hangup)
            if self.tool is None:
                try:
                    await AsyncSteps().add(request).promise()
                    self.succeeded += 1
                    code = "ok"
                except FutoInError as e:
                    code = e.code
            else:
                code = await self._executed(request, nursery)
            nursery.cancel_scope.cancel()
        if code is None:
            self.outcomes["cancelled on hang-up"] += 1
            return False
        self.outcomes[code] += 1
        request_id = line.split()[0]
        try:
            await io.send(client, b"%s %s\n" % (request_id, code.encode()))
        except io.eof:
            self.reply_failed += 1
            return False
        return True

    async def _executed(self, request: Callable[[AsyncSteps], None], nursery: Any) -> str:
        """The root in the shared tool, started with ``execute()``; its end is awaited here.

        A hang-up cancels this task's scope: the root is then cancelled with ``cancel()``."""
        done = anyio.Event()
        codes: list[str] = []

        def finish(code: str) -> None:
            codes.append(code)
            done.set()

        root = AsyncSteps(tool=self.tool)
        def succeeded(asi: AsyncSteps, answer: bytes) -> None:
            self.succeeded += 1
            finish("ok")

        root.add(request).add(succeeded)
        root.execute(unhandled_error=finish)
        try:
            await done.wait()
        finally:
            if not codes:
                root.cancel()
        return codes[0]

    def _cancelled(self, asi: AsyncSteps) -> None:
        self.cancel_handlers += 1


@dataclass
class Backend:
    """Answers ``"<id> <delay_ms>"`` with ``"<id> ok"`` after the delay."""

    connections: int = 0

    async def handle(self, stream: Any) -> None:
        self.connections += 1
        try:
            async with stream:
                line = b""
                while not line.endswith(b"\n"):
                    line += await stream.receive()
                request_id, delay_ms = line.split()
                await anyio.sleep(int(delay_ms) / 1000)
                await stream.send(request_id + b" ok\n")
        except ANYIO_EOF:
            pass  # the front's step was cancelled or timed out
        finally:
            self.connections -= 1


@dataclass
class Clients:
    sent: int = 0
    hung_up: int = 0
    waited: int = 0
    lost: int = 0
    answers: Counter[str] = field(default_factory=Counter)

    async def run(self, port: int, i: int) -> None:
        rng = random.Random(SEED * 1000 + i)  # the requests: the same in every run
        backoff = random.Random(-i)  # apart, so that answers do not change the requests
        stream = None
        for k in range(REQUESTS):
            if stream is None:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            slow = rng.random() < SLOW_RATIO
            delay = rng.randint(*SLOW_MS) if slow else rng.randint(*FAST_MS)
            request_id = b"%d" % (i * 1000 + k)
            await stream.send(b"%s %d\n" % (request_id, delay))
            self.sent += 1
            if rng.random() < HANGUP_RATIO:
                await anyio.sleep(rng.uniform(*HANGUP_AFTER_S))
                await stream.aclose()
                stream = None
                self.hung_up += 1
                continue
            self.waited += 1
            answer = b""
            try:
                while not answer.endswith(b"\n"):
                    answer += await stream.receive()
            except ANYIO_EOF:  # the front closed the connection without an answer
                self.lost += 1
                await stream.aclose()
                stream = None
                continue
            got_id, code = answer.decode().split()
            assert got_id.encode() == request_id
            assert code in CODES, code
            self.answers[code] += 1
            if code == Errors.DefenseRejected:
                await anyio.sleep(backoff.uniform(*BACKOFF_S))  # a well-behaved client backs off
        if stream is not None:
            await stream.aclose()


@pytest.mark.parametrize(("anyio_backend", "raw_trio"),
                         [("asyncio", False), ("trio", False), ("trio", True)],
                         ids=["asyncio-anyio-io", "trio-anyio-io", "trio-raw-trio-io"])
@pytest.mark.parametrize("run", ["promise", "execute"])
async def test_every_request_gets_exactly_one_answer(anyio_backend: str, raw_trio: bool,
                                                     run: str) -> None:
    """``promise()`` in the request's task, or ``execute()`` into one ``AsyncTool`` shared by
    all requests (what happens to one root must never reach another, nor the tool)."""
    with anyio.fail_after(60):  # a broken service fails the test, never hangs it
        if run == "promise":
            counts = await _chaos(Io(raw_trio), None)
        else:
            async with AsyncTool() as tool:
                counts = await _chaos(Io(raw_trio), tool)
            assert tool.statistics().tasks == 0
    print(f"\n{anyio_backend} {'raw trio' if raw_trio else 'anyio'} I/O, {run}(): {counts}")


def _tasks() -> int:
    """The running tasks, less the alarm task a trio run gets at its first set_timeout() over an
    inline step (one per run, like trio's own system tasks: it holds no root)."""
    return sum(1 for task in anyio.get_running_tasks() if task.name != ALARM_TASK)


async def _chaos(io: Io, tool: AsyncTool | None) -> dict[str, Any]:
    clients = Clients()
    async with anyio.create_task_group() as tg:
        back = await anyio.create_tcp_listener(local_host="127.0.0.1")
        backend = Backend()
        tg.start_soon(back.serve, backend.handle)
        front = Front(io, back.extra(SocketAttribute.local_port), tool)
        port = await tg.start(io.serve, front.handle)
        baseline = _tasks()
        async with anyio.create_task_group() as load:
            for i in range(CLIENTS):
                load.start_soon(clients.run, port, i)
        # The last hang-ups may still be reaching the front: let it notice them, and let the
        # tasks that have done their part return (a handler or a step's task ends a scheduling
        # step after its counter drops). A task left behind keeps the count up for the 10 s.
        def busy() -> bool:
            return bool(front.connections or front.backend_open or backend.connections
                        or (tool is not None and tool.statistics().roots)
                        or _tasks() > baseline)

        with anyio.move_on_after(10):
            # (polled: counters of three objects and the task count; an Event each would add
            # nothing)
            while busy():  # noqa: ASYNC110
                await anyio.sleep(0.005)
        tasks_left = _tasks() - baseline
        connections_left = (front.connections, backend.connections)
        roots_left = tool.statistics().roots if tool is not None else 0
        tg.cancel_scope.cancel()
    await back.aclose()

    outcomes = front.outcomes
    answered = sum(outcomes[c] for c in CODES)
    counts = {"requests": clients.sent, "received": front.received,
              "accounted": sum(outcomes.values()), "answers": sum(clients.answers.values()),
              "waited": clients.waited, "lost": clients.lost, "hung_up": clients.hung_up,
              **outcomes,
              "reply_failed": front.reply_failed}
    assert clients.lost == 0, counts
    assert clients.sent == front.received == CLIENTS * REQUESTS, counts
    assert sum(outcomes.values()) == front.received, counts  # nothing lost
    assert set(outcomes) <= CODES | {"cancelled on hang-up"}, counts
    # Every client that waited got its one answer, with the code the front sent.
    assert sum(clients.answers.values()) == clients.waited, counts
    for code in CODES:
        assert clients.answers[code] <= outcomes[code], counts
    assert answered - front.reply_failed >= clients.waited, counts
    # Each case happened: a run that never timed out or rejected checks nothing.
    assert all(outcomes[c] > 0 for c in CODES), counts
    assert 0 < outcomes["cancelled on hang-up"] <= clients.hung_up, counts  # only by hang-ups
    # The request step's cancel handler ran exactly once for each root that did not succeed (a
    # root cancelled on a hang-up before its first step ran has no handler to run; one that
    # succeeded just as its client hung up counts as cancelled on hang-up, yet it succeeded).
    assert front.received - front.started <= outcomes["cancelled on hang-up"], counts
    assert outcomes["ok"] <= front.succeeded <= outcomes["ok"] + outcomes["cancelled on hang-up"]
    assert front.cancel_handlers == front.started - front.succeeded, counts
    # Nothing left behind: backend connections, Limiter places, tasks.
    assert front.backend_open == 0
    assert connections_left == (0, 0)
    assert roots_left == 0
    stats = front.limiter.statistics()
    assert (stats.held, stats.waiting, stats.rate_waiting) == (0, 0, 0), stats
    assert tasks_left == 0
    return counts

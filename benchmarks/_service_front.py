"""The front of ``benchmarks.service``: one loopback request/response service, six ways.

``python -m benchmarks._service_front IMPL BACKEND BACKEND_PORT`` listens on a free port of
127.0.0.1 and prints ``port N``. Every client connection gets its own TCP connection to the
backend; each request line is sent to the backend, the backend's reply line goes back to the
client. Admission: at most ``LIMIT`` requests in flight; one more is answered ``busy`` at once.

* ``plain``: a counter, ``if in_flight >= LIMIT: reply busy`` — plain Trio on trio, plain AnyIO
  on asyncio;
* ``plain_scope``: ``plain`` with a cancel scope of its own around each request's round trip
  (``trio.CancelScope`` on trio, AnyIO's on asyncio), as a service that can cancel a request;
* ``futoin``: a root per request, ``asi.sync(limiter, roundtrip)`` then ``asi.add(reply)``, both
  ``async def`` steps; ``await asi.promise()`` in the connection's task; a full
  :class:`~futoin_anyio.Limiter` rejects with ``DefenseRejected``.

All use the same I/O (trio streams on trio, AnyIO streams on asyncio). Control lines start
with ``!``: ``!mark`` answers a JSON line (``time.process_time()`` and the admission counts);
``!pin`` fills the admission with ``LIMIT`` holders, so that every request is rejected.
"""

from __future__ import annotations

import cProfile
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus

from futoin_anyio import AsyncSteps, Errors, FutoInError, Limiter

#: Requests in flight at once; the benchmark's 64 clients never fill it unless pinned.
LIMIT = 64
BUSY = b"busy\n"
IMPLS = ("plain", "plain_scope", "futoin")
Receive = Callable[[], Awaitable[bytes]]
Send = Callable[[bytes], Awaitable[Any]]


class Lines:
    """Newline-terminated messages from a byte stream; ``None`` at the end of the stream."""

    __slots__ = ("_buf", "_eof", "_receive")

    def __init__(self, receive: Receive, eof: tuple[type[BaseException], ...]) -> None:
        self._receive = receive
        self._eof = eof
        self._buf = b""

    async def line(self) -> bytes | None:
        buf = self._buf
        while True:
            end = buf.find(b"\n")
            if end >= 0:
                self._buf = buf[end + 1:]
                return buf[: end + 1]
            try:
                data = await self._receive()
            except self._eof:
                data = b""
            if not data:
                return None
            buf += data
            self._buf = buf


def io_of(backend: str, stream: Any) -> tuple[Receive, Send, tuple[type[BaseException], ...]]:
    """``receive``, ``send`` and the end-of-stream exceptions of a stream of ``backend``'s I/O:
    a ``trio.SocketStream`` on trio, an AnyIO stream on asyncio."""
    if backend == "trio":
        import trio

        return stream.receive_some, stream.send_all, (trio.BrokenResourceError,)
    return stream.receive, stream.send, _ANYIO_EOF


async def connect(backend: str, port: int) -> tuple[Receive, Send,
                                                    tuple[type[BaseException], ...], Any]:
    """A TCP connection to ``127.0.0.1:port``: :func:`io_of` it, and the stream to close."""
    if backend == "trio":
        import trio

        stream: Any = await trio.open_tcp_stream("127.0.0.1", port)
    else:
        stream = await anyio.connect_tcp("127.0.0.1", port)
    return (*io_of(backend, stream), stream)


async def serve_tcp(backend: str, handler: Callable[[Any], Awaitable[None]]) -> None:
    """Serve ``handler(stream)`` per connection on a free port of 127.0.0.1, printing
    ``port N`` once listening (trio's own listeners on trio, AnyIO's on asyncio)."""
    if backend == "trio":
        import trio

        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        print(f"port {listeners[0].socket.getsockname()[1]}", flush=True)
        await trio.serve_listeners(handler, listeners)
    else:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        print(f"port {listener.extra(anyio.abc.SocketAttribute.local_port)}", flush=True)
        await listener.serve(handler)


class Front:
    """The service: admission state and the per-connection handlers."""

    def __init__(self, impl: str, backend: str, backend_port: int) -> None:
        self.impl = impl
        self.backend = backend
        self.backend_port = backend_port
        self.in_flight = 0
        self.limiter = Limiter(concurrent=LIMIT, max_queue=0, rate=10**9, period_ms=1000)
        self.tg: Any = None

    # -- I/O of the backend in use --------------------------------------------------------------

    async def _connect(self) -> tuple[Receive, Send, tuple[type[BaseException], ...], Any]:
        return await connect(self.backend, self.backend_port)

    def io_of(self, stream: Any) -> tuple[Receive, Send, tuple[type[BaseException], ...]]:
        return io_of(self.backend, stream)

    # -- control --------------------------------------------------------------------------------

    async def control(self, line: bytes, send: Send) -> None:
        if line == b"!mark\n":
            _profile_mark()
            held = self.limiter.statistics().held if self.impl == "futoin" else self.in_flight
            report = {"cpu": time.process_time(), "held": held}
            await send(json.dumps(report).encode() + b"\n")
        elif line == b"!pin\n":
            if self.impl == "futoin":
                for _ in range(LIMIT):
                    await self.tg.start(self._hold)
            else:
                self.in_flight += LIMIT
            await send(b"pinned\n")
        else:
            raise ValueError(f"unknown control line {line!r}")

    async def _hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self.limiter:
            task_status.started()
            await anyio.sleep_forever()

    # -- the service ----------------------------------------------------------------------------

    async def handle(self, stream: Any) -> None:
        receive, send, eof = self.io_of(stream)
        b_receive, b_send, b_eof, b_stream = await self._connect()
        try:
            client, back = Lines(receive, eof), Lines(b_receive, b_eof)
            if self.impl == "plain":
                await self._plain(client, send, back, b_send)
            elif self.impl == "plain_scope":
                await self._plain(client, send, back, b_send, _scope_class(self.backend))
            else:
                await self._futoin(client, send, back, b_send)
        finally:
            await b_stream.aclose()
            await stream.aclose()

    async def _plain(self, client: Lines, send: Send, back: Lines, b_send: Send,
                     scope_class: Any = None) -> None:
        """With ``scope_class`` (``plain_scope``): a cancel scope of its own around each
        request's round trip, as a service that can cancel one request or give it a deadline
        has (the futoin front has one per root); the backend's own class, ``trio.CancelScope``
        on trio and AnyIO's on asyncio."""
        while (request := await client.line()) is not None:
            if request[0] == 33:  # b"!"
                await self.control(request, send)
                continue
            if self.in_flight >= LIMIT:
                await send(BUSY)
                continue
            self.in_flight += 1
            try:
                if scope_class is None:
                    await b_send(request)
                    reply = await back.line()
                else:
                    with scope_class():
                        await b_send(request)
                        reply = await back.line()
            finally:
                self.in_flight -= 1
            if reply is None:
                raise RuntimeError("the backend closed the connection")
            await send(reply)

    async def _futoin(self, client: Lines, send: Send, back: Lines, b_send: Send) -> None:
        limiter = self.limiter

        async def roundtrip(asi: AsyncSteps) -> bytes:
            await b_send(asi.state["request"])
            reply = await back.line()
            if reply is None:
                raise FutoInError(Errors.CommError, "the backend closed the connection")
            return reply

        async def reply(asi: AsyncSteps, line: bytes) -> None:
            await send(line)

        while (request := await client.line()) is not None:
            if request[0] == 33:  # b"!"
                await self.control(request, send)
                continue
            asi = AsyncSteps({"request": request})
            asi.sync(limiter, roundtrip)
            asi.add(reply)
            try:
                await asi.promise()
            except FutoInError as e:
                if e.code != Errors.DefenseRejected:
                    raise
                await send(BUSY)


#: ``FUTOIN_SERVICE_PROFILE=FILE``: cProfile the front over one measured window and dump the
#: stats to FILE; ``FUTOIN_SERVICE_PROFILE_MARK=N``: the window starts at the N-th ``!mark``
#: (1: the ``ok`` phase, the default; 4: the ``reject`` phase) and ends at the next one.
_PROFILE = os.environ.get("FUTOIN_SERVICE_PROFILE")
_PROFILE_MARK = int(os.environ.get("FUTOIN_SERVICE_PROFILE_MARK", "1"))
_marks = [0]
_profiler: list[cProfile.Profile] = []


def _profile_mark() -> None:
    if not _PROFILE:
        return
    _marks[0] += 1
    if _marks[0] == _PROFILE_MARK:
        profiler = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
        _profiler.append(profiler)
        profiler.enable()
    elif _marks[0] == _PROFILE_MARK + 1:
        _profiler[0].disable()
        _profiler[0].dump_stats(_PROFILE)


def _scope_class(backend: str) -> Any:
    if backend == "trio":
        import trio

        return trio.CancelScope
    return anyio.CancelScope


_ANYIO_EOF = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


async def serve(impl: str, backend: str, backend_port: int) -> None:
    front = Front(impl, backend, backend_port)
    async with anyio.create_task_group() as tg:
        front.tg = tg
        await serve_tcp(backend, front.handle)


def main(argv: list[str]) -> int:
    impl, backend, backend_port = argv
    if impl not in IMPLS or backend not in ("asyncio", "trio"):
        raise SystemExit(f"usage: {__doc__.splitlines()[2]}")
    anyio.run(serve, impl, backend, int(backend_port), backend=backend)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

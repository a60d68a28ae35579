"""A Trio service on ``async def`` steps: a root per request, raw Trio socket I/O, a Limiter.

The front answers each request line with one AsyncSteps root, run by ``await asi.promise()``
in the connection's own task. The root's step sets a deadline, takes the Limiter's only place
and calls the backend in an ``async def`` step with plain Trio code: ``trio.open_tcp_stream``
and a nursery child that sends while the step receives. A backend slower than the deadline
gives ``Timeout``; a second request while the place is taken gives ``DefenseRejected``; a
client that hangs up cancels its request (a nursery of the front watches the connection).
The step's cancel handler runs for every request that did not succeed::

    python examples/trio_service.py

prints::

    one: ok ONE
    never: Timeout
    two: DefenseRejected
    held: ok HELD
    hang: the client hung up, the front cancelled its request
    cancel handlers ran for: never, two, hang
    Limiter: held 0, waiting 0, rejected 1
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

import trio

from futoin_anyio import AsyncSteps, FutoInError, Limiter

HOST = "127.0.0.1"
DEADLINE_MS = 100


async def read_line(stream: trio.SocketStream) -> bytes:
    """One line, or ``b""`` if the peer closes first."""
    line = b""
    while not line.endswith(b"\n"):
        data = await stream.receive_some()
        if not data:
            return b""
        line += data
    return line


class Backend:
    """Answers a word with the word in capitals; ``never`` never, ``held`` when released."""

    def __init__(self) -> None:
        self.reached = {b"held": trio.Event(), b"hang": trio.Event()}
        self.release = trio.Event()

    async def handle(self, stream: trio.SocketStream) -> None:
        word = (await read_line(stream)).strip()
        if word in self.reached:
            self.reached[word].set()
        if word in (b"never", b"hang"):
            await trio.sleep_forever()
        if word == b"held":
            await self.release.wait()
        await stream.send_all(word.upper() + b"\n")


class Front:
    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        self.limiter = Limiter(concurrent=1, max_queue=0, rate=100)
        self.cancelled: list[str] = []
        self.hung_up = trio.Event()

    async def call_backend(self, asi: AsyncSteps) -> str:
        """An ``async def`` step: plain Trio I/O, cancelled by the step's deadline."""
        stream = await trio.open_tcp_stream(HOST, self.backend_port)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, asi.state.request)
            answer = await read_line(stream)
        return answer.strip().decode()

    def request(self, asi: AsyncSteps) -> None:
        """The root's step: a deadline, a cancel handler, the Limiter around the call."""
        asi.set_timeout(DEADLINE_MS)
        asi.set_cancel(lambda asi: self.cancelled.append(asi.state.request.strip().decode()))
        asi.sync(self.limiter, self.call_backend)

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        while request := await read_line(stream):
            answer = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.cancel_on_hang_up, stream, nursery.cancel_scope)
                asi = AsyncSteps({"request": request}).add(self.request)
                try:
                    answer = f"ok {await asi.promise()}"
                except FutoInError as e:  # Timeout, DefenseRejected
                    answer = e.code
                nursery.cancel_scope.cancel()  # answered: stop watching
            if answer is None:  # the watcher cancelled the request: nobody to answer
                self.hung_up.set()
                return
            await stream.send_all(answer.encode() + b"\n")

    @staticmethod
    async def cancel_on_hang_up(stream: trio.SocketStream, scope: trio.CancelScope) -> None:
        if not await stream.receive_some():  # one request at a time: only the end can come
            scope.cancel()


async def serve(nursery: trio.Nursery, handler: Any) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host=HOST))
    return int(listeners[0].socket.getsockname()[1])


async def main() -> None:
    backend = Backend()
    async with trio.open_nursery() as servers:
        front = Front(await serve(servers, backend.handle))
        port = await serve(servers, front.serve_connection)

        async def ask(word: str) -> None:
            async with await trio.open_tcp_stream(HOST, port) as stream:
                await stream.send_all(word.encode() + b"\n")
                print(f"{word}:", (await read_line(stream)).decode().strip())

        await ask("one")
        await ask("never")
        async with trio.open_nursery() as clients:
            clients.start_soon(ask, "held")
            await backend.reached[b"held"].wait()  # "held" has the Limiter's only place
            await ask("two")
            backend.release.set()
        async with await trio.open_tcp_stream(HOST, port) as stream:
            await stream.send_all(b"hang\n")
            await backend.reached[b"hang"].wait()
        await front.hung_up.wait()
        print("hang: the client hung up, the front cancelled its request")
        print("cancel handlers ran for:", ", ".join(front.cancelled))
        stats = front.limiter.statistics()
        print(f"Limiter: held {stats.held}, waiting {stats.waiting}, rejected {stats.rejected}")
        servers.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["trio"], default="trio", help="Trio only")
    parser.parse_args()
    trio.run(main)

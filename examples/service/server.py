"""The demo server: each request is one AsyncSteps flow.

A request's flow, built once as a model and cloned per request (FTN12 1.5)::

    request                      set_timeout(deadline); sync(limiter, ...)
     └─ (inside the Limiter)
         ├─ parallel
         │   ├─ users back-end   holds a connection; cancel handler releases it
         │   └─ orders back-end  holds a connection; cancel handler releases it
         └─ answer               success({"users": ..., "orders": ...})

* A full Limiter queue fails the flow with ``DefenseRejected`` at once.
* The deadline covers the wait in the Limiter and both back-end calls; on
  expiry the waiting steps' cancel handlers run and the flow fails with
  ``Timeout``.
* If the client hangs up, the AnyIO cancel scope around ``promise()`` is
  cancelled: the cancel handlers run (connections released, the Limiter place
  freed) and the request is counted as cancelled on disconnect.

Run it alone with ``python -m examples.service.server --port 8765``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import logging
import random
import signal
from collections import Counter
from typing import Any

import anyio
from anyio.abc import SocketStream

from futoin_anyio import AsyncSteps, FutoInError, Limiter, dump

from .protocol import DISCONNECTED, LineStream

logger = logging.getLogger(__name__)


class SimulatedBackend:
    """A remote service reached through a connection pool, simulated with timers.

    :meth:`call` is a step in the FTN12 style: it takes a connection, starts
    the request, and waits for the reply with a cancel handler installed, so
    that however the flow ends (success, timeout, a failed sibling, the
    client hanging up) the connection goes back to the pool exactly once.
    """

    def __init__(self, name: str, rng: random.Random, typical_ms: float, slow_ratio: float):
        self.name = name
        self._rng = rng
        self._typical_ms = typical_ms
        self._slow_ratio = slow_ratio
        #: Connections currently taken from the pool.
        self.open_connections = 0
        self.calls = 0
        #: Connections given back by a cancel handler.
        self.released_on_cancel = 0

    def _latency_ms(self) -> float:
        if self._rng.random() < self._slow_ratio:
            return self._rng.uniform(10, 20) * self._typical_ms  # a slow tail
        return self._rng.uniform(0.5, 1.5) * self._typical_ms

    def call(self, asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None
        self.calls += 1
        self.open_connections += 1  # take a connection from the pool

        def reply() -> None:
            self.open_connections -= 1
            asi.state[self.name] = {"backend": self.name, "value": self._rng.randrange(1000)}
            asi.success()

        timer = tool.deferred(self._latency_ms(), reply)

        def oncancel(asi: AsyncSteps) -> None:
            tool.cancel(timer)
            self.open_connections -= 1
            self.released_on_cancel += 1

        asi.set_cancel(oncancel)

    def statistics(self) -> dict[str, int]:
        return {
            "open_connections": self.open_connections,
            "calls": self.calls,
            "released_on_cancel": self.released_on_cancel,
        }


class Server:
    """Serves requests, one AsyncSteps flow each.

    :param concurrent: Limiter: requests processed at once.
    :param max_queue: Limiter: requests waiting for a place, beyond which
        ``DefenseRejected``.
    :param rate: Limiter: requests let in per ``period_ms``.
    :param burst: Limiter: requests waiting for the rate.
    :param deadline_ms: each request's ``set_timeout()``.
    :param users_ms: typical latency of the "users" back-end.
    :param orders_ms: typical latency of the "orders" back-end.
    :param slow_ratio: share of back-end calls that take 10-20 times longer.
    :param limiter: a limit object to use instead of a local ``Limiter`` built from the
        parameters above (the multi-process demo passes a ``RedisLimiter`` shared by all).
    """

    def __init__(
        self,
        *,
        concurrent: int = 16,
        max_queue: int = 16,
        rate: int = 60,
        period_ms: int = 100,
        burst: int = 16,
        deadline_ms: int = 150,
        users_ms: float = 10,
        orders_ms: float = 20,
        slow_ratio: float = 0.01,
        seed: int | None = None,
        limiter: Any = None,
    ) -> None:
        rng = random.Random(seed)
        self.limiter = limiter or Limiter(
            concurrent=concurrent, max_queue=max_queue, rate=rate, period_ms=period_ms, burst=burst,
            name="demo-service",
        )
        self.users = SimulatedBackend("users", rng, typical_ms=users_ms, slow_ratio=slow_ratio)
        self.orders = SimulatedBackend("orders", rng, typical_ms=orders_ms, slow_ratio=slow_ratio)
        self.deadline_ms = deadline_ms
        self.active_flows = 0
        self.outcomes: Counter[str] = Counter()
        self.model = self._build_model()

    def _build_model(self) -> AsyncSteps:
        """The request flow, built once; each request runs a clone of it."""

        def request(asi: AsyncSteps) -> None:
            asi.set_timeout(self.deadline_ms)
            asi.sync(self.limiter, process)

        def process(asi: AsyncSteps) -> None:
            asi.parallel().add(self.users.call).add(self.orders.call)
            asi.add(answer)

        def answer(asi: AsyncSteps) -> None:
            asi.success({"users": asi.state["users"], "orders": asi.state["orders"]})

        return AsyncSteps().add(request)

    async def process(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run one request's flow to its answer (cancellable by the caller)."""
        flow = self.model.clone()
        flow.state.request = request
        self.active_flows += 1
        try:
            result = await flow.promise()
        except FutoInError as e:
            self.outcomes[e.code] += 1
            return {"id": request.get("id"), "ok": False, "error": e.code, "info": str(e.info)}
        finally:
            self.active_flows -= 1
        self.outcomes["ok"] += 1
        return {"id": request.get("id"), "ok": True, "result": result}

    def statistics(self) -> dict[str, Any]:
        return {
            "limiter": dataclasses.asdict(self.limiter.statistics()),
            "backends": {b.name: b.statistics() for b in (self.users, self.orders)},
            "active_flows": self.active_flows,
            "outcomes": dict(self.outcomes),
        }

    async def handle(self, stream: SocketStream) -> None:
        """Serve one connection: requests one after another, until the client closes."""
        async with stream:
            lines = LineStream(stream)
            try:
                while (request := await lines.receive()) is not None:
                    if request.get("op") == "stats":
                        await lines.send(self.statistics())
                        continue
                    answer = await self._answer_unless_gone(lines, request)
                    if answer is None:
                        return  # the client hung up
                    await lines.send(answer)
            except DISCONNECTED:
                pass
            except ValueError as e:  # not our protocol
                logger.warning("closing a connection: %s", e)
                self.outcomes["bad_request"] += 1

    async def _answer_unless_gone(
        self, lines: LineStream, request: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The answer, or ``None`` if the client hung up first (the flow is then cancelled)."""
        answer: dict[str, Any] | None = None
        async with anyio.create_task_group() as tg:

            async def cancel_on_disconnect() -> None:
                await lines.wait_closed()
                tg.cancel_scope.cancel()  # the spec's "Invoker disconnect"

            tg.start_soon(cancel_on_disconnect)
            answer = await self.process(request)
            tg.cancel_scope.cancel()  # answered: stop watching
        if answer is None:
            self.outcomes["cancelled_on_disconnect"] += 1
        return answer


#: The :class:`Server` parameters that the command lines of this module and of ``demo.py`` set
#: (``--max-queue`` for ``max_queue``...); a test sizes its load with them.
OPTIONS = ("concurrent", "max_queue", "rate", "deadline_ms", "slow_ratio")
_LIMITS = ("concurrent", "max_queue", "rate", "period_ms", "burst")


def _default(name: str) -> Any:
    return inspect.signature(Server).parameters[name].default


def _number(kind: type, low: float, high: float | None = None) -> Any:
    """An argparse ``type`` that reads a ``kind`` number in ``[low, high]``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind.__name__}: {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"must be {bounds}, not {text}")
        return value

    return parse


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--concurrent``, ``--max-queue``, ``--rate``, ``--deadline-ms``, ``--slow-ratio``."""
    group = parser.add_argument_group("server", "the Limiter, the deadline and the back-ends")
    helps = {
        "concurrent": (_number(int, 1), "Limiter: requests processed at once"),
        "max_queue": (_number(int, 0), "Limiter: requests waiting for a place, then "
                                       "DefenseRejected"),
        "rate": (_number(int, 1), "Limiter: requests let in per 100 ms"),
        "deadline_ms": (_number(float, 1), "each request's set_timeout()"),
        "slow_ratio": (_number(float, 0, 1), "share of back-end calls 10-20 times slower"),
    }
    for name in OPTIONS:
        kind, text = helps[name]
        group.add_argument("--" + name.replace("_", "-"), type=kind, default=_default(name),
                           help=f"{text} (default {_default(name)})")


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The :data:`OPTIONS` parsed by :func:`add_options`, as ``Server`` keyword arguments."""
    return {name: getattr(args, name) for name in OPTIONS}


def options_argv(options: dict[str, Any]) -> list[str]:
    """The command-line arguments that :func:`add_options` parses back into ``options``."""
    return [arg for name, value in options.items()
            for arg in ("--" + name.replace("_", "-"), str(value))]


async def serve(port: int, host: str = "127.0.0.1", redis_port: int | None = None,
                reuse_port: bool = False, **options: Any) -> None:
    """Serve on ``port``; with ``redis_port``, the Limiter is a ``RedisLimiter`` shared by
    every server process using that Redis (``reuse_port``: several processes on one port).
    ``options`` are :class:`Server` keyword arguments (the limits apply to either Limiter)."""
    if redis_port is None:
        await _serve(Server(**options), port, host, reuse_port)
        return
    import coredis

    from futoin_anyio.redis import RedisLimiter

    limits = {name: options.pop(name, _default(name)) for name in _LIMITS}
    async with coredis.Redis(host="127.0.0.1", port=redis_port) as client:
        limiter = RedisLimiter(client, "demo-service", **limits, lease_ms=3000)
        await _serve(Server(limiter=limiter, **options), port, host, reuse_port)


async def _serve(server: Server, port: int, host: str, reuse_port: bool) -> None:
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port,
                                               reuse_port=reuse_port)
    if hasattr(signal, "SIGUSR1"):
        # kill -USR1 <pid> writes the flow dump; `python -m futoin_anyio.dump <pid>` prints it.
        dump.install_signal_handler()
    print(f"serving on {host}:{port}", flush=True)
    async with listener:
        await listener.serve(server.handle)


def main() -> None:
    parser = argparse.ArgumentParser(description="AsyncSteps demo server")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--redis-port", type=int, help="share the Limiter through this Redis")
    parser.add_argument("--reuse-port", action="store_true", help="several servers, one port")
    add_options(parser)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl+C stops the server
        anyio.run(functools.partial(serve, args.port, args.host, args.redis_port,
                                    args.reuse_port, **options_of(args)),
                  backend=args.backend)


if __name__ == "__main__":
    main()

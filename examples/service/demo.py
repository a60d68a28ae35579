"""Run the demo server and the load client together, then print the summary.

``python -m examples.service.demo --duration 10 [--backend trio] [--json] [--processes N]``

The server's limits, deadline and back-end tail are set with ``--concurrent``, ``--max-queue``,
``--rate``, ``--deadline-ms`` and ``--slow-ratio`` (see ``--help``).

With ``--processes N`` (N > 1), N server processes (asyncio and trio in turn) share one port
and one ``RedisLimiter`` on a throwaway ``redis-server``: the limits hold for the whole fleet.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from .client import render, run_load
from .server import Server, add_options, options_argv, options_of


async def demo(duration: float, connections: int, seed: int | None,
               **options: Any) -> dict[str, Any]:
    """Serve and load for ``duration`` seconds in one process; ``options`` go to ``Server``."""
    server = Server(seed=seed, **options)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        result = await run_load(
            "127.0.0.1", port, duration=duration, connections=connections, seed=seed
        )
        tg.cancel_scope.cancel()
    return result.summary()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def demo_processes(processes: int, backend: str, duration: float, connections: int,
                   seed: int | None, **options: Any) -> dict[str, Any]:
    """N server processes sharing one port and one RedisLimiter, loaded by one client."""
    redis_port, port = _free_port(), _free_port()
    redis = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(redis_port), "--bind",
         "127.0.0.1", "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    servers: list[subprocess.Popen[str]] = []
    try:
        for _ in range(500):  # until redis-server accepts connections
            try:
                socket.create_connection(("127.0.0.1", redis_port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.01)
        backends = [backend, "trio" if backend == "asyncio" else "asyncio"]
        for i in range(processes):
            servers.append(subprocess.Popen(
                [sys.executable, "-m", "examples.service.server", "--port", str(port),
                 "--reuse-port", "--redis-port", str(redis_port), "--backend", backends[i % 2],
                 *options_argv(options)],
                stdout=subprocess.PIPE, text=True))
        for p in servers:  # each prints "serving on ..." once it listens
            assert p.stdout is not None
            if not p.stdout.readline().startswith("serving on"):
                raise SystemExit("a server process failed to start")
        result = anyio.run(lambda: run_load("127.0.0.1", port, duration=duration,
                                            connections=connections, seed=seed),
                           backend=backend)
        return result.summary()
    finally:
        for p in [*servers, redis]:
            p.terminate()
        for p in [*servers, redis]:
            p.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--processes", type=int, default=1,
                        help="server processes sharing one RedisLimiter (needs redis-server)")
    add_options(parser)
    args = parser.parse_args()
    if args.processes < 1:
        parser.error("--processes must be >= 1")
    where = f"{args.processes} processes" if args.processes > 1 else args.backend
    print(f"demo service on {where}: {args.connections} connections for {args.duration} s",
          flush=True)
    if args.processes > 1:
        summary = demo_processes(args.processes, args.backend, args.duration,
                                 args.connections, args.seed, **options_of(args))
    else:
        summary = anyio.run(functools.partial(demo, args.duration, args.connections, args.seed,
                                              **options_of(args)),
                            backend=args.backend)
    print(json.dumps(summary) if args.json else render(summary))


if __name__ == "__main__":
    main()

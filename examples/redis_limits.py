"""Limits across processes: three OS processes share one ``RedisMutex`` and one ``RedisThrottle``.

Each worker process enters the shared mutex four times, twice as an AsyncSteps flow
(``asi.sync``) and twice as a plain task (``async with``), and counts in Redis how many holders
are inside at once; every entry also passes a shared throttle of 5 per 100 ms. The parent
prints what the workers recorded. Expected output::

    entries: 12
    max holders at once: 1

Run with ``python examples/redis_limits.py [--backend trio] [--port PORT]``; without
``--port`` it starts a throwaway ``redis-server`` of its own on a free port.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time

import anyio
import coredis

from futoin_anyio import AsyncSteps
from futoin_anyio.redis import RedisMutex, RedisThrottle

COUNT = """
local v = redis.call('INCR', KEYS[1])
if v > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], v) end
redis.call('INCR', KEYS[3])
"""


async def worker(port: int) -> None:
    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        mutex = RedisMutex(client, "example")
        throttle = RedisThrottle(client, "example", 5, period_ms=100)
        count = client.register_script(COUNT)

        async def inside() -> None:
            async with throttle:
                await count(keys=["ex:in", "ex:max", "ex:entries"], args=[])
                await anyio.sleep(0.01)
                await client.decr("ex:in")

        for i in range(4):
            if i % 2:
                async with mutex:
                    await inside()
            else:
                asi = AsyncSteps()

                async def section(asi: AsyncSteps) -> None:
                    await inside()

                asi.sync(mutex, section)
                await asi.promise()


async def report(port: int) -> None:
    async with coredis.Redis(host="127.0.0.1", port=port, decode_responses=True) as client:
        print("entries:", await client.get("ex:entries"))
        print("max holders at once:", await client.get("ex:max"))
        await client.delete(["ex:in", "ex:max", "ex:entries"])


def start_server() -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    exe = shutil.which("redis-server") or "redis-server"
    server = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
                              stdout=subprocess.DEVNULL)
    for _ in range(500):  # wait until it accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.01)
    return server, port


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--port", type=int)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        anyio.run(worker, args.port, backend=args.backend)
        return
    server, port = (None, args.port) if args.port else start_server()
    try:
        workers = [subprocess.Popen([sys.executable, __file__, "--worker", "--port", str(port),
                                     "--backend", backend])
                   for backend in (args.backend, "asyncio", "trio")]
        for w in workers:
            if w.wait(60):
                raise SystemExit(f"a worker failed with {w.returncode}")
        anyio.run(report, port, backend=args.backend)
    finally:
        if server is not None:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()

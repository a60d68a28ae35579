"""One OS process contending on a shared limit (used by the multi-process tests and benchmark).

``python -m redis_support.worker ADDRESS KIND NAME BACKEND ENTRIES [MODE] [LEASE_MS]``

ADDRESS: a port of 127.0.0.1 (``coredis.Redis``), or ``cluster:PORT`` (``coredis.RedisCluster``
from that node).

Each entry runs as an AsyncSteps flow (even entries) or a plain task (odd entries). Inside, it
counts itself in Redis (``INCR``), records the maximum seen, and counts itself out: the test
checks the invariants from outside. MODE: ``run`` (default); ``hold`` (enter once, count
itself in ``ready``, hold forever: the test SIGKILLs it); ``cancel`` (queue behind the
holders, be cancelled by an outer ``move_on_after``, then do ENTRIES entries).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import anyio.lowlevel
import coredis

from futoin_anyio import AsyncSteps, FutoInError
from futoin_anyio.redis import RedisLimiter, RedisMutex, RedisThrottle

_ENTER = """
local v = redis.call('INCR', KEYS[1])
local m = tonumber(redis.call('GET', KEYS[2]) or '0')
if v > m then redis.call('SET', KEYS[2], v) end
redis.call('INCR', KEYS[3])
return v
"""


def make(client: Any, kind: str, name: str, lease_ms: float) -> Any:
    if kind == "mutex":
        return RedisMutex(client, name, max=2, lease_ms=lease_ms)
    if kind == "throttle":
        return RedisThrottle(client, name, 50, period_ms=100, lease_ms=lease_ms)
    return RedisLimiter(client, name, concurrent=3, max_queue=None, rate=50, period_ms=100,
                        burst=None, lease_ms=lease_ms)


def connect(address: str) -> Any:
    if address.startswith("cluster:"):
        return coredis.RedisCluster(host="127.0.0.1", port=int(address[8:]))
    return coredis.Redis(host="127.0.0.1", port=int(address))


async def main(address: str, kind: str, name: str, entries: int, mode: str,
               lease_ms: float) -> None:
    async with connect(address) as client:
        prim = make(client, kind, name, lease_ms)
        enter = client.register_script(_ENTER)
        keys = [f"test:{{{name}}}:in", f"test:{{{name}}}:max", f"test:{{{name}}}:count"]
        out = f"test:{{{name}}}:in"

        async def inside() -> None:
            await enter(keys=keys, args=[])
            await anyio.lowlevel.checkpoint()
            await client.decr(out)

        async def one(i: int) -> None:
            if i % 2:
                async with prim:
                    await inside()
                return
            asi = AsyncSteps()

            async def step(asi: AsyncSteps) -> None:
                await inside()

            asi.sync(prim, step)
            await asi.promise()

        if mode == "hold":
            async with prim:
                await client.incr(f"test:{{{name}}}:ready")
                await anyio.sleep_forever()
        if mode == "cancel":
            with anyio.move_on_after(0.3) as scope:
                await one(0)
            await client.set(f"test:{{{name}}}:cancelled", "1" if scope.cancelled_caught else "0")
        errors = 0
        for i in range(entries):
            try:
                await one(i)
            except (FutoInError, coredis.exceptions.RedisError):
                # A limit's CommError, or the section's own Redis calls when Redis restarts
                # under them (``async with`` lets them through): counted, and the next goes on.
                errors += 1
        await client.incrby(f"test:{{{name}}}:errors", errors)


if __name__ == "__main__":
    a = sys.argv[1:]
    anyio.run(main, a[0], a[1], a[2], int(a[4]), a[5] if len(a) > 5 else "run",
              float(a[6]) if len(a) > 6 else 30000.0, backend=a[3])

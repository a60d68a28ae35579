"""futoin_anyio.redis on a real Redis Cluster through a failover: the master of the limit's
slot is killed (``kill -9``), its replica is promoted (2-3 s with ``cluster-node-timeout``
1000 ms), and the limit goes on.

Each primitive object stands for one process. After each test the killed node is started
again on its port and folder; it rejoins as a replica, and the cluster is whole again.
"""

from __future__ import annotations

import gc
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from redis_support.cluster import RedisCluster, command

from futoin_anyio import AsyncSteps, Errors, FutoInError
from futoin_anyio.redis import RedisMutex

coredis = pytest.importorskip("coredis")

# coredis leaves memory streams of its failed connections unclosed (ResourceWarning at GC).
pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]

#: A lease that outlasts the failover (2-3 s here): the lease rule of docs/redis.rst.
LEASE_MS = 10000


async def wait_for(cond: Callable[[], bool], limit: float = 5) -> None:
    """Wait until ``cond()`` holds (another task's state): bounded, polled."""
    with anyio.fail_after(limit):
        while not cond():  # noqa: ASYNC110
            await anyio.sleep(0.001)


@asynccontextmanager
async def failover(cluster: RedisCluster, name: str) -> AsyncIterator[tuple[int, int, Any]]:
    """The ports of the master and the replica of ``name``'s slot, and a client; afterwards
    the killed master is started again and the cluster is whole."""
    master, replica = cluster.slot_nodes(f"futoin:{{{name}}}:m:h")
    start = next(p for p in cluster.ports if p != master)
    try:
        async with coredis.RedisCluster(host="127.0.0.1", port=start) as client:
            yield master, replica, client
    finally:
        if master not in cluster.alive():
            await anyio.to_thread.run_sync(cluster.start, master)
        await anyio.to_thread.run_sync(cluster.wait_ok)
        gc.collect()  # coredis's unclosed streams warn here, under this module's filter


async def promoted(cluster: RedisCluster, port: int, limit: float = 20) -> float:
    """Wait until the replica on ``port`` is a master; returns how long it took."""
    start = anyio.current_time()
    with anyio.fail_after(limit):
        while await anyio.to_thread.run_sync(cluster.role, port) != "master":  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return anyio.current_time() - start


async def queued_tokens(client: Any, name: str) -> set[str]:
    """The tokens in ``name``'s queue; the test's own reads retry (bounded) while the cluster
    client learns the new master."""
    with anyio.fail_after(10):
        while True:
            try:
                return {t.decode() for t in await client.zrange(f"futoin:{{{name}}}:m:q", 0, -1)}
            except Exception:
                await anyio.sleep(0.05)


class Entry:
    """One entry that retries on ``CommError`` (as an application would) until it gets in,
    then holds until ``gate`` is set; records the errors, and when it was inside."""

    def __init__(self, mutex: RedisMutex, limit: float = 20) -> None:
        self.mutex = mutex
        self.limit = limit
        self.errors: list[str] = []
        self.entered: float | None = None
        self.left: float | None = None
        self.gate = anyio.Event()

    async def run(self) -> None:
        with anyio.fail_after(self.limit):
            while True:
                try:
                    async with self.mutex:
                        self.entered = anyio.current_time()
                        await self.gate.wait()
                        self.left = anyio.current_time()
                    return
                except FutoInError as e:
                    assert e.code == Errors.CommError, e
                    self.errors.append(str(e.info))
                    await anyio.sleep(0.05)  # an application's retry pause


async def test_failover_fails_waiters_clearly_and_recovers(redis_cluster: RedisCluster,
                                                           anyio_backend: str) -> None:
    """A durable holder is inside and two waiters of another process queue; the master is
    killed. The waiters fail with ``CommError`` within a bound; their places, replicated,
    are dropped once the replica is promoted; the holder keeps its permit (its lease outlasts
    the failover), a third process waits for it and gets in within 100 ms of its leaving."""
    cluster = redis_cluster
    name = f"fo-{uuid.uuid4().hex[:8]}"
    async with failover(cluster, name) as (master, replica, client):
        holder = RedisMutex(client, name, lease_ms=LEASE_MS, wait_replicas=1)
        waiters = RedisMutex(client, name, lease_ms=LEASE_MS)
        third = RedisMutex(client, name, lease_ms=LEASE_MS)
        held = Entry(holder)
        failed: list[tuple[str, str, float]] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(held.run)
            await wait_for(lambda: held.entered is not None)

            async def wait_flow() -> None:
                asi = AsyncSteps()
                asi.sync(waiters, lambda asi: None)
                try:
                    await asi.promise()
                except FutoInError as e:
                    failed.append((e.code, str(asi.state.error_info),
                                   anyio.current_time() - killed))

            killed = 0.0
            for _ in range(2):
                tg.start_soon(wait_flow)
            await wait_for(lambda: waiters.statistics().waiting == 2)
            queued = await queued_tokens(client, name)
            assert len(queued) == 2
            killed = anyio.current_time()
            await anyio.to_thread.run_sync(cluster.kill, master)
            await wait_for(lambda: len(failed) == 2, 10)  # bounded: no hang
            took = await promoted(cluster, replica)
            for code, info, when in failed:
                assert code == Errors.CommError
                assert info.startswith(f"RedisMutex {name!r}: Redis unreachable ("), info
                assert when < 5  # the blocking wait breaks with the connection
            # No stale place: the waiters' process drops them once the new master answers.
            with anyio.fail_after(10):
                while queued & await queued_tokens(client, name):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            dropped = anyio.current_time() - killed
            newcomer = Entry(third)
            tg.start_soon(newcomer.run)
            await wait_for(lambda: third.statistics().waiting == 1, 10)
            assert newcomer.entered is None  # the holder is still inside
            held.gate.set()
            await wait_for(lambda: newcomer.entered is not None, 5)
            newcomer.gate.set()
        assert held.left is not None and newcomer.entered is not None
        handoff = newcomer.entered - held.left
        print(f"failover ({anyio_backend}): waiters failed after "
              f"{', '.join(f'{w:.2f}' for _, _, w in failed)} s ({failed[0][1]}); replica "
              f"promoted {took:.2f} s after the kill; stale places gone after {dropped:.2f} s; "
              f"newcomer in {1000 * handoff:.1f} ms after the holder left; its errors on the "
              f"way: {newcomer.errors[:1]}")
        assert 0 <= handoff < 0.1  # never inside together, and no stale place in between
        assert holder.statistics().lost == 0


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "not-durable"])
async def test_failover_after_a_grant_the_replica_missed(redis_cluster: RedisCluster,
                                                         anyio_backend: str,
                                                         durable: bool) -> None:
    """The replica's link is cut (the replica frozen, so it cannot resync) just before an
    entry; then the master is killed and the replica promoted without the latest writes.

    Durable (``wait_replicas=1``): the entry is refused (the grant did not reach the replica),
    so after the failover the next holder is the only one. Not durable: the entry got in, the
    new master never heard of its permit, and a second process gets in while it is inside --
    what docs/redis.rst warns of; its process counts the permit as lost."""
    cluster = redis_cluster
    name = f"fo-cut-{uuid.uuid4().hex[:8]}"
    async with failover(cluster, name) as (master, replica, client):
        first = RedisMutex(client, name, lease_ms=LEASE_MS, wait_replicas=int(durable),
                           wait_timeout_ms=300)
        second = RedisMutex(client, name, lease_ms=LEASE_MS)
        # Warm up (scripts loaded on the master, replicated), with time to spare: a replica
        # that just rejoined after the last test's failover may be slow to answer at first.
        async with RedisMutex(client, name, wait_replicas=1, wait_timeout_ms=10000):
            pass
        a, b = Entry(first), Entry(second)
        errors: list[str] = []
        # Frozen first, so that it cannot reconnect (a replica relinks within milliseconds).
        cluster.signal(replica, signal.SIGSTOP)
        await anyio.to_thread.run_sync(command, master, "CLIENT", "KILL", "TYPE", "replica")
        try:
            async with anyio.create_task_group() as tg:
                if durable:
                    with pytest.raises(FutoInError) as info:
                        async with first:
                            pass  # pragma: no cover - refused
                    errors.append(str(info.value.info))
                else:
                    tg.start_soon(a.run)
                    await wait_for(lambda: a.entered is not None)
                await anyio.to_thread.run_sync(cluster.kill, master)
                cluster.signal(replica, signal.SIGCONT)
                took = await promoted(cluster, replica)
                tg.start_soon(b.run)
                await wait_for(lambda: b.entered is not None, 20)
                both = a.entered is not None and a.left is None
                if not durable:
                    # The lost permit is found at the holder's next renewal (every third of
                    # its lease), while it is still inside.
                    await wait_for(lambda: first.statistics().lost == 1, LEASE_MS / 1000)
                a.gate.set()
                b.gate.set()
        finally:
            cluster.signal(replica, signal.SIGCONT)
        print(f"cut link, {'durable' if durable else 'not durable'} ({anyio_backend}): "
              f"promoted after {took:.2f} s; first {errors or 'got in'}; second got in "
              f"{'while the first was inside' if both else 'alone'} after "
              f"{len(b.errors)} CommError(s)")
        if durable:
            assert errors == [f"RedisMutex {name!r}: the grant did not reach 1 replica(s) "
                              "within 300 ms (WAIT): not let in"]
            assert a.entered is None and not both  # no second holder
            assert first.statistics().lost == 0
        else:
            assert both  # the documented hazard: a second holder
            assert first.statistics().lost == 1

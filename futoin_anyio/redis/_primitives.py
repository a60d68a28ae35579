"""RedisMutex, RedisThrottle and RedisLimiter: the ISync primitives over shared Redis state."""

from __future__ import annotations

import logging
import math
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, final

from anyio import CancelScope, get_cancelled_exc_class
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from .._errors import Errors, FutoInError
from .._hooks import check_section, flow_key, go_on_with, on_exit
from .._reasons import cancel_scope
from .._steps import AsyncSteps
from .._sync_common import (
    check_count,
    check_period,
    check_queue,
    task_key,
)
from .._types import ErrorHandler, StepFunc, _Item
from .._waitqueue import DONE, HELD, NEW, QUEUED, state_name
from ._agent import Agent, Waiter, describe
from ._cores import LimiterCore, MutexCore, ThrottleCore

__all__ = (
    "RedisLimiter",
    "RedisLimiterStatistics",
    "RedisMutex",
    "RedisMutexStatistics",
    "RedisThrottle",
    "RedisThrottleStatistics",
)

logger = logging.getLogger("futoin_anyio.redis")


def _check_name(owner: str, name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")
    if not name or "{" in name or "}" in name:
        raise ValueError(f"{owner}: name must be a non-empty str without braces, got {name!r}")
    return name


def _check_client(owner: str, client: object) -> Any:
    if not callable(getattr(client, "register_script", None)) or \
            not hasattr(client, "connection_pool"):
        raise TypeError(f"{owner}: client must be a coredis.Redis or RedisCluster, "
                        f"got {type(client).__name__}")
    return client


class _Entry:
    """The step ``sync()`` adds: wait for entry (a task in the client's task group does the
    Redis part), then run ``func`` as its one sub-step; leave when the step leaves the stack."""

    __slots__ = ("again", "args", "asi", "func", "item", "key", "onerror", "prim", "scope",
                 "state")

    def __init__(self, prim: _Base, func: StepFunc, onerror: ErrorHandler | None) -> None:
        self.prim = prim
        self.func = func
        self.onerror = onerror
        self.item: _Item = self._section
        self.state = NEW
        self.key: object = None
        self.asi: AsyncSteps | None = None
        self.args: tuple[Any, ...] = ()
        self.scope: CancelScope | None = None
        self.again = False  # re-entered by a flow inside: only the rate is waited for

    def __call__(self, asi: AsyncSteps, *args: Any) -> None:
        entry = self if self.state is NEW else _Entry(self.prim, self.func, self.onerror)
        prim = entry.prim
        key = entry.key = flow_key(asi)
        on_exit(asi, _Entry.leave, entry)
        if prim._owned(key):
            if not prim._rate_on_reentry:
                prim._owners[key][0] += 1
                entry.state = HELD
                if args:
                    asi.success_step(*args)
                asi.add(entry.func, entry.onerror)
                return
            entry.again = True
        agent = prim._agent
        agent.start()
        entry.asi = asi
        entry.args = args
        entry.state = QUEUED
        agent._task_group().start_soon(entry._acquire)
        asi.wait_external()

    async def _acquire(self) -> None:
        if self.state is not QUEUED:
            return  # left before this task started
        prim = self.prim
        try:
            with CancelScope() as scope:
                self.scope = scope
                again = self.again
                try:
                    ticket = await (prim._enter_again() if again else prim._enter())
                except FutoInError as e:
                    self._fail(e)
                    return
                if self.state is not QUEUED:  # the step ended while the grant was on its way
                    if not again:
                        prim._release_ticket(ticket)
                    return
                asi = self.asi
                assert asi is not None
                args = self.args
                self.asi = None
                self.args = ()
                if not go_on_with(asi, self.item, args):
                    self.state = DONE
                    if not again:
                        prim._release_ticket(ticket)
                    return
                self.state = HELD
                if again:
                    prim._owners[self.key][0] += 1  # the outer entry is still inside
                else:
                    prim._hold(self.key, ticket)
        except get_cancelled_exc_class():
            # The client is closing under a waiting flow: fail it rather than leave it hanging.
            self._fail(FutoInError(Errors.CommError,
                                   f"{prim._agent.what}: the coredis client was closed"))
            raise
        except Exception as e:  # pragma: no cover - defensive: never break the client's tasks
            logger.exception("%s: entry failed", prim._agent.what)
            self._fail(FutoInError(Errors.InternalError, describe(e)))

    def _section(self, asi: AsyncSteps, *args: Any) -> None:
        """Run ``func``, then give the place back before the flow goes on."""
        if args:
            asi.success_step(*args)
        asi.add(self.func, self.onerror)
        asi.add(self._release)

    def _release(self, asi: AsyncSteps, *args: Any) -> None:
        """The section succeeded: the release reaches Redis before the next step runs (so an
        application that exits its client right after the flow leaves nothing behind)."""
        if self.state is not HELD:
            asi.success(*args)
            return
        self.state = DONE
        ticket = self.prim._unhold(self.key)
        if ticket is None:
            asi.success(*args)
            return
        asi.wait_external()
        self.prim._agent._task_group().start_soon(self._released, asi, ticket, args)

    async def _released(self, asi: AsyncSteps, ticket: Any, args: tuple[Any, ...]) -> None:
        await self.prim._release_now(ticket)
        if asi:
            asi.success(*args)

    def _fail(self, e: FutoInError) -> None:
        if self.state is not QUEUED:
            return
        self.state = DONE
        asi = self.asi
        self.asi = None
        self.args = ()
        if asi:
            with suppress(FutoInError):  # error() raises after scheduling the unwinding
                asi.error(e.code, e.info)

    def leave(self) -> None:
        """The entry's step ended, however: leave the queue, or give the place back."""
        state = self.state
        self.state = DONE
        if state is QUEUED:
            self.asi = None
            scope = self.scope
            if scope is not None:
                # The waiting task leaves the shared queue.
                cancel_scope(scope, "the waiting flow left the queue (cancelled or failed)")
        elif state is HELD:
            self.prim._leave(self.key)

    def __repr__(self) -> str:
        return f"<{self.prim._kind}.sync {self.func!r} {state_name(self.state)}>"


class _Base:
    """ISync and ``async with`` over ``_enter()`` / ``_release_ticket()``."""

    _kind = ""
    _reentrant = False
    _rate_on_reentry = False

    def __init__(self, client: Any, name: str, lease_ms: float, wait_replicas: int,
                 wait_timeout_ms: float) -> None:
        kind = self._kind
        self._client = _check_client(kind, client)
        self._name = _check_name(kind, name)
        self._lease_ms = check_period(kind, "lease_ms", lease_ms)
        replicas = check_count(kind, "wait_replicas", wait_replicas, 0)
        wait_ms = math.ceil(check_period(kind, "wait_timeout_ms", wait_timeout_ms))
        self._agent = Agent(client, name, self._lease_ms, f"{kind} {name!r}", replicas, wait_ms)
        self._owners: dict[object, list[Any]] = {}

    async def _enter(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _release_ticket(self, ticket: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- ISync ------------------------------------------------------------------------------------

    def sync(self, asi: AsyncSteps, func: StepFunc, onerror: ErrorHandler | None = None) -> None:
        """Add a step to ``asi`` that runs ``func`` within this shared limit (FTN12 §1.11.3).

        ``func`` receives the incoming success arguments; its result goes to the following
        step as if there were no limit. ``onerror`` is ``func``'s error handler. A full queue
        fails the added step with ``DefenseRejected``; Redis failing while the step waits fails
        it with ``CommError``.
        """
        check_section(self._kind, func, onerror)
        asi.add(_Entry(self, func, onerror))

    # -- plain AnyIO ------------------------------------------------------------------------------

    async def __aenter__(self) -> None:
        key = task_key()
        await checkpoint_if_cancelled()
        if self._owned(key):
            if self._rate_on_reentry:
                await self._enter_again()
            else:
                await cancel_shielded_checkpoint()
            self._owners[key][0] += 1
            return
        ticket = await self._enter()
        self._hold(key, ticket)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        ticket = self._unhold(task_key(), f"{self._kind}.__aexit__()")
        if ticket is not None:
            await self._release_now(ticket)

    async def _release_now(self, ticket: Any) -> None:
        """Give the place back and wait until Redis has it (shielded, bounded in time)."""
        agent = self._agent
        number = agent.begin()
        try:
            with CancelScope(shield=True):
                await self._release_async(ticket)
        except FutoInError as e:
            logger.debug("%s: release failed (its lease ends it): %s", agent.what, e)
        finally:
            agent.end(number)

    async def _release_async(self, ticket: Any) -> None:
        return None

    # -- owners -----------------------------------------------------------------------------------

    def _owned(self, key: object) -> bool:
        """``key`` (a flow or task) is inside already and may enter again."""
        return self._reentrant and key in self._owners

    async def _enter_again(self) -> None:  # pragma: no cover - only the Limiter re-enters so
        raise NotImplementedError

    def _hold(self, key: object, ticket: Any) -> None:
        if ticket is not None:
            self._owners[key] = [1, ticket]

    def _unhold(self, key: object, what: str | None = None) -> Any:
        """One entry of ``key`` leaves; returns the ticket to release when it was the last."""
        owned = self._owners.get(key)
        if owned is None:
            if what is not None and self._reentrant:
                raise RuntimeError(f"{what}: the {self._kind} is not held by this task")
            return None
        owned[0] -= 1
        if owned[0]:
            return None
        del self._owners[key]
        return owned[1]

    def _leave(self, key: object) -> None:
        ticket = self._unhold(key)
        if ticket is not None:
            self._release_ticket(ticket)

    def __repr__(self) -> str:
        return f"<{self._kind} {self._name!r} held={len(self._owners)}>"


@final
@dataclass(frozen=True)
class RedisMutexStatistics:
    """A snapshot of a :class:`RedisMutex`: this process's view, then the shared one."""

    #: Flows and tasks of this process inside (a re-entered one counts once).
    held: int
    #: Flows and tasks of this process waiting.
    waiting: int
    #: Entries of this process refused with ``DefenseRejected``.
    rejected: int
    #: The ``max`` given to the constructor.
    max: int
    #: The ``max_queue`` given to the constructor (``None``: unlimited).
    max_queue: int | None
    #: Holders in every process, as of this process's last exchange with Redis.
    shared_held: int
    #: Waiters in every process, as of this process's last exchange with Redis.
    shared_waiting: int
    #: Permits of this process whose lease Redis lost (expired, or a restarted server).
    lost: int


@final
class RedisMutex(_Base):
    """A :class:`~futoin_anyio.Mutex` shared by every process that uses the same Redis server
    and ``name``: at most ``max`` holders in all, the others wait in FIFO order.

    :param client: an entered ``coredis.Redis`` (or ``RedisCluster``).
    :param name: the shared limit's name.
    :param max: holders at once, in all processes (``>= 1``).
    :param max_queue: waiters, in all processes (``>= 0``); ``None`` for no limit.
    :param lease_ms: how long a permit or queue place outlives a process that stopped renewing
        it (renewed every third of it while held or queued); it must also outlast the longest
        Redis outage or failover a holder should survive (see the docs' lease rule).
    :param wait_replicas: durable grants: let an entry in only once its grant is on this many
        replicas (Redis ``WAIT``), so that a failover cannot give its permit to another
        process; ``0`` (the default): do not wait (replication is asynchronous).
    :param wait_timeout_ms: how long a grant may wait for the replicas; past it the entry
        fails with ``CommError`` and its permit is given back.
    """

    _kind = "RedisMutex"
    _reentrant = True

    def __init__(self, client: Any, name: str, max: int = 1, max_queue: int | None = None,
                 lease_ms: float = 30000, wait_replicas: int = 0,
                 wait_timeout_ms: float = 1000) -> None:
        super().__init__(client, name, lease_ms, wait_replicas, wait_timeout_ms)
        self._max = check_count(self._kind, "max", max, 1)
        self._max_queue = check_queue(self._kind, "max_queue", max_queue)
        self._core = MutexCore(self._agent, "m:", self._max, self._max_queue,
                               "RedisMutex queue limit (max_queue) reached")

    async def _enter(self) -> Waiter:
        return await self._core.acquire()

    def _release_ticket(self, ticket: Any) -> None:
        self._core.release(ticket)

    async def _release_async(self, ticket: Any) -> None:
        self._agent.set_done(ticket)
        await self._core.leave_token(ticket.token)

    def statistics(self) -> RedisMutexStatistics:
        """Return this process's holders, waiters and rejections, and the shared counts."""
        c = self._core
        return RedisMutexStatistics(
            held=len(self._owners), waiting=c.waiting, rejected=c.rejected, max=self._max,
            max_queue=self._max_queue, shared_held=c.shared_held,
            shared_waiting=c.shared_waiting, lost=self._agent.lost)


@final
@dataclass(frozen=True)
class RedisThrottleStatistics:
    """A snapshot of a :class:`RedisThrottle`: this process's view, then the shared one."""

    #: Entries of this process let in since creation.
    entered: int
    #: Flows and tasks of this process waiting for a later period.
    waiting: int
    #: Entries of this process refused with ``DefenseRejected``.
    rejected: int
    #: The ``max`` given to the constructor.
    max: int
    #: The period length in milliseconds.
    period_ms: float
    #: The ``max_queue`` given to the constructor (``None``: unlimited).
    max_queue: int | None
    #: Entries of the current period in every process, as last seen.
    shared_entries: int
    #: Waiters in every process, as last seen.
    shared_waiting: int


@final
class RedisThrottle(_Base):
    """A :class:`~futoin_anyio.Throttle` shared by every process that uses the same Redis
    server and ``name``: at most ``max`` entries per period in all, waiters in FIFO order.

    Periods follow the Redis server's clock. An entry let in counts for its period whatever
    it does next (also when it is cancelled before it resumes). ``lease_ms``,
    ``wait_replicas`` and ``wait_timeout_ms`` are as for :class:`RedisMutex`.
    """

    _kind = "RedisThrottle"

    def __init__(self, client: Any, name: str, max: int, period_ms: float = 1000,
                 max_queue: int | None = None, lease_ms: float = 30000, wait_replicas: int = 0,
                 wait_timeout_ms: float = 1000) -> None:
        super().__init__(client, name, lease_ms, wait_replicas, wait_timeout_ms)
        self._max = check_count(self._kind, "max", max, 1)
        self._period_ms = check_period(self._kind, "period_ms", period_ms)
        self._max_queue = check_queue(self._kind, "max_queue", max_queue)
        self._core = ThrottleCore(self._agent, "t:", self._max, self._period_ms,
                                  self._max_queue, "RedisThrottle queue limit (max_queue) reached")

    async def _enter(self) -> None:
        await self._core.acquire()

    def _release_ticket(self, ticket: Any) -> None:
        return None

    def statistics(self) -> RedisThrottleStatistics:
        """Return this process's entries, waiters and rejections, and the shared counts."""
        c = self._core
        return RedisThrottleStatistics(
            entered=c.entered, waiting=c.waiting, rejected=c.rejected, max=self._max,
            period_ms=self._period_ms, max_queue=self._max_queue,
            shared_entries=c.shared_entries, shared_waiting=c.shared_waiting)


@final
@dataclass(frozen=True)
class RedisLimiterStatistics:
    """A snapshot of a :class:`RedisLimiter`: this process's view, then the shared one."""

    #: Flows and tasks of this process inside.
    held: int
    #: Flows and tasks of this process waiting for a place.
    waiting: int
    #: Flows and tasks of this process holding a place and waiting for the rate.
    rate_waiting: int
    #: Entries of this process let in since creation.
    entered: int
    #: Entries of this process refused with ``DefenseRejected``, by either limit.
    rejected: int
    #: Holders in every process, as last seen.
    shared_held: int
    #: Waiters for a place in every process, as last seen.
    shared_waiting: int
    #: Entries of the current rate period in every process, as last seen.
    shared_entries: int
    #: Permits of this process whose lease Redis lost.
    lost: int


@final
class RedisLimiter(_Base):
    """A :class:`~futoin_anyio.Limiter` shared by every process that uses the same Redis
    server and ``name``: ``concurrent`` places and ``rate`` entries per ``period_ms`` in all.

    With the defaults (``max_queue=0``, ``burst=0``) an entry that would wait is rejected with
    ``DefenseRejected``, as with the local Limiter. ``lease_ms``, ``wait_replicas`` and
    ``wait_timeout_ms`` are as for :class:`RedisMutex`.
    """

    _kind = "RedisLimiter"
    # As the local Limiter (a re-entrant Mutex, then the Throttle): a flow or task inside
    # enters again without a second place, but its entry still counts for the rate.
    _reentrant = True
    _rate_on_reentry = True

    def __init__(self, client: Any, name: str, concurrent: int = 1, max_queue: int | None = 0,
                 rate: int = 1, period_ms: float = 1000, burst: int | None = 0,
                 lease_ms: float = 30000, wait_replicas: int = 0,
                 wait_timeout_ms: float = 1000) -> None:
        super().__init__(client, name, lease_ms, wait_replicas, wait_timeout_ms)
        kind = self._kind
        concurrent = check_count(kind, "concurrent", concurrent, 1)
        max_queue = check_queue(kind, "max_queue", max_queue)
        rate = check_count(kind, "rate", rate, 1)
        period_ms = check_period(kind, "period_ms", period_ms)
        burst = check_queue(kind, "burst", burst)
        self._mutex = MutexCore(self._agent, "c:", concurrent, max_queue,
                                "Limiter queue limit (max_queue) reached")
        self._throttle = ThrottleCore(self._agent, "r:", rate, period_ms, burst,
                                      "Limiter rate queue limit (burst) reached")
        self._both = LimiterCore(self._mutex, self._throttle)

    async def _enter_again(self) -> None:
        await self._throttle.acquire()

    async def _enter(self) -> Waiter:
        return await self._both.acquire()

    def _release_ticket(self, ticket: Any) -> None:
        self._mutex.release(ticket)

    async def _release_async(self, ticket: Any) -> None:
        self._agent.set_done(ticket)
        await self._mutex.leave_token(ticket.token)

    def statistics(self) -> RedisLimiterStatistics:
        """Return this process's counts, and the shared ones."""
        m, t = self._mutex, self._throttle
        return RedisLimiterStatistics(
            held=len(self._owners), waiting=m.waiting, rate_waiting=t.waiting,
            entered=t.entered, rejected=m.rejected + t.rejected, shared_held=m.shared_held,
            shared_waiting=m.shared_waiting, shared_entries=t.shared_entries,
            lost=self._agent.lost)

"""The shared state of a limit as seen from one process: the calls of its Lua scripts.

A :class:`MutexCore` counts holders (``max`` permits), a :class:`ThrottleCore` counts entries
per period; a Limiter uses one of each. ``acquire()`` returns once the entry is let in (or
raises ``DefenseRejected``/``CommError``); a task cancelled or failed while waiting leaves the
shared queue in the background, so cancellation never waits on Redis.

A token whose leave (or release) could not reach Redis is *stale*: Redis may still hold its
place or permit (a failover, an AOF restart or a network blip brings it back), and nobody would
use it until its lease ends. The core remembers it and drops it in Redis before its next call
(the same round trip when that call is a leave), and the agent retries in the background.
"""

from __future__ import annotations

from typing import Any

from anyio import Event

from .._sync_common import rejected
from .._waitqueue import HELD, NEW, QUEUED
from . import _scripts
from ._agent import Agent, Waiter

__all__ = ()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Core:
    """What both cores share: the waiting part of ``acquire()``, and stale tokens."""

    agent: Agent
    keys: list[str]
    rejected: int
    waiting: int
    _leave: Any

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        #: Tokens whose leave failed -> when to forget them (their lease surely ended).
        self.stale: dict[str, float] = {}
        agent.cores.append(self)
        self._confirm = agent.client.register_script(_scripts.CONFIRM)
        self._confirm_keys = [agent.prefix + "w"]

    def granted(self, w: Waiter) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _leave_args(self, tokens: list[str]) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _left(self, reply: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def leave_token(self, token: str) -> None:
        """Leave the queue or give the permit back; the stale tokens go in the same call. On
        failure the token is remembered as stale."""
        stale = list(self.stale)
        try:
            reply = await self.agent.call(self._leave, self.keys,
                                          self._leave_args([token, *stale]))
        except BaseException:
            self.agent.remember(self, token)
            raise
        self._forget(stale)
        self._left(reply)

    async def purge(self) -> None:
        """Drop the stale tokens in Redis (raises ``CommError`` when it cannot)."""
        stale = list(self.stale)
        if stale:
            self._left(await self.agent.call(self._leave, self.keys, self._leave_args(stale)))
            self._forget(stale)

    def _forget(self, tokens: list[str]) -> None:
        for token in tokens:
            self.stale.pop(token, None)

    async def confirm(self, tokens: list[str]) -> list[str]:
        """Durable grants: ``tokens`` were let in by another process; returns those that are
        no longer known once the grant is on the replicas (``CommError`` if it is not)."""
        missing = await self.agent.call(self._confirm, self._confirm_keys, tokens, durable=True)
        return [_text(t) for t in missing]

    async def _call(self, script: Any, args: list[Any]) -> Any:
        """Run one of this core's scripts, after dropping its stale tokens."""
        if self.stale:
            await self.purge()
        return await self.agent.call(script, self.keys, args)

    async def _wait(self, w: Waiter) -> Waiter:
        """Wait for a queued ``w`` to be let in."""
        event = w.event
        assert event is not None
        self.waiting += 1
        try:
            await event.wait()
        except BaseException:
            if w.state is QUEUED or w.state is HELD:
                # Cancelled while waiting, or let in but cancelled before it could resume.
                self.agent.set_done(w)
                self.agent.spawn(self.leave_token, w.token)
            raise
        finally:
            self.waiting -= 1
        if w.error is not None:
            raise w.error
        return w

    async def _first_call(self, w: Waiter, script: Any, keys: list[str], args: list[Any],
                          *others: _Core) -> Any:
        w.event = Event()
        try:
            for core in (self, *others):
                if core.stale:
                    await core.purge()
            return await self.agent.call(script, keys, args, durable=True)
        except BaseException:
            self.agent.set_done(w)
            self.agent.spawn(self.leave_token, w.token)  # the script may have run
            raise


class MutexCore(_Core):
    """``max`` permits shared by every process; FIFO queue of at most ``max_queue``."""

    def __init__(self, agent: Agent, sub: str, max: int, max_queue: int | None,
                 reject_info: str) -> None:
        super().__init__(agent)
        p = agent.prefix + sub
        self.keys = [p + "h", p + "q", p + "ql", p + "seq"]
        self._confirm_keys = [agent.prefix + "w", p + "h"]
        self.max = max
        self.max_queue = -1 if max_queue is None else max_queue
        self.reject_info = reject_info
        client = agent.client
        self._acquire = client.register_script(_scripts.MUTEX_ACQUIRE)
        self._leave = client.register_script(_scripts.MUTEX_LEAVE)
        self._renew = client.register_script(_scripts.MUTEX_RENEW)
        self.rejected = 0
        self.waiting = 0
        self.shared_held = 0
        self.shared_waiting = 0

    async def acquire(self) -> Waiter:
        agent = self.agent
        await agent.prepare()
        w = agent.new_waiter(self)
        status, held, queued = await self._first_call(
            w, self._acquire, self.keys,
            [w.token, self.max, self.max_queue, agent.lease, agent.signal_prefix])
        self.shared_held, self.shared_waiting = int(held), int(queued)
        return await self.finish(w, int(status))

    async def finish(self, w: Waiter, status: int) -> Waiter:
        """Go on from the acquiring script's ``status``: in, rejected, or wait in the queue."""
        agent = self.agent
        if status == 1:
            agent.set_held(w, keep=True)
            return w
        if status == -1:
            agent.set_done(w)
            self.rejected += 1
            raise rejected(self.reject_info)
        if w.state is NEW:
            agent.set_queued(w)
            return await self._wait(w)
        return w  # let in by a signal that came before the reply

    def granted(self, w: Waiter) -> None:
        self.agent.set_held(w, keep=True)

    def release(self, w: Waiter) -> None:
        """Give the permit back (in the background: a cancelled task never waits on Redis)."""
        self.agent.set_done(w)
        self.agent.spawn(self.leave_token, w.token)

    def _leave_args(self, tokens: list[str]) -> list[Any]:
        agent = self.agent
        return [self.max, agent.lease, agent.signal_prefix, *tokens]

    def _left(self, reply: Any) -> None:
        self.shared_held, self.shared_waiting = int(reply[0]), int(reply[1])

    async def renew(self, tokens: list[str]) -> list[str]:
        agent = self.agent
        missing, held, queued = await self._call(
            self._renew, [self.max, agent.lease, agent.signal_prefix, *tokens])
        self.shared_held, self.shared_waiting = int(held), int(queued)
        return [_text(t) for t in missing]


class ThrottleCore(_Core):
    """At most ``max`` entries per period shared by every process; FIFO queue."""

    def __init__(self, agent: Agent, sub: str, max: int, period_ms: float,
                 max_queue: int | None, reject_info: str) -> None:
        super().__init__(agent)
        p = agent.prefix + sub
        self.keys = [p + "q", p + "ql", p + "seq", p + "p"]
        self.max = max
        self.period = repr(period_ms)
        self.max_queue = -1 if max_queue is None else max_queue
        self.reject_info = reject_info
        client = agent.client
        self._acquire = client.register_script(_scripts.THROTTLE_ACQUIRE)
        self._tick = client.register_script(_scripts.THROTTLE_TICK)
        self._leave = client.register_script(_scripts.THROTTLE_LEAVE)
        self._renew = client.register_script(_scripts.THROTTLE_RENEW)
        self.rejected = 0
        self.waiting = 0
        self.entered = 0
        self.shared_entries = 0
        self.shared_waiting = 0
        agent.throttle = self

    async def acquire(self) -> None:
        agent = self.agent
        await agent.prepare()
        w = agent.new_waiter(self)
        status, left, entries, queued = await self._first_call(
            w, self._acquire, self.keys,
            [w.token, self.max, self.max_queue, self.period, agent.lease, agent.signal_prefix])
        self.shared_entries, self.shared_waiting = int(entries), int(queued)
        await self.finish(w, int(status), int(left))

    async def finish(self, w: Waiter, status: int, left: int) -> None:
        """Go on from the acquiring script's ``status``: in, rejected, or wait in the queue."""
        agent = self.agent
        if status == 1:
            agent.set_held(w, keep=False)
            self.entered += 1
            return
        if status == -1:
            agent.set_done(w)
            self.rejected += 1
            raise rejected(self.reject_info)
        if w.state is NEW:
            agent.set_queued(w)
            agent.arm_tick(left)
            await self._wait(w)
        self.entered += 1

    def granted(self, w: Waiter) -> None:
        self.agent.set_held(w, keep=False)

    def _leave_args(self, tokens: list[str]) -> list[Any]:
        return list(tokens)

    def _left(self, reply: Any) -> None:
        self.shared_waiting = int(reply[0])

    async def tick(self) -> None:
        agent = self.agent
        left, entries, queued = await self._call(
            self._tick, [self.max, self.period, agent.lease, agent.signal_prefix])
        self.shared_entries, self.shared_waiting = int(entries), int(queued)
        if agent.queued:
            agent.arm_tick(int(left))

    async def renew(self, tokens: list[str]) -> list[str]:
        agent = self.agent
        missing, left, entries, queued = await self._call(
            self._renew, [self.max, self.period, agent.lease, agent.signal_prefix, *tokens])
        self.shared_entries, self.shared_waiting = int(entries), int(queued)
        if agent.queued:
            agent.arm_tick(int(left))
        return [_text(t) for t in missing]


class LimiterCore:
    """A place (a :class:`MutexCore`) and then the rate (a :class:`ThrottleCore`), asked for in
    one round trip when a place is free: one script takes the place and enters the rate or
    queues for it."""

    def __init__(self, places: MutexCore, rate: ThrottleCore) -> None:
        self.places = places
        self.rate = rate
        self.keys = places.keys + rate.keys
        self._acquire = places.agent.client.register_script(_scripts.LIMITER_ACQUIRE)

    async def acquire(self) -> Waiter:
        places, rate = self.places, self.rate
        agent = places.agent
        await agent.prepare()
        wp = agent.new_waiter(places)
        wr = agent.new_waiter(rate)
        wr.event = Event()
        try:
            reply = await places._first_call(
                wp, self._acquire, self.keys,
                [wp.token, places.max, places.max_queue, wr.token, rate.max, rate.max_queue,
                 rate.period, agent.lease, agent.signal_prefix], rate)
        except BaseException:
            agent.set_done(wr)
            agent.spawn(rate.leave_token, wr.token)  # the script may have run
            raise
        status = int(reply[0])
        places.shared_held, places.shared_waiting = int(reply[1]), int(reply[2])
        if status != 1:
            agent.set_done(wr)  # the rate was not asked for: a place first
            wp = await places.finish(wp, status)
            try:
                await rate.acquire()
            except BaseException:
                places.release(wp)
                raise
            return wp
        agent.set_held(wp, keep=True)
        rstatus = int(reply[3])
        rate.shared_entries, rate.shared_waiting = int(reply[5]), int(reply[6])
        if rstatus == -1:
            agent.set_done(wp)  # the script gave the place back
        try:
            await rate.finish(wr, rstatus, int(reply[4]))
        except BaseException:
            if wp.state is HELD:
                places.release(wp)
            raise
        return wp

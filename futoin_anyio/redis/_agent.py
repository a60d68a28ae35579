"""The agent of one shared primitive in this process: its tokens, wake-ups and leases.

The agent's background work runs in the task group of the coredis client's connection pool,
which lives exactly as long as the application keeps the client entered (``async with client``).
Four loops, each idle while it has nothing to do:

- *signals*: while a token of this process is queued, block on the agent's signal list
  (``BLPOP``) and let in the waiter whose token a script pushed there (with durable grants,
  once a confirming write of this process has reached the replicas);
- *leases*: while a token is queued or held, renew the leases every third of ``lease_ms``
  (sooner again after a renewal failed);
- *periods*: while a Throttle entry waits, start the next period when the current one ends;
- *purges*: while a token is stale (its leave or release failed: Redis may still hold it, and
  will when it comes back with its data), drop it in Redis, retrying with a growing pause.

When Redis fails (a command raises, or a blocking wait outlives its time bound), every queued
waiter fails with ``CommError`` naming the cause; the next entry tries Redis again.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from anyio import (
    CancelScope,
    Event,
    create_task_group,
    current_time,
    fail_after,
    get_cancelled_exc_class,
    move_on_after,
    sleep,
    sleep_until,
)

from .._errors import Errors, FutoInError
from .._waitqueue import DONE, HELD, NEW, QUEUED, state_name

__all__ = ()

logger: Final = logging.getLogger("futoin_anyio.redis")

# Waiter states are the local primitives' (``_waitqueue``). Here NEW: the acquiring script is on
# its way; QUEUED: in the shared queue; HELD: let in; DONE: gone (failed, left or released).

#: Seconds a blocking wait may exceed its own server-side timeout before Redis counts as
#: unreachable.
_GRACE: Final = 2.0
#: The longest pause between two tries to drop stale tokens while Redis is unreachable.
_PURGE_BACKOFF: Final = 0.5


class Waiter:
    """One entry of this process: a token in Redis, and the event its task waits on."""

    __slots__ = ("core", "error", "event", "missed", "state", "token")

    def __init__(self, core: Any, token: str) -> None:
        self.core = core
        self.token = token
        self.state = NEW
        self.event: Event | None = None
        self.error: FutoInError | None = None
        self.missed = False  # not found in Redis by the last lease renewal

    def __repr__(self) -> str:
        return f"<redis entry {self.token} {state_name(self.state)}>"


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Agent:
    """The process-side state of one primitive object (see the module docstring)."""

    def __init__(self, client: Any, name: str, lease_ms: float, what: str,
                 wait_replicas: int = 0, wait_timeout_ms: int = 1000) -> None:
        self.client = client
        # Durable grants: each grant is acknowledged by this many replicas (WAIT) before its
        # entry goes in (0: not asked).
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.name = name
        self.what = what  # "RedisMutex 'name'", for messages
        self.lease_ms = lease_ms
        self.lease = str(int(lease_ms))
        self.interval = lease_ms / 3000.0
        self.id = f"{os.getpid():x}-{uuid.uuid4().hex[:12]}"
        self._seq = 0
        self.prefix = f"futoin:{{{name}}}:"
        self.signal_prefix = self.prefix + "s:"
        self.signal_key = self.signal_prefix + self.id
        self.waiters: dict[str, Waiter] = {}
        self.queued = 0
        self.throttle: Any = None  # the core whose periods the agent drives, if any
        self.tick_at: float | None = None
        self._running = False
        self._wake_signals: Event | None = None
        self._wake_leases: Event | None = None
        self._wake_ticks: Event | None = None
        self._wake_settled: Event | None = None
        self._wake_purges: Event | None = None
        self.cores: list[Any] = []  # the cores of this primitive (see ``_cores``)
        self.pending: set[int] = set()  # releases and leaves on their way to Redis, by number
        self._spawned = 0
        self._tick_scope: CancelScope | None = None
        self.failures = 0
        self.lost = 0
        self._renew_backoff = 0.0

    # -- tokens and states ------------------------------------------------------------------------

    def new_waiter(self, core: Any) -> Waiter:
        self._seq += 1
        w = Waiter(core, f"{self.id}.{self._seq}")
        self.waiters[w.token] = w
        self._poke("_wake_leases")
        return w

    def set_queued(self, w: Waiter) -> None:
        if w.state is NEW:
            w.state = QUEUED
            self.queued += 1
            self._poke("_wake_signals")

    def set_held(self, w: Waiter, keep: bool) -> None:
        """Let ``w`` in; ``keep``: its token stays in Redis (a Mutex permit) until it leaves."""
        if w.state is QUEUED:
            self.queued -= 1
        w.state = HELD
        if not keep:
            self.waiters.pop(w.token, None)
        if w.event is not None:
            w.event.set()

    def set_done(self, w: Waiter) -> int:
        """Forget ``w``; returns the state it was in."""
        state = w.state
        if state is QUEUED:
            self.queued -= 1
        w.state = DONE
        self.waiters.pop(w.token, None)
        return state

    def fail(self, w: Waiter, info: str, code: str = Errors.CommError) -> None:
        """A queued ``w`` fails: its task raises ``FutoInError(code, info)``."""
        if w.state is not QUEUED and w.state is not NEW:
            return
        self.set_done(w)
        w.error = FutoInError(code, info)
        if w.event is not None:
            w.event.set()
        self.spawn(w.core.leave_token, w.token)  # best effort: its lease ends it otherwise

    def fail_all(self, info: str) -> None:
        self.failures += 1
        for w in [w for w in self.waiters.values() if w.state is QUEUED]:
            self.fail(w, info)

    def remember(self, core: Any, token: str) -> None:
        """``token``'s leave failed: Redis may still hold it. Drop it before ``core``'s next
        call, and in the background; forget it once its lease surely ended (a lease after its
        last renewal at most, plus a renewal interval for the clocks' drift)."""
        core.stale[token] = current_time() + self.lease_ms / 1000.0 + self.interval
        self._poke("_wake_purges")

    # -- Redis calls ------------------------------------------------------------------------------

    def error(self, exc: BaseException) -> FutoInError:
        return FutoInError(Errors.CommError, f"{self.what}: Redis unreachable ({describe(exc)})")

    async def call(self, script: Any, keys: Sequence[str], args: Sequence[Any],
                   durable: bool = False) -> Any:
        """Run a script; any failure of Redis becomes ``CommError`` naming the cause.

        ``durable`` (with ``wait_replicas``): the script's writes, and every earlier one of
        its connection, have reached ``wait_replicas`` replicas when it returns (``WAIT``
        on the same connection, by coredis's ``ensure_replication``)."""
        try:
            if durable and self.wait_replicas:
                with fail_after(self.interval + _GRACE + self.wait_timeout_ms / 1000.0), \
                        self.client.ensure_replication(self.wait_replicas, self.wait_timeout_ms):
                    return await script(keys=keys, args=args)
            with fail_after(self.interval + _GRACE):
                return await script(keys=keys, args=args)
        except FutoInError:
            raise
        except Exception as e:
            if type(e).__name__ == "ReplicationError":
                raise FutoInError(
                    Errors.CommError,
                    f"{self.what}: the grant did not reach {self.wait_replicas} replica(s) "
                    f"within {self.wait_timeout_ms} ms (WAIT): not let in") from e
            raise self.error(e) from e

    # -- background work --------------------------------------------------------------------------

    def _task_group(self) -> Any:
        try:
            return self.client.connection_pool.task_group
        except Exception as e:
            raise FutoInError(
                Errors.InternalError,
                f"{self.what}: the coredis client is not entered; use `async with client:` "
                f"around its use ({describe(e)})") from e

    def start(self) -> None:
        """Start the background loops (once while the client is entered)."""
        if not self._running:
            self._task_group().start_soon(self._run, name=f"futoin redis agent {self.what}")
            self._running = True

    async def prepare(self) -> None:
        """Before an entry's first call: the background loops run, and this process's own
        releases started so far have reached Redis (see :meth:`settled`)."""
        self.start()
        if self.pending:
            await self.settled()

    def spawn(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``func(*args)`` (a release or leave) in the background; a failure is logged."""
        try:
            tg = self._task_group()
        except FutoInError:
            return  # the client is closed: leases end what is left
        tg.start_soon(self._guard, func, args, self.begin())

    def begin(self) -> int:
        """Number a release on its way to Redis (see :meth:`settled`)."""
        self._spawned += 1
        self.pending.add(self._spawned)
        return self._spawned

    def end(self, number: int) -> None:
        self.pending.discard(number)
        self._poke("_wake_settled")

    async def _guard(self, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...],
                     number: int) -> None:
        try:
            # Shielded (and bounded by the call's own time limit): a release still reaches
            # Redis when the application exits the client right after the section.
            with CancelScope(shield=True):
                await func(*args)
        except Exception as e:
            logger.debug("%s: background call failed: %s", self.what, describe(e))
        finally:
            self.end(number)

    async def settled(self) -> None:
        """Wait until the releases started so far have reached Redis: a task that leaves and
        enters again must see its own release (each is bounded by the call's time limit).
        Later releases are not waited for, so a busy limit cannot starve an entry."""
        upto = self._spawned
        while self.pending and min(self.pending) <= upto:
            await self._idle("_wake_settled")

    def _poke(self, attr: str) -> None:
        ev: Event | None = getattr(self, attr)
        if ev is not None:
            setattr(self, attr, None)
            ev.set()

    async def _idle(self, attr: str) -> None:
        ev = getattr(self, attr)
        if ev is None:
            ev = Event()
            setattr(self, attr, ev)
        await ev.wait()

    async def _run(self) -> None:
        try:
            async with create_task_group() as tg:
                tg.start_soon(self._signals)
                tg.start_soon(self._leases)
                tg.start_soon(self._purges)
                if self.throttle is not None:
                    tg.start_soon(self._ticks)
        except get_cancelled_exc_class():
            # The client is closing: nobody can be let in any more.
            self._running = False
            self.fail_all(f"{self.what}: the coredis client was closed")
            raise
        except Exception as e:  # pragma: no cover - the loops catch their own errors
            self._running = False
            self.fail_all(f"{self.what}: {describe(e)}")
            logger.exception("%s: the background agent failed", self.what)

    async def _signals(self) -> None:
        client = self.client
        keys = [self.signal_key]
        timeout = max(0.01, self.interval)
        backoff = 0.0
        while True:
            if not self.queued:
                await self._idle("_wake_signals")
                continue
            try:
                with fail_after(timeout + _GRACE):
                    got = await client.blpop(keys, timeout=timeout)
            except Exception as e:
                self.fail_all(self.error(e).info)
                backoff = min(1.0, backoff * 2 or 0.05)
                await sleep(backoff)  # a broken connection: not a busy loop
                continue
            backoff = 0.0
            if self._wake_purges is not None and any(c.stale for c in self.cores):
                self._poke("_wake_purges")  # Redis answers: a purge waiting to retry can go
            if got is None:
                continue
            tokens = [got[1]]
            if self.queued > 1:  # several let in at once (a new period): take them all at once
                try:
                    tokens.extend(await client.lpop(self.signal_key, 64) or ())
                except Exception as e:
                    self.fail_all(self.error(e).info)
                    continue
            if self.wait_replicas:
                await self._confirm(tokens)
            else:
                for token in tokens:
                    self._grant(token)

    def _waiter(self, token: str | bytes) -> Waiter | None:
        if isinstance(token, bytes):
            token = token.decode()
        w = self.waiters.get(token)
        if w is not None and (w.state is QUEUED or w.state is NEW):
            return w
        return None

    def _grant(self, token: str | bytes) -> None:
        w = self._waiter(token)
        if w is not None:
            w.core.granted(w)

    async def _confirm(self, tokens: list[Any]) -> None:
        """Durable grants: before letting in waiters granted by another process's script,
        make sure that script reached the replicas. A write of this process after it (the
        confirming script) acknowledged by ``WAIT`` covers it: replication is in order."""
        by_core: dict[Any, list[Waiter]] = {}
        for token in tokens:
            w = self._waiter(token)
            if w is not None:
                by_core.setdefault(w.core, []).append(w)
        for core, ws in by_core.items():
            try:
                missing = set(await core.confirm([w.token for w in ws]))
            except FutoInError as e:
                for w in ws:
                    self.fail(w, str(e.info))  # and gives its permit back
                continue
            for w in ws:
                if w.token in missing:
                    self.fail(w, f"{self.what}: the place in the queue was lost in Redis "
                                 "(lease expired, or Redis restarted)")
                elif w.state is QUEUED or w.state is NEW:
                    core.granted(w)

    async def _purges(self) -> None:
        backoff = 0.0
        while True:
            now = current_time()
            cores = []
            for core in self.cores:
                for token in [t for t, end in core.stale.items() if end <= now]:
                    del core.stale[token]  # its lease ended in Redis
                if core.stale:
                    cores.append(core)
            if not cores:
                backoff = 0.0
                await self._idle("_wake_purges")
                continue
            try:
                for core in cores:
                    await core.purge()
            except FutoInError as e:
                logger.debug("%s: dropping stale tokens failed: %s", self.what, e.info)
                backoff = min(_PURGE_BACKOFF, self.interval, backoff * 2 or 0.02)
                with move_on_after(backoff):
                    await self._idle("_wake_purges")  # or Redis answered another call
                continue
            backoff = 0.0

    async def _leases(self) -> None:
        # After a failed renewal the next try comes sooner (a growing pause, at most
        # _PURGE_BACKOFF): a permit outlives an outage up to about two thirds of its lease.
        delay = self.interval
        while True:
            if not self.waiters:
                delay = self.interval
                await self._idle("_wake_leases")
                continue
            await sleep(delay)
            delay = self.interval
            by_core: dict[Any, list[str]] = {}
            for w in self.waiters.values():
                by_core.setdefault(w.core, []).append(w.token)
            for core, tokens in by_core.items():
                try:
                    missing = await core.renew(tokens)
                except FutoInError as e:
                    self.fail_all(str(e.info))
                    self._renew_backoff = min(_PURGE_BACKOFF, self.interval,
                                              self._renew_backoff * 2 or 0.05)
                    delay = self._renew_backoff
                    continue
                self._renew_backoff = 0.0
                gone = set(missing)
                for token in tokens:
                    found = self.waiters.get(token)
                    if found is None:
                        continue
                    w = found
                    if token not in gone:
                        w.missed = False
                    elif w.state is HELD:
                        self.set_done(w)
                        self.lost += 1
                        logger.warning("%s: a permit's lease was lost in Redis (expired, or "
                                       "Redis restarted); the section goes on unprotected",
                                       self.what)
                    elif w.missed:  # gone twice in a row: not a grant on its way
                        self.fail(w, f"{self.what}: the place in the queue was lost in Redis "
                                     "(lease expired, or Redis restarted)")
                    else:
                        w.missed = True

    def arm_tick(self, left_ms: int) -> None:
        """The running period ends in ``left_ms``: start the next one then, if anyone waits."""
        if left_ms < 0:
            return
        at = current_time() + left_ms / 1000.0
        if self.tick_at is None or at < self.tick_at:
            self.tick_at = at
            self._poke("_wake_ticks")
            scope = self._tick_scope
            if scope is not None:
                scope.cancel()

    async def _ticks(self) -> None:
        core = self.throttle
        while True:
            at = self.tick_at
            if at is None or not self.queued:
                self.tick_at = None
                await self._idle("_wake_ticks")
                continue
            with CancelScope() as scope:
                self._tick_scope = scope
                await sleep_until(at)
            self._tick_scope = None
            if self.tick_at is not at:
                continue  # re-armed earlier
            self.tick_at = None
            try:
                await core.tick()
            except FutoInError as e:
                self.fail_all(str(e.info))

"""Random programs of coroutine shapes, checked against invariants on every run (issue 24).

A seeded generator builds a few roots from random steps — inline and task ``async def`` steps
with slow cancellation cleanups, plain steps that schedule ``immediate()``/``deferred()``/
``execute()`` work a later coroutine step awaits, nested ``parallel()`` with failing branches,
``Mutex``/``Limiter`` (and ``RedisMutex`` when a client is given) sections, two of them with no
queue (their entries may be refused: ``DefenseRejected``), labelled loops with
``break_loop``/``continue_loop`` from inside branches, ``set_timeout()``, error and cancel
handlers — and runs them together, some with ``promise()`` (under a random outer deadline),
some with ``execute()`` in an ``AsyncTool``, some cancelled with ``root.cancel()`` from another
task. Every run checks:

* every root ends within a bound (a hang fails the run, it does not stall);
* never more flows inside a primitive than it admits; no permit or queue place is left after;
* when a step's error handler, cancel handler or ``stack()`` cleanup runs, or the step after
  it starts, no coroutine under that step is still running (so no branch outlives its
  parallel step, and a section is left only after the coroutines inside it have ended);
* a loop broken (or continued) by label ends exactly the named loop: no iteration of it, nor of
  a loop between it and the break, starts afterwards;
* a coroutine that awaits work scheduled earlier in its flow gets it.

Only the public API. ``tests/test_random_programs.py`` runs the quick mode on both backends;
the long mode by hand::

    python -m benchmarks.programs --programs 100000 --backend trio --seed 1

Trio runs on ``MockClock(autojump_threshold=0)``: sleeps and deadlines cost no real time.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python benchmarks/programs.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import anyio.lowlevel

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, Limiter, Mutex

#: A run whose roots have not all ended after this many (virtual, on trio) seconds hangs.
RUN_BOUND = 30.0

Node = tuple[Any, ...]
LOOP_CODES = (Errors.LoopBreak, Errors.LoopCont)


class Violation(AssertionError):
    """An invariant did not hold."""


# -- the generator ------------------------------------------------------------------------------


class _Gen:
    """Builds one root's program: a list of nodes (tuples), each with a unique id."""

    def __init__(self, rng: random.Random, prims: int, prefix: str) -> None:
        self.rng = rng
        self.prims = prims
        self.ids = itertools.count()
        self.prefix = prefix
        self.events = itertools.count()

    def new_id(self) -> str:
        return f"{self.prefix}{next(self.ids)}"

    def seq(self, depth: int, loops: tuple[str | None, ...], held: int = -1,
            width: int = 3) -> list[Node]:
        """Steps in sequence. ``held``: the highest primitive held around them: a section
        nested in them takes a higher one only (no deadlock between roots, no re-entry)."""
        rng = self.rng
        out: list[Node] = []
        for _ in range(rng.randint(1, width)):
            out.extend(self.step(depth, loops, held))
        return out

    def step(self, depth: int, loops: tuple[str | None, ...], held: int) -> list[Node]:
        """One step (or a scheduling step and the coroutine step that awaits its work)."""
        rng = self.rng
        kinds = ["plain", "coro", "coro", "fail", "sched"]
        if loops:
            kinds += ["break", "cont"]
        if depth > 0:
            kinds += ["par", "par", "loop", "timeout", "nest"]
            if held + 1 < self.prims:
                kinds += ["sync", "sync"]
        kind = rng.choice(kinds)
        sid = self.new_id()
        onerror = rng.choice([None, None, "recover", "pass", "replace"])
        # A cancel handler only where the step does not then wait for ever (set_cancel() turns
        # a plain step without sub-steps into one that waits for an external success()).
        cancel = kind not in ("plain", "sched") and rng.random() < 0.3
        if kind == "plain":
            return [("plain", sid, onerror, cancel)]
        if kind == "coro":
            duration = rng.choice([0, 0, 1, 5, 20])
            cleanup = rng.choice([0, 0, 2, 10, 40])
            fail = rng.random() < 0.2
            return [("coro", sid, onerror, cancel, duration, cleanup, fail, None)]
        if kind == "fail":
            return [("fail", sid, onerror, cancel)]
        if kind == "sched":
            event = next(self.events)
            how = rng.choice(["immediate", "deferred", "execute", "execute_async"])
            between = [("plain", self.new_id(), None, False)] if rng.random() < 0.5 else []
            waiter = ("coro", self.new_id(), None, False, 0, rng.choice([0, 5]), False, event)
            return [("sched", sid, None, False, how, event), *between, waiter]
        if kind in ("break", "cont"):
            labels = [label for label in loops if label is not None]
            label = rng.choice(labels) if labels and rng.random() < 0.6 else None
            return [(kind, sid, None, False, label)]
        if kind == "par":
            branches = [self.seq(depth - 1, loops, held, 2) for _ in range(rng.randint(1, 3))]
            return [("par", sid, onerror, cancel, branches)]
        if kind == "sync":
            prim = rng.randrange(held + 1, self.prims)
            return [("sync", sid, onerror, cancel, prim, self.seq(depth - 1, loops, prim, 2))]
        if kind == "loop":
            label = rng.choice([None, f"L{sid}"])
            count = rng.randint(1, 3)
            return [("loop", sid, onerror, cancel, label, count,
                     self.seq(depth - 1, (*loops, label), held, 2))]
        if kind == "timeout":
            return [("timeout", sid, onerror, cancel, rng.choice([1, 5, 15, 50]),
                     self.seq(depth - 1, loops, held, 2))]
        return [("nest", sid, onerror, cancel, self.seq(depth - 1, loops, held, 2))]


# -- the checker --------------------------------------------------------------------------------


@dataclass
class _Checker:
    """What the running programs report, and the invariants checked as they do."""

    running: dict[int, tuple[str, ...]] = field(default_factory=dict)
    inside: list[int] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)
    loop_ids: itertools.count[int] = field(default_factory=itertools.count)
    tokens: itertools.count[int] = field(default_factory=itertools.count)
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def fail(self, message: str) -> None:
        self.problems.append(message)

    def count(self, what: str, times: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + times

    def nothing_running_under(self, sid: str, what: str) -> None:
        for path in self.running.values():
            if sid in path:
                self.fail(f"{what} of {sid} while a coroutine under it runs (path {path})")
                return


@dataclass(frozen=True)
class _Ctx:
    """Where a step is: the ids of the steps around it, and the loop instances around it."""

    path: tuple[str, ...]
    loops: tuple[tuple[str | None, int], ...]


class _Interp:
    """Turns nodes into AsyncSteps calls, with the checker's probes around each step."""

    def __init__(self, chk: _Checker, prims: list[Any], events: dict[str, anyio.Event]) -> None:
        self.chk = chk
        self.prims = prims
        self.events = events

    def add_seq(self, asi: AsyncSteps, nodes: list[Node], ctx: _Ctx) -> None:
        previous: str | None = None
        for node in nodes:
            self.add_node(asi, node, ctx, previous)
            previous = node[1]

    def add_node(self, asi: AsyncSteps, node: Node, ctx: _Ctx, previous: str | None) -> None:
        kind, sid, onerror, cancel = node[:4]
        chk = self.chk
        path = (*ctx.path, sid)
        inner = _Ctx(path, ctx.loops)

        def begin(step: AsyncSteps) -> None:
            if previous is not None:
                chk.nothing_running_under(previous, "the next step")
            if cancel:
                step.set_cancel(lambda _: chk.nothing_running_under(sid, "cancel handler"))

        handler = None
        if onerror is not None:
            def handler(step: AsyncSteps, code: str) -> None:
                chk.nothing_running_under(sid, "error handler")
                if code in LOOP_CODES:
                    return  # a loop signal goes on to its loop
                chk.count("handled")
                if onerror == "recover":
                    step.success()
                elif onerror == "replace":
                    step.error("Replaced")

        if kind == "coro":
            asi.add(self._coro(node, path, begin), handler)
            return

        def plain(step: AsyncSteps, *_: Any) -> None:
            begin(step)
            self._plain_body(step, node, inner)

        asi.add(plain, handler)

    def _plain_body(self, step: AsyncSteps, node: Node, ctx: _Ctx) -> None:
        kind = node[0]
        chk = self.chk
        sid = node[1]
        if kind == "plain":
            return
        if kind == "fail":
            step.error("Fail")
        if kind == "sched":
            self._schedule(step, node[4], f"{sid[:sid.index(':') + 1]}{node[5]}")
            return
        if kind in ("break", "cont"):
            self._loop_signal(step, kind, node[4], ctx)
        if kind == "par":
            par = step.parallel()
            for branch in node[4]:
                par.add(self._branch(branch, ctx))
            return
        if kind == "nest":
            self.add_seq(step, node[4], ctx)
            return
        if kind == "timeout":
            step.set_timeout(node[4])
            self.add_seq(step, node[5], ctx)
            return
        if kind == "sync":
            index = node[4]

            def section(asi: AsyncSteps, *_: Any) -> None:
                chk.inside[index] += 1
                chk.count("sections")
                chk.count(f"sections of {type(self.prims[index]).__name__}")
                if chk.inside[index] > chk.limits[index]:
                    chk.fail(f"{chk.inside[index]} flows inside primitive {index} "
                             f"(max {chk.limits[index]})")
                asi.stack(lambda: None, lambda _: self._leave(index, sid))
                self.add_seq(asi, node[5], ctx)

            step.sync(self.prims[index], section)
            return
        if kind == "loop":
            label, count, body = node[4], node[5], node[6]
            instance = next(chk.loop_ids)
            loop_ctx = _Ctx(ctx.path, (*ctx.loops, (label, instance)))

            def iteration(asi: AsyncSteps, i: int) -> None:
                chk.count("iterations")
                if instance in chk.stopped:
                    chk.fail(f"loop {label or sid} (instance {instance}) iterates after a "
                             "break or continue aimed past it")
                chk.nothing_running_under(f"{sid}#body", "the next iteration")
                self.add_seq(asi, body, _Ctx((*loop_ctx.path, f"{sid}#body"), loop_ctx.loops))

            step.repeat(count, iteration, label)
            return
        raise AssertionError(kind)  # pragma: no cover

    def _branch(self, nodes: list[Node], ctx: _Ctx) -> Callable[..., None]:
        def branch(asi: AsyncSteps, *_: Any) -> None:
            self.add_seq(asi, nodes, ctx)

        return branch

    def _leave(self, index: int, sid: str) -> None:
        self.chk.nothing_running_under(sid, "stack() cleanup of the section")
        self.chk.inside[index] -= 1

    def _loop_signal(self, step: AsyncSteps, kind: str, label: str | None, ctx: _Ctx) -> None:
        loops = ctx.loops
        target = len(loops) - 1
        if label is not None:
            target = max(i for i, (name, _) in enumerate(loops) if name == label)
        first = target if kind == "break" else target + 1
        for _, instance in loops[first:]:
            self.chk.stopped.add(instance)
        self.chk.count(kind)
        if kind == "break":
            step.break_loop(label)
        step.continue_loop(label)

    def _schedule(self, step: AsyncSteps, how: str, event_key: str) -> None:
        event = self.events.setdefault(event_key, anyio.Event())
        tool = step.tool
        assert tool is not None
        self.chk.count(how)
        if how == "immediate":
            tool.immediate(event.set)
        elif how == "deferred":
            tool.deferred(3, event.set)
        else:
            other = step.new_instance()
            if how == "execute":
                other.add(lambda asi: event.set())
            else:
                async def setter(asi: AsyncSteps) -> None:
                    await anyio.lowlevel.checkpoint()
                    event.set()

                other.add(setter)
            other.execute()

    def _coro(self, node: Node, path: tuple[str, ...],
              begin: Callable[[AsyncSteps], None]) -> Callable[..., Any]:
        _, sid, _, _, duration, cleanup, fail, event_no = node
        chk = self.chk
        event_key = None if event_no is None else f"{sid[:sid.index(':') + 1]}{event_no}"

        async def coro(asi: AsyncSteps, *_: Any) -> None:
            begin(asi)
            token = next(chk.tokens)
            chk.running[token] = path
            chk.count("coroutines")
            try:
                if event_key is not None:
                    await self.events.setdefault(event_key, anyio.Event()).wait()
                    chk.count("served")
                elif duration:
                    await anyio.sleep(duration / 1000)
                else:
                    await anyio.lowlevel.checkpoint()
                if fail:
                    raise FutoInError("CoroFail")
            finally:
                if cleanup:
                    with anyio.CancelScope(shield=True):
                        await anyio.sleep(cleanup / 1000)
                del chk.running[token]

        coro.__qualname__ = f"coro_{sid}"
        return coro


# -- a run --------------------------------------------------------------------------------------


async def run_program(seed: int, redis_client: Any = None) -> _Checker:
    """Build and run one random program; return its checker (``problems`` empty if it held)."""
    rng = random.Random(seed)
    chk = _Checker()
    # The last two refuse: a full queue (DefenseRejected), a full place or rate.
    prims: list[Any] = [Mutex(1), Mutex(2), Limiter(1, max_queue=None, rate=1000, period_ms=10),
                        Mutex(1, max_queue=0),
                        Limiter(1, max_queue=0, rate=2, period_ms=5, burst=0)]
    local = len(prims)
    chk.limits = [1, 2, 1, 1, 1]
    if redis_client is not None:
        from futoin_anyio.redis import RedisMutex

        prims.append(RedisMutex(redis_client, f"programs-{seed}-{rng.random():.8f}"))
        chk.limits.append(1)
    chk.inside = [0] * len(prims)
    events: dict[str, anyio.Event] = {}
    interp = _Interp(chk, prims, events)
    roots = []
    for r in range(rng.randint(1, 3)):
        gen = _Gen(rng, len(prims), f"r{r}:")
        roots.append((gen.seq(rng.randint(1, 3), ()), rng.random(), rng.random()))
    tool_roots: list[AsyncSteps] = []
    ended = [0]

    async def by_promise(root: AsyncSteps, deadline: float | None) -> None:
        with anyio.CancelScope() as scope:
            if deadline is not None:
                scope.deadline = anyio.current_time() + deadline
            with contextlib.suppress(FutoInError):  # an error or Cancelled: both allowed
                await root.promise()
        ended[0] += 1

    async def cancel_later(root: AsyncSteps, delay: float) -> None:
        await anyio.sleep(delay)
        root.cancel()

    with anyio.fail_after(RUN_BOUND):
        async with AsyncTool() as tool, anyio.create_task_group() as tg:
            for index, (nodes, how, when) in enumerate(roots):
                root = AsyncSteps(tool=tool)
                interp.add_seq(root, nodes, _Ctx((f"root{index}",), ()))
                if how < 0.6:
                    deadline = when * 0.05 if how < 0.2 else None
                    tg.start_soon(by_promise, root, deadline)
                else:
                    root.execute(lambda code: None)
                    tool_roots.append(root)
                if 0.3 < when < 0.5:
                    tg.start_soon(cancel_later, root, when * 0.05)
    # Every root has ended (the tool's block waits for its roots, the group for the promises).
    if ended[0] != sum(1 for _, how, _ in roots if how < 0.6):
        chk.fail("a promise() did not return")
    if chk.running:
        chk.fail(f"coroutines still running after every root ended: {list(chk.running.values())}")
    if any(chk.inside):
        chk.fail(f"flows still inside after every root ended: {chk.inside}")
    for index, prim in enumerate(prims[:local]):
        stats = prim.statistics()
        if stats.held or stats.waiting:
            chk.fail(f"primitive {index} left with {stats}")
        chk.count("refused", stats.rejected)
    if redis_client is not None:
        await _redis_settles(chk, prims[local])
    return chk


async def _redis_settles(chk: _Checker, prim: Any) -> None:
    """A RedisMutex releases in the background: wait (bounded) until it holds nothing."""
    with anyio.move_on_after(5):
        while True:
            stats = prim.statistics()
            if not stats.held and not stats.waiting:
                return
            await anyio.sleep(0.01)
    chk.fail(f"RedisMutex left with {prim.statistics()}")


@dataclass
class Report:
    programs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[int, list[str]]] = field(default_factory=list)


async def explore(first_seed: int, programs: int, redis_client: Any = None,
                  stop_after: int = 5) -> Report:
    """Run ``programs`` programs from seed ``first_seed`` on; keep the first failures."""
    report = Report()
    for seed in range(first_seed, first_seed + programs):
        try:
            chk = await run_program(seed, redis_client)
            problems = chk.problems
        except TimeoutError:
            problems = [f"hang: the roots did not end within {RUN_BOUND} s"]
            chk = _Checker()
        report.programs += 1
        for key, value in chk.counts.items():
            report.counts[key] = report.counts.get(key, 0) + value
        if problems:
            report.failures.append((seed, problems[:5]))
            if len(report.failures) >= stop_after:
                break
    return report


async def _explore_with_redis(first_seed: int, programs: int, redis_port: int) -> Report:
    import coredis

    async with coredis.Redis(host="127.0.0.1", port=redis_port) as client:
        return await explore(first_seed, programs, client)


def run(backend: str, first_seed: int, programs: int, redis_port: int | None = None) -> Report:
    """Explore on ``backend``; trio on a ``MockClock`` (sleeps cost no real time) unless the
    programs use Redis (its round trips take real time)."""
    options: dict[str, Any] = {}
    if backend == "trio" and redis_port is None:
        from trio.testing import MockClock

        options["clock"] = MockClock(autojump_threshold=0)
    if redis_port is not None:
        return anyio.run(_explore_with_redis, first_seed, programs, redis_port,
                         backend=backend, backend_options=options)
    return anyio.run(explore, first_seed, programs, backend=backend, backend_options=options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.programs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1, help="the first program's seed")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="trio")
    parser.add_argument("--redis-port", type=int,
                        help="also a RedisMutex, on the redis-server at 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report = run(args.backend, args.seed, args.programs, args.redis_port)
    took = time.perf_counter() - start
    print(f"{report.programs} programs on {args.backend} from seed {args.seed} in {took:.0f} s")
    print("exercised:", ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())))
    for seed, problems in report.failures:
        print(f"seed {seed}:")
        for problem in problems:
            print(f"    {problem}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Chaos: random roots under random actions, checked after every run (issue 18, item 2).

A seeded random driver (hypothesis cannot drive threads and real timers): each *run* opens an
``async with AsyncTool()``, starts a few roots built from random steps (plain, failing, raising,
``async def``, nested, parallel, loops over collections the body changes, timeouts, waiting steps,
Mutex/Throttle/Limiter sections, ``await_``) with random error and cancel handlers, some with
``execute()``, some with ``promise()`` in a task under a cancel scope; then fires random actions
at random moments, from the loop thread and from a worker thread: ``root.cancel()``,
``success()``/``error()`` of waiting steps, ``immediate()``/``deferred()`` and their
``cancel()``, cancelling a ``promise()``'s scope, cancelling the whole tool block.

After each run it checks: every root that started ended exactly once with an outcome the
contract allows (a success, an error code it may raise, or ``Cancelled``), a root that never
started reports nothing; every cancel handler and every ``stack()`` clean-up ran at most once
(clean-ups: exactly once); the tool exited with all statistics at zero; no Mutex, Throttle or
Limiter holds or queues anything; no warning; no log record at ERROR level.

Only the public API is used. ``tests/test_chaos.py`` runs it for a few seconds per backend; a long
run is by hand or from the soak::

    python -m benchmarks.chaos --runs 5000 --backend trio --seed 1
    FUTOIN_CHAOS_RUNS=5000 pytest tests/test_chaos.py
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import queue
import random
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, Limiter, Mutex, Throttle

#: A run takes milliseconds: one still going after this many seconds hangs.
RUN_LIMIT = 5.0

#: Error codes a root may end with (``Cancelled`` is the absence of any other outcome).
ALLOWED_CODES = {"E1", "E2", Errors.Timeout, Errors.InternalError, Errors.DefenseRejected}
#: What ``error_info`` of an ``InternalError`` may start with: the steps' own faults.
ALLOWED_INTERNAL = ("ValueError: chaos", "RuntimeError: dictionary changed size",
                    "RuntimeError: chaos generator")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class _Root:
    """What one root did: filled in by its steps and handlers."""

    name: str
    promise: bool
    started: int = 0
    ok: int = 0
    codes: list[str] = field(default_factory=list)
    infos: list[Any] = field(default_factory=list)
    top_cancel: int = 0
    asi: AsyncSteps | None = None
    promise_cancelled: bool = False


@dataclass
class ChaosReport:
    """Totals over all runs and every problem found (empty when nothing broke)."""

    runs: int = 0
    roots: int = 0
    steps: int = 0
    actions: int = 0
    thread_actions: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


class _Run:
    """One run: the random program, its actors and its checks."""

    def __init__(self, rnd: random.Random, report: ChaosReport) -> None:
        self.rnd = rnd
        self.report = report
        self.roots: list[_Root] = []
        self.cancel_counts: dict[int, int] = {}
        self.cleanups: dict[int, int] = {}
        self.waiting: list[AsyncSteps] = []
        self.handles: list[Any] = []
        self.callbacks_run = 0
        self.next_id = 0
        self.mutex = Mutex(rnd.choice((1, 2)), max_queue=rnd.choice((None, 2)))
        self.throttle = Throttle(rnd.choice((1, 3)), period_ms=rnd.choice((1, 5)))
        self.limiter = Limiter(concurrent=rnd.choice((1, 2)), max_queue=rnd.choice((None, 1)),
                               rate=rnd.choice((2, 10)), period_ms=2)
        self.worker_jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self.worker_errors: list[str] = []

    # -- building -------------------------------------------------------------------------

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _on_cancel(self) -> Callable[[], Callable[[AsyncSteps], None]]:
        """A factory of cancel handlers: each step execution gets its own, counted apart."""
        def make() -> Callable[[AsyncSteps], None]:
            key = self._id()
            self.cancel_counts[key] = 0

            def on_cancel(asi: AsyncSteps) -> None:
                self.cancel_counts[key] += 1

            return on_cancel

        return make

    def _onerror(self) -> Callable[[AsyncSteps, str], None] | None:
        kind = self.rnd.randrange(6)
        if kind < 2:
            return None
        if kind == 2:
            return lambda asi, code: asi.success("recovered")
        if kind == 3:
            return lambda asi, code: asi.error("E2")
        if kind == 4:
            sub = self._step(3)

            def add_sub(asi: AsyncSteps, code: str) -> None:
                asi.add(sub)
            return add_sub

        def raises(asi: AsyncSteps, code: str) -> None:
            raise ValueError("chaos")

        return raises

    def _step(self, depth: int) -> Callable[..., Any]:
        """A random step callable (its sub-steps built now, so the program is fixed)."""
        self.report.steps += 1
        rnd = self.rnd
        kinds = ["plain", "fail", "raise", "wait", "async", "await", "timeout", "stack"]
        if depth < 3:
            kinds += ["nested", "nested", "parallel", "loop", "dict", "gen", "mutex",
                      "throttle", "limiter"]
        kind = rnd.choice(kinds)
        if kind == "plain":
            value = rnd.randrange(10)
            return lambda asi, *_: asi.success(value)
        if kind == "fail":
            return lambda asi, *_: asi.error("E1", "chaos info")
        if kind == "raise":
            def raise_step(asi: AsyncSteps, *_: Any) -> None:
                raise ValueError("chaos")
            return raise_step
        if kind == "wait":
            on_cancel: Callable[[], Callable[[AsyncSteps], None]] | None = (
                self._on_cancel() if rnd.random() < 0.7 else None)

            def wait_step(asi: AsyncSteps, *_: Any) -> None:
                if on_cancel is not None:
                    asi.set_cancel(on_cancel())
                else:
                    asi.wait_external()
                self.waiting.append(asi)
            return wait_step
        if kind == "async":
            delay = rnd.choice((0, 0, 0.001, 0.003))
            fails = rnd.random() < 0.2

            async def async_step(asi: AsyncSteps, *_: Any) -> int:
                await anyio.sleep(delay)
                if fails:
                    raise ValueError("chaos")
                return 1
            return async_step
        if kind == "await":
            delay = rnd.choice((0, 0.001, 0.002))
            return lambda asi, *_: asi.await_(anyio.sleep(delay))
        if kind == "timeout":
            ms = rnd.choice((0, 1, 2, 5))
            sub = self._step(depth + 1) if rnd.random() < 0.5 else None
            timeout_cancel = self._on_cancel()

            def timeout_step(asi: AsyncSteps, *_: Any) -> None:
                asi.set_timeout(ms)
                asi.set_cancel(timeout_cancel())
                if sub is not None:
                    asi.add(sub)
                else:
                    self.waiting.append(asi)
            return timeout_step
        if kind == "stack":
            def stack_step(asi: AsyncSteps, *_: Any) -> None:
                key = self._id()
                self.cleanups[key] = 0

                def cleanup(obj: object) -> None:
                    self.cleanups[key] += 1

                asi.stack(list, cleanup)
            return stack_step
        subs = [(self._step(depth + 1), self._onerror()) for _ in range(rnd.randrange(1, 4))]
        if kind == "nested":
            on_cancel = self._on_cancel() if rnd.random() < 0.5 else None

            def nested(asi: AsyncSteps, *_: Any) -> None:
                if on_cancel is not None:
                    asi.set_cancel(on_cancel())
                for func, onerror in subs:
                    asi.add(func, onerror)
            return nested
        if kind == "parallel":
            def parallel(asi: AsyncSteps, *_: Any) -> None:
                par = asi.parallel(self._onerror())
                for func, onerror in subs:
                    par.add(func, onerror)
            return parallel
        func, onerror = subs[0]
        if kind == "loop":
            count = rnd.randrange(4)
            breaks = rnd.random() < 0.3

            def body(asi: AsyncSteps, i: int) -> None:
                if breaks and i == 1:
                    asi.break_loop()
                asi.add(func, onerror)
            return lambda asi, *_: asi.repeat(count, body)
        if kind == "dict":
            grows = rnd.random() < 0.5

            def dict_loop(asi: AsyncSteps, *_: Any) -> None:
                data = {"a": 1, "b": 2}

                def body(asi: AsyncSteps, key: str, value: int) -> None:
                    if grows:
                        data[key + "x"] = value
                    asi.add(func, onerror)
                asi.for_each(data, body)
            return dict_loop
        if kind == "gen":
            fails = rnd.random() < 0.5

            def gen_loop(asi: AsyncSteps, *_: Any) -> None:
                def items() -> Any:
                    yield 1
                    if fails:
                        raise RuntimeError("chaos generator")
                    yield 2
                asi.for_each(items(), lambda asi, i, v: asi.add(func, onerror))
            return gen_loop
        prim = {"mutex": self.mutex, "throttle": self.throttle, "limiter": self.limiter}[kind]
        return lambda asi, *_: asi.sync(prim, func, onerror)

    def _root(self, name: str, promise: bool) -> tuple[_Root, AsyncSteps]:
        rec = _Root(name, promise)
        body = [(self._step(0), self._onerror()) for _ in range(self.rnd.randrange(1, 4))]

        def last(asi: AsyncSteps, *_: Any) -> None:
            rec.ok += 1

        def top(asi: AsyncSteps) -> None:
            rec.started += 1

            def on_cancel(asi: AsyncSteps) -> None:
                rec.top_cancel += 1
            asi.set_cancel(on_cancel)
            for func, onerror in body:
                asi.add(func, onerror)
            asi.add(last)  # inside top: a cancel before it ran always meets top's handler

        root = AsyncSteps()
        root.add(top)
        rec.asi = root
        self.roots.append(rec)
        self.report.roots += 1
        return rec, root

    # -- actions ----------------------------------------------------------------------------

    def _action(self, tool: AsyncTool, scopes: list[anyio.CancelScope],
                block: anyio.CancelScope) -> None:
        rnd = self.rnd
        self.report.actions += 1
        on_worker = rnd.random() < 0.3
        kind = rnd.choice(("cancel", "success", "success", "error", "immediate", "deferred",
                           "handle_cancel", "scope", "block"))
        job: Callable[[], object] | None = None
        if kind == "cancel":
            rec = rnd.choice(self.roots)
            root = rec.asi
            assert root is not None
            job = root.cancel
        elif kind in ("success", "error") and self.waiting:
            asi = self.waiting.pop(rnd.randrange(len(self.waiting)))
            if kind == "success":
                job = lambda: _quiet(asi.success, "done")  # noqa: E731
            else:
                job = lambda: _quiet(asi.error, "E1", "external")  # noqa: E731
        elif kind == "immediate":
            job = lambda: self.handles.append(tool.immediate(self._callback))  # noqa: E731
        elif kind == "deferred" and not on_worker:
            self.handles.append(tool.deferred(rnd.choice((0, 1, 3)), self._callback))
        elif kind == "handle_cancel" and self.handles:
            job = self.handles.pop(rnd.randrange(len(self.handles))).cancel
        elif kind == "scope" and scopes:
            scopes.pop(rnd.randrange(len(scopes))).cancel()
        elif kind == "block" and rnd.random() < 0.1:
            block.cancel()
        if job is None:
            return
        if on_worker:
            self.report.thread_actions += 1
            self.worker_jobs.put(job)
        else:
            job()

    def _callback(self) -> None:
        self.callbacks_run += 1

    def _worker(self) -> None:
        while True:
            job = self.worker_jobs.get()
            if job is None:
                return
            try:
                job()
            except FutoInError as exc:
                if "already exited" not in str(exc):
                    self.worker_errors.append(repr(exc))
            except Exception as exc:
                self.worker_errors.append(repr(exc))

    # -- one run ----------------------------------------------------------------------------

    async def run(self) -> None:
        rnd = self.rnd
        worker = threading.Thread(target=self._worker, name="chaos-worker")
        worker.start()
        tool_ref: list[AsyncTool] = []
        try:
            with anyio.move_on_after(RUN_LIMIT) as guard, anyio.CancelScope() as block:
                async with AsyncTool() as tool, anyio.create_task_group() as tg:
                    tool_ref.append(tool)
                    scopes: list[anyio.CancelScope] = []
                    for i in range(rnd.randrange(1, 6)):
                        if rnd.random() < 0.3:
                            rec, root = self._root(f"p{i}", True)
                            scope = anyio.CancelScope()
                            scopes.append(scope)
                            tg.start_soon(self._promise, rec, root, scope)
                        else:
                            rec, root = self._root(f"e{i}", False)
                            root.execute(self._unhandled(rec))
                    for _ in range(rnd.randrange(0, 12)):
                        await anyio.sleep(rnd.choice((0, 0, 0.0005, 0.002)))
                        self._action(tool, scopes, block)
                    # Let it settle, then end what still waits: the block must exit.
                    await anyio.sleep(rnd.choice((0, 0.003)))
                    for rec in self.roots:
                        if not rec.promise:
                            assert rec.asi is not None
                            rec.asi.cancel()
                    for scope in scopes:
                        scope.cancel()
        finally:
            self.worker_jobs.put(None)
            await anyio.to_thread.run_sync(worker.join)
        if guard.cancelled_caught:
            self.problem(f"the run hung for {RUN_LIMIT} s (the tool block did not exit)")
        if tool_ref:
            self._check_tool(tool_ref[0])

    async def _promise(self, rec: _Root, root: AsyncSteps, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                await root.promise()
                rec.ok += 0  # the last step counted it
            except FutoInError as exc:
                if not rec.started and "cancelled before it started" in str(exc):
                    return  # root.cancel() came first: the contract's InternalError
                if exc.code != Errors.Cancelled:
                    rec.codes.append(exc.code)
                    rec.infos.append(root.state.error_info)
            return
        rec.promise_cancelled = True

    def _unhandled(self, rec: _Root) -> Callable[[str], None]:
        def unhandled(code: str) -> None:
            rec.codes.append(code)
            assert rec.asi is not None
            rec.infos.append(rec.asi.state.error_info)
        return unhandled

    # -- checks -----------------------------------------------------------------------------

    def _check_tool(self, tool: AsyncTool) -> None:
        stats = tool.statistics()
        if (stats.roots, stats.ready, stats.scheduled, stats.tasks) != (0, 0, 0, 0):
            self.problem(f"the tool exited with {stats}")

    def check(self) -> None:
        outcomes = self.report.outcomes
        for rec in self.roots:
            ends = rec.ok + len(rec.codes)
            if rec.started > 1:
                self.problem(f"root {rec.name} started {rec.started} times")
            if not rec.started:
                if ends or rec.top_cancel:
                    self.problem(f"root {rec.name} never started but reported {rec}")
                outcome = "not started"
            elif ends > 1:
                self.problem(f"root {rec.name} ended {ends} times: {rec}")
                continue
            elif rec.ok:
                outcome = "ok"
                if rec.top_cancel:
                    self.problem(f"root {rec.name} succeeded after its cancel handler ran")
            elif rec.codes:
                outcome = rec.codes[0]
                if outcome not in ALLOWED_CODES:
                    self.problem(f"root {rec.name} ended with code {outcome!r}")
                info = rec.infos[0]
                if outcome == Errors.InternalError and not str(info).startswith(
                        ALLOWED_INTERNAL):
                    self.problem(f"root {rec.name}: InternalError {info!r}")
            else:
                outcome = "Cancelled"
                if rec.top_cancel != 1 and not rec.promise_cancelled:
                    self.problem(f"root {rec.name} ended with nothing, cancel handler ran "
                                 f"{rec.top_cancel} times")
            if rec.top_cancel > 1:
                self.problem(f"root {rec.name}: top cancel handler ran {rec.top_cancel} times")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        for key, count in self.cancel_counts.items():
            if count > 1:
                self.problem(f"cancel handler #{key} ran {count} times")
        for key, count in self.cleanups.items():
            if count != 1:
                self.problem(f"stack() clean-up #{key} ran {count} times")
        for prim in (self.mutex, self.limiter):
            st = prim.statistics()
            if st.held or st.waiting:
                self.problem(f"{type(prim).__name__} left with {st}")
        if self.throttle.statistics().waiting:
            self.problem(f"Throttle left with {self.throttle.statistics()}")
        for err in self.worker_errors:
            self.problem(f"worker action raised {err}")

    def problem(self, text: str) -> None:
        self.report.problems.append(f"run {self.report.runs}: {text}")


def _quiet(func: Callable[..., object], *args: Any) -> None:
    """success()/error() of a step that may have ended meanwhile: a misuse error is expected."""
    try:
        func(*args)
    except FutoInError as exc:
        if exc.code not in ("E1", Errors.InternalError):
            raise


def run_chaos(backend: str, *, seed: int = 0, runs: int | None = None,
              seconds: float | None = None, start: int = 0) -> ChaosReport:
    """Run until ``runs`` runs are done or ``seconds`` have passed (whichever is given first).

    Run ``i`` of a seed is always the same program: ``start=i, runs=i + 1`` replays it alone.
    """
    report = ChaosReport(runs=start)
    log = logging.getLogger("futoin_anyio")
    records = _Records()
    log.addHandler(records)
    began = time.monotonic()
    try:
        while True:
            if runs is not None and report.runs >= runs:
                break
            if seconds is not None and time.monotonic() - began >= seconds:
                break
            rnd = random.Random(f"{seed}-{report.runs}")
            one = _Run(rnd, report)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    anyio.run(one.run, backend=backend)
                except Exception as exc:  # out of the tool block: a defect
                    one.problem(f"the run raised {type(exc).__name__}: {exc}")
                one.check()
                del one.roots[:], one.waiting[:]  # unrun coroutines close now, or warn
                gc.collect()
            for w in caught:
                one.problem(f"warning: {w.category.__name__}: {w.message}")
            for rec in records.records:
                if rec.levelno >= logging.ERROR:
                    one.problem(f"log: {rec.getMessage()} {rec.exc_text or ''}")
            records.records.clear()
            report.runs += 1
    finally:
        log.removeHandler(records)
    report.seconds = time.monotonic() - began
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", type=int, default=0, help="the first run (to replay one)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="trio")
    args = parser.parse_args()
    rep = run_chaos(args.backend, seed=args.seed, runs=args.runs, seconds=args.seconds,
                    start=args.start)
    out = {k: v for k, v in rep.__dict__.items() if k != "problems"}
    out["problems"] = rep.problems[:20]
    out["problem_count"] = len(rep.problems)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

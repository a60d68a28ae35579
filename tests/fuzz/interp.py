"""Run a fuzz :class:`~.program.Program` on futoin_anyio and record its trace.

Both backends run in *virtual time*: trio with ``MockClock(autojump_threshold=0)``, asyncio with
:class:`VirtualTimeLoop`, whose clock jumps to the next timer whenever the loop would block. So a
program with waits of minutes runs in microseconds, and every event has an exact time.

A trace is a list of JSON-able lists, each ending with the event's virtual time in ms:

* ``["step", id, args, t]``, ``["iter", loop_id, args, t]`` — a step or loop iteration ran;
* ``["onerror", handler_id, code, info, t]`` — an error handler ran (``info`` normalised, see
  :func:`norm_info`);
* ``["cancel", step_id, t]`` — a cancel handler ran;
* ``["cancel-root", t]`` — the program's ``root.cancel()`` was called.

The outcome is ``["ok", args]``, ``["error", code, info]``, ``["cancelled"]`` or ``["pending"]``
(still running at :data:`~.program.LIMIT`).
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import trio.testing

from futoin_anyio import AsyncSteps, Errors, FutoInError
from futoin_anyio._hooks import flow_key

from .program import (
    LIMIT,
    Coro,
    Fail,
    Handler,
    Jump,
    Loop,
    Node,
    Par,
    Program,
    Step,
    Sub,
    Succeed,
    Wait,
)

Event = list[Any]


def norm_info(code: str, info: Any) -> Any:
    """``error_info`` as the trace records it.

    Rule R1 (docs/semantics.rst, "Errors"): a plain Python exception reaches handlers as
    ``InternalError`` with ``error_info = "ValueError: ..."``; the JS equivalent
    (``throw new Error(...)``) leaves ``error_info`` unchanged. So the info of an
    ``InternalError`` is not compared.
    """
    if code == Errors.InternalError:
        return None
    if (code == Errors.LoopBreak or code == Errors.LoopCont) and isinstance(info, str) \
            and info.endswith(": no enclosing loop has that label"):
        return None  # rule R7
    if code == Errors.Timeout and isinstance(info, str) and info.startswith("set_timeout("):
        return None  # rule R8
    return info


@dataclass
class Result:
    trace: list[Event]
    outcome: list[Any]
    #: two timers were due at the same virtual time: their relative order is up to the
    #: implementation's timer queue (see the test module, rule N1).
    collision: bool = False
    #: most ``step`` events at one virtual time (JS and Python yield to the loop after 100 steps
    #: at different points; see rule N2).
    burst: int = 0
    dues: list[float] = field(default_factory=list)
    #: the flow of each trace event: 0 for the root, else the id of the parallel branch's step
    flows: list[int] = field(default_factory=list)

    def per_flow(self) -> dict[int, list[Event]]:
        """The trace split into one subsequence per flow."""
        out: dict[int, list[Event]] = {}
        for flow, ev in zip(self.flows, self.trace, strict=True):
            out.setdefault(flow, []).append(ev)
        return out


class _Run:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.trace: list[Event] = []
        self.counters: dict[int, int] = {}
        self.dues: list[float] = []
        #: per trace event: the flow it happened in (0: the root, else the branch's step id)
        self.flows: list[int] = []
        self.flow_names: dict[object, int] = {}
        self.t0 = anyio.current_time()

    def now(self) -> float:
        # Exact: every time is a sum of dyadic fractions of a second (see program.QUANTUM).
        t = (anyio.current_time() - self.t0) * 1000
        return int(t) if t == int(t) else t

    def rec(self, *ev: Any, asi: AsyncSteps | None = None) -> None:
        t = self.now()
        if t < LIMIT:
            self.trace.append([*ev, t])
            self.flows.append(self.flow_names.get(flow_key(asi), 0) if asi is not None else 0)

    def due(self, ms: float) -> None:
        self.dues.append(self.now() + ms)

    # -- building steps -------------------------------------------------------------------------

    def add_nodes(self, asi: AsyncSteps, nodes: tuple[Node, ...]) -> None:
        for node in nodes:
            if isinstance(node, Step):
                asi.add(self.step_fn(node), self.handler_fn(node.onerror))
            else:
                asi.success_step(*node.args)

    def step_fn(self, node: Step) -> Callable[..., Any]:
        if isinstance(node.body, Coro):
            return self.coro_fn(node, node.body)

        def step(asi: AsyncSteps, *args: Any) -> None:
            self.rec("step", node.id, list(args), asi=asi)
            if node.oncancel:
                asi.set_cancel(lambda a: self.rec("cancel", node.id, asi=a))
            if node.timeout is not None:
                self.due(node.timeout)
                asi.set_timeout(node.timeout)
            self.body(asi, node)

        return step

    def branch_fn(self, node: Step) -> Callable[..., Any]:
        """A parallel branch's step: names its flow after the step, then runs it."""
        inner = self.step_fn(node)

        def branch(asi: AsyncSteps, *args: Any) -> Any:
            self.flow_names[flow_key(asi)] = node.id
            return inner(asi, *args)

        return branch

    def coro_fn(self, node: Step, c: Coro) -> Callable[..., Any]:
        async def step(asi: AsyncSteps, *args: Any) -> int | None:
            self.rec("step", node.id, list(args), asi=asi)
            if node.oncancel:
                asi.set_cancel(lambda a: self.rec("cancel", node.id, asi=a))
            if node.timeout is not None:
                self.due(node.timeout)
                asi.set_timeout(node.timeout)
            self.due(c.ms)
            await anyio.sleep(c.ms / 1000)
            self.rec("awoke", node.id, asi=asi)
            if not c.ok:
                asi.error(c.code, f"c{node.id}")
            return c.value

        return step

    def handler_fn(self, h: Handler | None) -> Callable[[AsyncSteps, str], None] | None:
        if h is None:
            return None

        def onerror(asi: AsyncSteps, code: str) -> None:
            self.rec("onerror", h.id, code, norm_info(code, asi.state.error_info), asi=asi)
            kind = h.kind
            if kind == "recover":
                asi.success(*h.args)
            elif kind == "replace":
                asi.error(h.code, f"h{h.id}")
            elif kind == "add":
                self.add_nodes(asi, h.steps)
            elif kind == "raise":
                raise RuntimeError(f"handler {h.id}")

        return onerror

    def body(self, asi: AsyncSteps, node: Step) -> None:
        b = node.body
        if isinstance(b, Succeed):
            if b.args is not None:
                asi.success(*b.args)
        elif isinstance(b, Fail):
            if b.raise_exc:
                raise ValueError(f"step {node.id}")
            asi.error(b.code, f"i{node.id}")
        elif isinstance(b, Wait):
            self.wait(asi, node, b)
        elif isinstance(b, Sub):
            self.add_nodes(asi, b.children)
        elif isinstance(b, Par):
            par = asi.parallel(self.handler_fn(b.onerror))
            for branch in b.branches:
                par.add(self.branch_fn(branch), self.handler_fn(branch.onerror))
        elif isinstance(b, Loop):
            self.loop(asi, b)
        else:
            assert isinstance(b, Jump)
            if b.brk:
                asi.break_loop(b.label)
            else:
                asi.continue_loop(b.label)

    def wait(self, asi: AsyncSteps, node: Step, w: Wait) -> None:
        if not node.oncancel:
            asi.wait_external()

        def complete() -> None:
            if not asi:  # the step was cancelled or timed out meanwhile
                return
            if w.ok:
                asi.success(*w.args)
            else:
                with contextlib.suppress(FutoInError):  # error() raises in its caller too
                    asi.error(w.code, f"w{node.id}")

        tool = asi.tool
        assert tool is not None
        if w.ms is None:
            tool.immediate(complete)
        else:
            self.due(w.ms)
            tool.deferred(w.ms, complete)

    def loop(self, asi: AsyncSteps, lp: Loop) -> None:
        self.counters[lp.id] = 0

        def iteration(as_: AsyncSteps, *args: Any) -> None:
            self.rec("iter", lp.id, list(args), asi=as_)
            if lp.kind == "loop":
                count = self.counters[lp.id]
                self.counters[lp.id] = count + 1
                if count >= lp.n:
                    as_.break_loop()
            self.add_nodes(as_, lp.body)

        if lp.kind == "loop":
            asi.loop(iteration, lp.label)
        elif lp.kind == "repeat":
            asi.repeat(lp.n, iteration, lp.label)
        elif lp.mapping:
            asi.for_each({f"k{i}": 10 + i for i in range(lp.n)}, iteration, lp.label)
        else:
            asi.for_each([10 + i for i in range(lp.n)], iteration, lp.label)

    # -- running --------------------------------------------------------------------------------

    async def run(self) -> Result:
        program = self.program
        root = AsyncSteps()
        if program.cancel_at is not None:
            cancel_at = program.cancel_at

            def cancel_root() -> None:
                self.rec("cancel-root")
                root.cancel()

            def arm(asi: AsyncSteps) -> None:  # hidden first step: arm the cancel timer
                self.due(cancel_at)
                tool = asi.tool
                assert tool is not None
                tool.deferred(cancel_at, cancel_root)

            root.add(arm)
        self.add_nodes(root, program.steps)
        outcome: list[Any] = ["pending"]
        with anyio.move_on_after(LIMIT / 1000):
            try:
                res = await root.promise()
            except FutoInError as e:
                if e.code == Errors.Cancelled:
                    outcome = ["cancelled"]
                else:
                    outcome = ["error", e.code, norm_info(e.code, root.state.error_info)]
            else:
                if res is None:
                    args: list[Any] = []
                elif isinstance(res, tuple):
                    args = list(res)
                else:
                    args = [res]
                outcome = ["ok", args]
        per_time: dict[int, int] = {}
        for ev in self.trace:
            if ev[0] == "step":
                per_time[ev[-1]] = per_time.get(ev[-1], 0) + 1
        return Result(self.trace, outcome, len(set(self.dues)) != len(self.dues),
                      max(per_time.values(), default=0), self.dues, self.flows)


class _VirtualSelector:
    """Wraps a selector: never blocks; a blocking select jumps the loop's clock instead."""

    def __init__(self, loop: VirtualTimeLoop, selector: selectors.BaseSelector) -> None:
        self._loop = loop
        self._selector = selector

    def select(self, timeout: float | None = None) -> list[Any]:
        events = self._selector.select(0)
        if not events and timeout is not None and timeout > 0:
            scheduled = self._loop._scheduled  # type: ignore[attr-defined]
            # Jump exactly to the next timer (not now + timeout: float sums would drift).
            self._loop.vtime = max(self._loop.vtime, scheduled[0]._when) if scheduled else (
                self._loop.vtime + timeout)
        elif not events and timeout is None:
            events = self._selector.select(None)  # nothing scheduled: a real wait (a thread)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock that autojumps like trio's ``MockClock``."""

    def __init__(self) -> None:
        super().__init__()
        self.vtime = 0.0
        self._selector = _VirtualSelector(self, self._selector)  # type: ignore[has-type,arg-type]

    def time(self) -> float:
        return self.vtime


def run_program(program: Program, backend: str) -> Result:
    """Run ``program`` on ``backend`` ("asyncio" or "trio") in virtual time."""

    async def main() -> Result:
        return await _Run(program).run()

    if backend == "trio":
        options: dict[str, Any] = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    else:
        options = {"loop_factory": VirtualTimeLoop}
    return anyio.run(main, backend=backend, backend_options=options)

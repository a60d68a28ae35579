"""The program model of the differential fuzzer, and a hypothesis strategy that builds programs.

A program is a tree of :class:`Step` nodes. Each step records itself in the trace, optionally sets
a cancel handler and a timeout, then does what its *body* says: succeed, fail, wait for an
external event, add sub-steps, run branches in parallel, loop, or break / continue a loop. Error
handlers (:class:`Handler`) recover, replace the error, add steps, pass the error on or raise.

Times are multiples of :data:`QUANTUM` ms: ``QUANTUM / 1000`` s is a dyadic fraction, so every
deadline (a sum of such delays) is exact in binary floating point on all three implementations and
two events are "at the same time" exactly when their integer millisecond values are equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias, Union

from hypothesis import strategies as st

#: All delays are multiples of this many milliseconds (1/8 s: exact in binary).
QUANTUM = 125
#: Virtual time limit of one program run, in ms; a program still running then is "pending".
LIMIT = 3_600_000

#: Error codes a program raises with ``asi.error()`` (never InternalError/Timeout/Loop*:
#: those come from the engine, so a handler seeing them means something specific).
CODES = ("E1", "E2", "E3")


@dataclass(frozen=True)
class Succeed:
    """``asi.success(*args)``; ``args=None``: return without calling it (implicit success)."""

    args: tuple[int, ...] | None


@dataclass(frozen=True)
class Fail:
    """``asi.error(code, info)``, or (``raise_exc``) a plain Python exception."""

    code: str
    raise_exc: bool


@dataclass(frozen=True)
class Wait:
    """Wait for an external event completed by the tool: ``immediate`` (``ms=None``) or
    ``deferred(ms)``; it calls ``success(*args)`` (``ok``) or ``error(code)``."""

    ms: int | None
    ok: bool
    args: tuple[int, ...]
    code: str


@dataclass(frozen=True)
class Coro:
    """Python only: an ``async def`` step that sleeps ``ms`` (AnyIO's clock), then returns
    ``value`` (``None``: no success argument) or calls ``asi.error(code)`` (``ok`` false).

    ``ms`` is an odd multiple of half a quantum, so it rarely meets an engine timer (whole
    quanta) at the same instant."""

    ms: float
    ok: bool
    value: int | None
    code: str


@dataclass(frozen=True)
class Sub:
    """Add ``children`` as sub-steps."""

    children: tuple[Node, ...]


@dataclass(frozen=True)
class Par:
    """``asi.parallel(onerror)`` with one branch per step of ``branches``."""

    id: int
    branches: tuple[Step, ...]
    onerror: Handler | None


@dataclass(frozen=True)
class Loop:
    """``loop`` (broken by a counter after ``n`` iterations), ``repeat(n)`` or ``for_each`` over
    ``n`` items (a list, or a dict when ``mapping``); ``body`` is added in every iteration."""

    id: int
    kind: str
    n: int
    label: str | None
    body: tuple[Node, ...]
    mapping: bool = False


@dataclass(frozen=True)
class Jump:
    """``break_loop(label)`` (``brk``) or ``continue_loop(label)``."""

    brk: bool
    label: str | None


Body: TypeAlias = Union[Succeed, Fail, Wait, Coro, Sub, Par, Loop, Jump]  # noqa: UP007 (forward refs)


@dataclass(frozen=True)
class Handler:
    """An error handler: records ``(code, error_info)``, then ``kind``:

    ``recover`` (``success(*args)``), ``replace`` (``error(code)``), ``add`` (add ``steps``),
    ``pass`` (return: the error goes on) or ``raise`` (a plain Python exception).
    """

    id: int
    kind: str
    args: tuple[int, ...] = ()
    code: str = "E1"
    steps: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Step:
    """One ``asi.add(func, onerror)``."""

    id: int
    body: Body
    onerror: Handler | None = None
    oncancel: bool = False
    timeout: int | None = None


@dataclass(frozen=True)
class SuccessStep:
    """``asi.success_step(*args)`` among a step's sub-steps."""

    args: tuple[int, ...]


Node: TypeAlias = Union[Step, SuccessStep]  # noqa: UP007


@dataclass(frozen=True)
class Program:
    """Top-level steps of a root, and the time (ms) at which ``root.cancel()`` is called."""

    steps: tuple[Node, ...]
    cancel_at: int | None = None


@dataclass
class _Ctx:
    """Generation context: enclosing loop labels (``None`` for unlabelled loops)."""

    loops: tuple[str | None, ...] = ()
    depth: int = 0
    ids: list[int] = field(default_factory=lambda: [0])


def _args() -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(0, 9), max_size=2).map(tuple)


def _ms() -> st.SearchStrategy[int]:
    return st.integers(1, 48).map(lambda k: k * QUANTUM)


@st.composite
def programs(draw: st.DrawFn, max_depth: int = 4, python_only: bool = False) -> Program:
    """A random :class:`Program`; with ``python_only``, also ``async def`` steps (:class:`Coro`)
    and cancel times that may fall while one runs."""
    budget = [draw(st.integers(3, 24))]  # steps still to create (bounds program size)

    def new_id(ctx: _Ctx) -> int:
        ctx.ids[0] += 1
        return ctx.ids[0]

    def seq(ctx: _Ctx, lo: int = 1, hi: int = 3) -> tuple[Node, ...]:
        out: list[Node] = []
        n = draw(st.integers(lo, hi))
        for _ in range(n):
            if budget[0] <= 0 and out:
                break
            if draw(st.integers(0, 9)) == 0:
                out.append(SuccessStep(draw(_args())))
            else:
                out.append(step(ctx))
        return tuple(out)

    def nested(ctx: _Ctx, loop_label: str | None = None, in_loop: bool = False) -> _Ctx:
        loops = (*ctx.loops, loop_label) if in_loop else ctx.loops
        return _Ctx(loops, ctx.depth + 1, ctx.ids)

    def handler(ctx: _Ctx) -> Handler | None:
        if draw(st.integers(0, 9)) < 5:
            return None
        hid = new_id(ctx)
        kind = draw(st.sampled_from(["recover", "recover", "replace", "add", "pass", "raise"]))
        if kind == "recover":
            return Handler(hid, kind, args=draw(_args()))
        if kind == "replace":
            return Handler(hid, kind, code=draw(st.sampled_from(CODES)))
        if kind == "add":
            return Handler(hid, kind, steps=seq(nested(ctx), 1, 2))
        return Handler(hid, kind)

    def body(ctx: _Ctx, sid: int) -> Body:
        kinds = ["succeed", "succeed", "fail", "wait", "wait"]
        if ctx.loops:
            kinds += ["jump"]
        if python_only:
            kinds += ["coro", "coro"]
        if ctx.depth < max_depth and budget[0] > 0:
            kinds += ["sub", "sub", "par", "loop"]
        kind = draw(st.sampled_from(kinds))
        if kind == "succeed":
            return Succeed(draw(st.none() | _args()))
        if kind == "fail":
            return Fail(draw(st.sampled_from(CODES)), draw(st.integers(0, 3)) == 0)
        if kind == "wait":
            ms = draw(st.none() | _ms())
            ok = draw(st.integers(0, 3)) > 0
            return Wait(ms, ok, draw(_args()), draw(st.sampled_from(CODES)))
        if kind == "coro":
            return Coro(draw(_ms()) - QUANTUM / 2, draw(st.integers(0, 3)) > 0,
                        draw(st.none() | st.integers(0, 9)), draw(st.sampled_from(CODES)))
        if kind == "jump":
            labels = [lb for lb in ctx.loops if lb is not None]
            choice = draw(st.integers(0, 9))
            label: str | None = None
            if labels and choice < 4:
                label = draw(st.sampled_from(labels))
            elif choice == 9:
                label = "nowhere"  # no enclosing loop has it: unwinds as a LoopBreak/LoopCont error
            return Jump(draw(st.booleans()), label)
        if kind == "sub":
            return Sub(seq(nested(ctx)))
        if kind == "par":
            pid = new_id(ctx)
            n = draw(st.integers(0, 3))
            branches = tuple(step(nested(ctx)) for _ in range(n))
            return Par(pid, branches, handler(ctx))
        lid = sid
        lkind = draw(st.sampled_from(["loop", "repeat", "for_each"]))
        label = f"L{lid}" if draw(st.booleans()) else None
        n = draw(st.integers(0, 3))
        return Loop(lid, lkind, n, label, seq(nested(ctx, label, in_loop=True), 1, 2),
                    mapping=lkind == "for_each" and draw(st.booleans()))

    def step(ctx: _Ctx) -> Step:
        budget[0] -= 1
        sid = new_id(ctx)
        b = body(ctx, sid)
        onerror = handler(ctx)
        oncancel = draw(st.integers(0, 3)) == 0
        timeout = draw(_ms()) if draw(st.integers(0, 4)) == 0 else None
        if oncancel and timeout is None and isinstance(b, Succeed) and b.args is None:
            b = Succeed(())  # a cancel handler disables the implicit success: don't hang forever
        return Step(sid, b, onerror, oncancel, timeout)

    ctx = _Ctx()
    steps = seq(ctx, 1, 4)
    cancel_at = draw(_ms()) if draw(st.integers(0, 5)) == 0 else None
    return Program(steps, cancel_at)


def count_steps(nodes: tuple[Node, ...]) -> int:
    """Number of :class:`Step` nodes in a program (for statistics)."""
    total = 0
    for node in nodes:
        if isinstance(node, Step):
            total += 1
            b = node.body
            if isinstance(b, Sub):
                total += count_steps(b.children)
            elif isinstance(b, Par):
                total += count_steps(b.branches)
                if b.onerror is not None:
                    total += count_steps(b.onerror.steps)
            elif isinstance(b, Loop):
                total += count_steps(b.body)
            if node.onerror is not None:
                total += count_steps(node.onerror.steps)
    return total

"""A step object that user code still holds is never handed to a later step.

The engine reuses a completed step object for the next step when ``sys.getrefcount()`` says
nothing else holds it (``SWITCHES.reuse``, set by ``_flow``: CPython up to 3.13 with the GIL,
and only for ``AsyncSteps`` itself). Here a step keeps its ``asi`` — in a list, a closure, a weak
reference, a generator frame, a context variable, an exception's traceback — and every later
step of the root (siblings, a loop, nested steps) checks that it did not receive the held object,
and that the held object is out of service (``bool(asi)`` is ``False``). A control shows that
reuse does happen where it is allowed, and that these checks catch a count that lies.
"""

from __future__ import annotations

import contextvars
import sys
import weakref
from collections.abc import Callable, Generator
from inspect import getgeneratorlocals
from itertools import pairwise
from typing import Any

import pytest

from futoin_anyio import AsyncSteps, AsyncTool, _flow
from futoin_anyio._flow import _step_reuse_proven
from futoin_anyio._frame import COMPILED, SWITCHES

pytestmark = pytest.mark.anyio


class _WeakSteps(AsyncSteps):
    """AsyncSteps that can be weakly referenced (its steps are of the root's class too)."""

    __slots__ = ("__weakref__",)


class _Holder:
    """Keeps a step object somewhere; ``get()`` finds it again (``None`` once it is gone)."""

    strong = True
    cls: type[AsyncSteps] = AsyncSteps

    def hold(self, asi: AsyncSteps) -> None:
        raise NotImplementedError

    def get(self) -> AsyncSteps | None:
        raise NotImplementedError


class _InList(_Holder):
    def __init__(self) -> None:
        self.box: list[AsyncSteps] = []

    def hold(self, asi: AsyncSteps) -> None:
        self.box.append(asi)

    def get(self) -> AsyncSteps | None:
        return self.box[0]


class _InClosure(_Holder):
    def __init__(self) -> None:
        self.fn: Callable[[], AsyncSteps] | None = None

    def hold(self, asi: AsyncSteps) -> None:
        def closure() -> AsyncSteps:
            return asi  # a cell of this closure holds the step

        self.fn = closure

    def get(self) -> AsyncSteps | None:
        assert self.fn is not None
        return self.fn()


class _ByWeakref(_Holder):
    """Weak references are invisible to reference counts: steps of a class that allows them
    are never reused. The weak reference dies, or points to a step out of service."""

    strong = False
    cls = _WeakSteps

    def __init__(self) -> None:
        self.ref: weakref.ref[AsyncSteps] | None = None

    def hold(self, asi: AsyncSteps) -> None:
        self.ref = weakref.ref(asi)

    def get(self) -> AsyncSteps | None:
        assert self.ref is not None
        return self.ref()


class _InGenerator(_Holder):
    def __init__(self) -> None:
        self.gen: Generator[AsyncSteps, None, None] | None = None

    def hold(self, asi: AsyncSteps) -> None:
        def keep(step: AsyncSteps) -> Generator[AsyncSteps, None, None]:
            yield step  # suspended here: the generator's frame holds the step

        self.gen = keep(asi)
        next(self.gen)

    def get(self) -> AsyncSteps | None:
        assert self.gen is not None
        step: AsyncSteps = getgeneratorlocals(self.gen)["step"]
        return step


class _InContextVar(_Holder):
    def __init__(self) -> None:
        self.var: contextvars.ContextVar[AsyncSteps | None] = contextvars.ContextVar(
            "held_step", default=None)

    def hold(self, asi: AsyncSteps) -> None:
        self.var.set(asi)  # seen by the root's later steps (they run in the same context)

    def get(self) -> AsyncSteps | None:
        return self.var.get()


def _raise_with(asi: AsyncSteps) -> None:
    raise ValueError("kept with its traceback")


def _step_in(exc: BaseException) -> AsyncSteps | None:
    """The ``asi`` local of the innermost frame of ``exc``'s traceback that has one."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        step = tb.tb_frame.f_locals.get("asi")
        if isinstance(step, AsyncSteps):
            found = step
        tb = tb.tb_next
    return found


class _InTraceback(_Holder):
    """The user keeps an exception: its traceback's frames hold the step."""

    def __init__(self) -> None:
        self.exc: BaseException | None = None

    def hold(self, asi: AsyncSteps) -> None:
        try:
            _raise_with(asi)
        except ValueError as exc:
            self.exc = exc

    def get(self) -> AsyncSteps | None:
        assert self.exc is not None
        return _step_in(self.exc)


class _InLastException(_Holder):
    """The step fails with ``asi.error()``: ``state.last_exception`` keeps the error, and its
    traceback the failed step; an error handler recovers."""

    def __init__(self) -> None:
        self.state: Any = None

    def hold(self, asi: AsyncSteps) -> None:
        self.state = asi.state
        asi.error("Kept")

    def get(self) -> AsyncSteps | None:
        exc = self.state.last_exception
        assert exc is not None
        return _step_in(exc)


HOLDERS: dict[str, Callable[[], _Holder]] = {
    "list": _InList,
    "closure": _InClosure,
    "weakref": _ByWeakref,
    "generator": _InGenerator,
    "contextvar": _InContextVar,
    "traceback": _InTraceback,
    "last_exception": _InLastException,
}

#: Steps after the holding one: 5 siblings, a loop of 20, 2 nested steps.
LATER = 5 + 20 + 2


class _Run:
    """One root whose first step holds its ``asi``; the later steps record what they get."""

    def __init__(self, holder: _Holder) -> None:
        self.holder = holder
        self.held_id = 0
        self.ids: list[int] = []  # ints only: recording must not hold the steps
        self.got_held: list[bool] = []
        self.held_in_service: list[bool] = []
        self.final: list[str] = []

    def root(self, tool: AsyncTool | None = None) -> AsyncSteps:
        holder = self.holder

        def first(asi: AsyncSteps) -> None:
            self.held_id = id(asi)
            holder.hold(asi)  # a plain step: it completes when this returns (or fails)

        def recover(asi: AsyncSteps, code: str) -> None:
            assert code == "Kept"
            asi.success()

        def later(asi: AsyncSteps, *_: object) -> None:
            held = holder.get()
            self.ids.append(id(asi))
            self.got_held.append(held is asi)
            self.held_in_service.append(held is not None and bool(held))

        def nested(asi: AsyncSteps) -> None:
            asi.add(later)
            asi.add(later)

        def last(asi: AsyncSteps) -> None:
            held = holder.get()
            if holder.strong:
                if held is None or id(held) != self.held_id:
                    self.final.append("the holder lost the step")
                elif self.held_id in self.ids:
                    self.final.append("a later step received the held step object")
            if held is not None and bool(held):
                self.final.append("the held step is still in service")

        root = holder.cls(tool=tool) if tool is not None else holder.cls()
        root.add(first, recover)
        for _ in range(5):
            root.add(later)
        root.add(lambda asi: asi.repeat(20, later))
        root.add(nested)
        root.add(last)
        return root

    def check(self) -> None:
        assert len(self.ids) == LATER
        assert self.got_held == [False] * LATER
        assert self.held_in_service == [False] * LATER
        assert self.final == []


@pytest.mark.parametrize("kind", list(HOLDERS))
async def test_held_step_is_never_handed_out_again_promise(kind: str) -> None:
    run = _Run(HOLDERS[kind]())
    await run.root().promise()
    run.check()


@pytest.mark.parametrize("kind", list(HOLDERS))
async def test_held_step_is_never_handed_out_again_execute(kind: str) -> None:
    run = _Run(HOLDERS[kind]())
    failed: list[str] = []
    async with AsyncTool() as tool:
        run.root(tool).execute(failed.append)
    assert failed == []
    run.check()


def _consecutive_same(ids: list[int]) -> int:
    return sum(1 for a, b in pairwise(ids) if a == b)


@pytest.mark.parametrize("cls", [AsyncSteps, _WeakSteps])
async def test_reuse_happens_only_where_allowed(cls: type[AsyncSteps]) -> None:
    """Control: where the gate allows it, an unheld step object serves the next step (two
    consecutive steps get the same object: without reuse the next one is made while the
    previous one is still referenced, so it cannot share its address); a subclass (it may
    allow weak references) and a gated interpreter never reuse."""
    ids: list[int] = []

    def body(asi: AsyncSteps, _: int) -> None:
        ids.append(id(asi))

    root = cls()
    root.add(lambda asi: asi.repeat(50, body))
    await root.promise()
    assert len(ids) == 50
    if SWITCHES.reuse and cls is AsyncSteps:
        assert _consecutive_same(ids) == 49
    else:
        assert _consecutive_same(ids) == 0


@pytest.mark.parametrize("kind", ["list", "closure", "generator", "contextvar", "traceback"])
async def test_checks_catch_a_count_that_lies(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """What a newer interpreter could do — a count that misses the holder — is caught by the
    checks above (for every holder whose step completes: a failed step is never reused); and
    the gate alone keeps the engine safe from it."""
    monkeypatch.setattr(_flow, "getrefcount", lambda obj: 2)
    monkeypatch.setattr(SWITCHES, "reuse", True)
    run = _Run(HOLDERS[kind]())
    await run.root().promise()
    assert run.got_held[0] is True  # the held object served the next step
    assert "a later step received the held step object" in run.final

    monkeypatch.setattr(SWITCHES, "reuse", False)  # what the gate says on 3.14+
    run = _Run(HOLDERS[kind]())
    await run.root().promise()
    run.check()


def test_gate_matches_the_interpreter() -> None:
    """Reuse only on CPython before 3.14, with the GIL, in the pure build: compiled code holds
    step objects in C variables that no reference count shows (every test above runs on both
    builds: a held step is never handed out again)."""
    expected = sys.implementation.name == "cpython" and sys.version_info < (3, 14)
    if expected and sys.version_info >= (3, 13):
        import sysconfig

        expected = not sysconfig.get_config_var("Py_GIL_DISABLED")
    assert _step_reuse_proven() is (expected and not COMPILED)
    assert SWITCHES.reuse is (expected and not COMPILED)

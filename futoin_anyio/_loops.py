"""Loops (§1.8): the loop step, its iterations and the handler that catches break/continue."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import repeat as _forever
from typing import TYPE_CHECKING, Any

from ._errors import Errors
from ._frame import _NO_ARGS, _Ext

if TYPE_CHECKING:
    from ._flow import _Flow
    from ._steps import AsyncSteps
    from ._types import StepFunc

_LOOP, _REPEAT, _FOR_EACH = range(3)


class _Loop:
    """The step that runs a loop; its iterations are its sub-steps."""

    __slots__ = ("data", "func", "kind", "label")

    def __init__(self, kind: int, func: StepFunc, label: str | None, data: Any) -> None:
        self.kind = kind
        self.func = func
        self.label = label
        self.data = data

    def __call__(self, asi: AsyncSteps, *args: Any) -> None:
        kind = self.kind
        # What each iteration is called with: repeat()'s index alone (the engine calls the
        # step with it as the one argument, no tuple made per iteration), else a tuple.
        it: Iterator[Any]
        if kind == _REPEAT:
            it = iter(range(self.data))
        elif kind == _FOR_EACH:
            data = self.data
            it = iter(data.items()) if isinstance(data, Mapping) else enumerate(data)
        else:
            it = _forever(_NO_ARGS)
        run = _LoopRun(it, self.label, self.func, kind != _FOR_EACH)
        ext = asi._ext = _Ext()
        ext.loop = run
        flow = asi._flow
        assert flow is not None
        run.next_iteration(asi, flow)


class _LoopRun:
    __slots__ = ("builtin", "func", "it", "label")

    def __init__(self, it: Iterator[Any], label: str | None, func: StepFunc,
                 builtin: bool) -> None:
        self.it = it
        self.label = label
        # Each iteration's step is ``func`` with the error handler ``_loop_onerror`` (no tuple to
        # unpack per iteration).
        self.func = func
        # A C iterator that runs no user code and cannot raise (repeat()'s, loop()'s): the
        # engine's run calls it unguarded (_flow._Flow.run).
        self.builtin = builtin

    def next_iteration(self, frame: AsyncSteps, flow: _Flow) -> bool:
        args = next(self.it, None)
        if args is None:
            flow.args = _NO_ARGS  # a loop that ends normally succeeds with no arguments
            return False
        flow.args = args
        q = frame._queue
        if q is None:
            q = frame._queue = []
        q.append((self.func, _loop_onerror))
        return True


def _loop_onerror(asi: AsyncSteps, code: str) -> None:
    """The error handler of each iteration: catches break/continue aimed at this loop."""
    if code != Errors.LoopBreak and code != Errors.LoopCont:
        return
    frame = asi._parent
    flow = asi._flow
    assert frame is not None and flow is not None and frame._ext is not None
    run = frame._ext.loop
    assert run is not None
    label = flow.loop_label
    if label is not None and label != run.label:
        return
    flow.loop_label = None
    if code == Errors.LoopBreak:
        run.it = iter(())
    asi.success()

"""Parallel steps (§1.4): branches as separate flows, joined like a task group."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from threading import get_ident
from typing import TYPE_CHECKING, Any

from . import _instrument as _ins
from ._driver import _Driver
from ._final import refuse_subclasses
from ._flow import _Flow, _halt, _new_frame, _stop_coroutines
from ._frame import (
    _NO_ARGS,
    DONE,
    FAILING,
    SUBSTEPS,
    SWITCHES,
    _end_ext,
    _Ext,
    _internal,
    _wrong_thread,
)

if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # its decorators are no-ops in the pure build
        from . import _nocython as cython

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._state import State
    from ._steps import AsyncSteps
    from ._types import ErrorHandler, ISync, StepFunc

__all__ = ("ParallelSteps",)


@cython.freelist(128)
@cython.cclass
class ParallelSteps:
    """The object ``asi.parallel()`` returns: ``add()`` and ``sync()`` add branches."""

    __slots__ = ("_branches", "_owner", "_results")

    _branches: list[tuple[StepFunc, ErrorHandler | None]]
    _owner: AsyncSteps
    _results: str | None

    def __init__(self) -> None:
        raise TypeError("ParallelSteps is created by AsyncSteps.parallel()")

    @staticmethod
    def _create(owner: AsyncSteps, results: str | None = None) -> ParallelSteps:
        self = ParallelSteps.__new__(ParallelSteps)
        self._branches = []
        self._owner = owner
        self._results = results
        return self

    # Typed locals: the compiled build reads their fields in C (a step's ``_flow`` and a flow's
    # ``driver`` are untyped fields, their modules importing each other).
    @cython.locals(flow=_Flow, driver=_Driver)
    def add(self, func: StepFunc, onerror: ErrorHandler | None = None) -> Self:
        """Add a branch: a step that runs as its own flow; returns ``self`` for chaining.

        Threads: as :meth:`AsyncSteps.add` (the loop's thread, once the root runs)."""
        flow = self._owner._flow
        if flow is not None:
            driver = flow.driver
            if get_ident() != driver._thread:
                _wrong_thread("parallel add()")
        if not callable(func):
            _internal(f"parallel add(): the step must be callable, got {type(func).__name__}")
        if onerror is not None and not callable(onerror):
            _internal(f"parallel add(): onerror must be callable, got {type(onerror).__name__}")
        self._branches.append((func, onerror))
        return self

    def sync(self, obj: ISync, func: StepFunc, onerror: ErrorHandler | None = None) -> Self:
        """Add a branch synchronised against ``obj``. Threads: as :meth:`add`."""
        return self.add(_SyncStep(obj, func, onerror))

    @property
    def state(self) -> State:
        """The shared state of the root (see :attr:`AsyncSteps.state` for threads)."""
        return self._owner.state

    def _run(self, asi: AsyncSteps, *args: Any) -> None:
        branches = self._branches
        results = self._results
        if not branches:
            if results is not None:
                asi.state[results] = []
                asi.success([])
            return
        flow = asi._flow
        assert flow is not None
        driver = flow.driver
        run = _ParallelRun(asi, len(branches))
        run.results = results
        ext = asi._ext = _Ext()
        ext.waiting = True
        ext.par = run
        flows = run.flows
        root = flow.root
        flow_class = type(flow)  # a traced root's branches are traced too (see _traced)
        for branch in branches:
            container = _new_frame(asi, flow, SUBSTEPS)
            container._queue = [branch]
            bflow = flow_class(driver, root, container, run)
            container._flow = bflow
            flows.append(bflow)
            driver._schedule(bflow)


# Final in both builds: declared so in ``_parallel.pxd``, refused here in the pure one (``_final``).
refuse_subclasses(ParallelSteps)


@cython.freelist(128)
@cython.cclass
class _ParallelRun:
    """One execution of a parallel step: its branch flows, joined by a counter."""

    __slots__ = ("flows", "frame", "over", "remaining", "results")

    def __init__(self, frame: AsyncSteps, count: int) -> None:
        self.frame = frame
        self.flows: list[_Flow] = []
        self.remaining = count
        self.over = False  # completed, or its branches are stopped
        #: ``parallel(results=key)``: the state key of the branches' results.
        self.results: str | None = None

    @cython.locals(flow=_Flow, driver=_Driver)  # (see ParallelSteps.add)
    def branch_done(self) -> None:
        self.remaining -= 1
        if self.remaining or self.over:
            return
        self.over = True
        frame = self.frame
        flow = frame._flow
        assert flow is not None and frame._ext is not None
        frame._ext.par = None
        frame._status = DONE
        flow.stack.pop()
        _end_ext(frame)
        key = self.results
        if key is None:
            flow.args = _NO_ARGS
        else:
            # Each branch's last success() arguments, as promise() gives them, in add() order
            # (a finished branch keeps its ``args``): in the state for FTN12 code, and as the
            # parallel step's one success argument.
            values = [_as_result(branch.args) for branch in self.flows]
            frame.state[key] = values
            flow.args = (values,)
        driver = flow.driver
        driver._schedule(flow)

    def branch_failed(self, failed: _Flow, code: str) -> None:
        if self.over:
            return
        frame = self.frame
        parent = frame._flow
        assert parent is not None
        # A loop signal carries its label out of the branch that raised it.
        label = failed.loop_label
        if self.stop_branches(failed, partial(parent._resume_unwind, code, label),
                              f"sibling branch failed with {code}"):
            frame._status = FAILING  # not completable while its branches' coroutines end
        else:
            _unwind_later(parent, code, label)

    def stop_branches(self, failed: _Flow | None, then: Callable[[], None],
                      reason: str) -> bool:
        """Cancel every live branch but ``failed``: each one's cancel handlers run, innermost
        first, once the coroutines in it have ended (so a section it holds is left only then).

        ``True`` if some coroutines are still ending: ``then()`` is called after the last one
        has, and after the cancel handlers of every branch.
        """
        if self.over:
            return False
        self.over = True
        if SWITCHES.active:
            _ins.cancelled(self.frame._flow, reason)  # type: ignore[arg-type]
        halted: list[_Flow] = []
        driver = self.frame._flow.driver  # type: ignore[union-attr]
        for flow in self.flows:
            if flow is failed or flow.finished:
                continue
            flow.cancel_reason = reason
            if _stop_coroutines(flow, reason):
                _halt(flow)
                halted.append(flow)
                driver._join([flow], flow._cancel_frames)
            else:
                flow._cancel()
        if not halted:
            return False
        driver._join(halted, then)
        return True


def _as_result(args: tuple[Any, ...]) -> Any:
    """Success arguments as ``promise()`` returns them: none, the value, or the tuple."""
    if type(args) is not tuple:  # values from C
        args = tuple(args)
    if not args:
        return None
    return args[0] if len(args) == 1 else args


_unwinding = threading.local()


def _unwind_later(parent: _Flow, code: str, label: str | None) -> None:
    """``parent._resume_unwind(code, label)``, but a failure that crosses nested parallel steps
    unwinds one level after the other from here, not by recursion: any depth of nesting fails."""
    chain: deque[tuple[_Flow, str, str | None]] | None = getattr(_unwinding, "chain", None)
    if chain is not None:  # an outer call is unwinding: it takes this level next
        chain.append((parent, code, label))
        return
    chain = _unwinding.chain = deque([(parent, code, label)])
    try:
        while chain:
            flow, flow_code, flow_label = chain.popleft()
            flow._resume_unwind(flow_code, flow_label)
    finally:
        _unwinding.chain = None



class _SyncStep:
    __slots__ = ("func", "obj", "onerror")

    def __init__(self, obj: ISync, func: StepFunc, onerror: ErrorHandler | None) -> None:
        self.obj = obj
        self.func = func
        self.onerror = onerror

    def __call__(self, asi: AsyncSteps, *_: Any) -> None:
        asi.sync(self.obj, self.func, self.onerror)

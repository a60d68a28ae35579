"""The flow runner: runs the steps of a flow, unwinds errors, cancels, awaits coroutine steps.

Vocabulary:

* A **step object** is the ``asi`` a callback receives (:class:`~futoin_anyio.AsyncSteps`). It is
  also the *frame* of that step on its flow's stack: it holds the sub-steps queued during its
  execution (``_queue``) and, in ``_ext``, the rarely used parts (cancel handler, timer, parallel
  run, loop, coroutine scope, ``stack()`` cleanups) so a trivial step costs one small object.
* A **flow** (:class:`_Flow`) is one sequential thread of steps: a root, or one branch of a
  ``parallel()``. Its stack is a list of frames: ``stack[0]`` is the root (or the branch
  container), ``stack[-1]`` the innermost active step. Levels are this explicit stack, never
  Python recursion.
* A **driver** (``_driver``, the base of :class:`~futoin_anyio.AsyncTool`) runs ready flows in
  bursts.

Error unwinding (``_Flow._unwind``) pops frames innermost first; at each one the cancel handler
runs, then the error handler, which may recover (``success()`` or ``add()``), replace the error
(``error()``) or pass it on (return). Cancellation (``_Flow._cancel``) pops frames the same way
but runs only cancel handlers. Coroutine steps run in a task of their own
(``_driver._run_coroutine``) or inline in the driver (``_Driver._run_inline``); both end in
:func:`_coroutine_done`.

This module imports no other engine module at run time: ``_steps`` (the API), ``_parallel`` and
``_driver`` import it.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Coroutine
from functools import partial
from sys import getrefcount
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Final, cast

from anyio import CancelScope, get_cancelled_exc_class

from . import _instrument as _ins
from ._errors import Errors, FutoInError
from ._frame import (
    _NO_ARGS,
    CANCELLING,
    COMPILED,
    CORO,
    DONE,
    EXEC,
    FAILING,
    HANDLER,
    ROOT,
    SUBSTEPS,
    SWITCHES,
    WAIT,
    _end_ext,
    _new,
    _own_ext,
    _run_cleanups,
)
from ._loops import _loop_onerror
from ._reasons import cancel_scope, flow_reason, timeout_info
from ._state import State

if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # the decorators below are no-ops in the pure build
        from . import _nocython as cython

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from ._driver import _Driver
    from ._parallel import _ParallelRun
    from ._steps import AsyncSteps
    from ._tool import AsyncTool


def _step_reuse_proven() -> bool:
    """May ``_Flow.run`` reuse a completed step object that ``sys.getrefcount()`` says nobody
    holds? Only where that count is proven to see every holder.

    The test is ``getrefcount(step) == 2`` (the ``step`` variable and the call's argument). Up
    to CPython 3.13 with the GIL, every reference the user can keep — a list, a closure cell, a
    generator or traceback frame, a context variable — is a counted one
    (``tests/test_step_reuse.py`` checks each). CPython 3.14 borrows references on the
    evaluation stack, so counts come out lower and a step the user still holds once could pass
    as unheld; the free-threaded build (3.13t) splits and defers counts; other interpreters have
    no meaningful counts; the compiled build holds step objects in C variables that no count
    shows. There the engine always makes a new step object (about 18 % more instructions per
    step of a ``repeat``: ``docs/internals.rst``), rather than risk handing a user's object to
    another step.
    """
    if COMPILED:  # compiled code holds references that no count shows (test_step_reuse.py)
        return False
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 14):
        return False
    if sys.version_info >= (3, 13):
        import sysconfig

        return not sysconfig.get_config_var("Py_GIL_DISABLED")
    return True


#: Evaluated once: the hot path tests a bool (a C field in the compiled build).
SWITCHES.reuse = _step_reuse_proven()

#: The one step class whose completed objects ``_Flow.run`` may reuse: ``AsyncSteps`` itself,
#: never a subclass (it may allow weak references, which no count sees, or add slots of its own,
#: which the engine does not reset). Set by ``_steps``, which imports this module.
_REUSABLE: type | None = None

#: What ``_Flow.run``'s ``res`` holds while a step's function runs.
_RUNNING: Final = object()

logger = logging.getLogger("futoin_anyio")

# What _Flow._unwind (and _step_raised, which unwinds) returns. Plain bools and None, so that a
# caller on the hot path may test the result for truth: only GO_ON is true.
#: A handler recovered (``success()`` or ``add()``): the flow goes on.
GO_ON: Final = True
#: Nothing recovered: the flow has failed (it is finished), or a handler cancelled the root.
FAILED: Final = False
#: The unwinding waits at a parallel step for the coroutine tasks of its cancelled branches to
#: end; it goes on by itself then.
PAUSED: Final = None


def _new_frame(parent: AsyncSteps, flow: _Flow, status: int) -> AsyncSteps:
    frame: AsyncSteps
    if COMPILED:  # the class's allocator called in C (type() tells Cython ``cls`` is a type)
        cls = type(parent)
        frame = cls.__new__(cls)
    else:  # object.__new__, cheapest called directly
        frame = _new(parent.__class__)
    frame._binary = None
    state = parent._state
    frame._state = state if state is not None else parent.state
    frame._flow = flow
    frame._parent = parent
    frame._queue = None
    frame._onerror = None
    frame._ext = None
    frame._func = None
    frame._status = status
    return frame


def _root_state(flow: _Flow) -> State:
    """The State of the flow's root, read from its field (``root.state``, a property, makes it on
    first use)."""
    root = flow.root
    state = root._state
    return state if state is not None else root.state


def _on_timeout(frame: AsyncSteps, timeout_ms: float = math.nan) -> None:
    ext = frame._ext
    if frame._status is DONE or ext is None:
        return
    ext.timer = None
    flow = frame._flow
    assert flow is not None
    if flow.finished:  # halted while its coroutines end (see _halt): the timer is moot
        return
    info = timeout_info(frame, timeout_ms)  # names the step and its limit, on every path
    exc = FutoInError(Errors.Timeout, info)
    state = frame.state
    state["error_info"] = info
    state["last_exception"] = exc
    if SWITCHES.active:
        _ins.timed_out(flow, info)
    flow.throw(Errors.Timeout, info)


# A root or branch's flow: freed ones serve the next (a subclass of Python's never).
@cython.freelist(256)
@cython.cclass
class _Flow:
    """One sequential thread of steps: a root, or a branch of a parallel step."""

    __slots__ = (
        "__weakref__",
        "args",
        # Why the flow is being cancelled (set by whoever cancels it, read only then: never
        # initialised, so a flow that is not cancelled pays nothing; see _reasons.flow_reason).
        "cancel_reason",
        "driver",
        "executed",
        "finished",
        "handed",
        "interrupt",
        "loop_label",
        "on_unhandled",
        "par",
        "queued",
        "result_code",
        "root",
        "stack",
    )

    cancel_reason: str

    def __init__(self, driver: AsyncTool, root: AsyncSteps, base: AsyncSteps,
                 par: _ParallelRun | None) -> None:
        """A flow of ``root``'s whose stack starts at ``base``: the root itself, or the
        container of a branch of ``par``."""
        self.driver = driver
        self.root = root
        # Room for four frames (the base, a step, its sub-step and that one's own), which pops
        # down to two frames keep: CPython's list gives room back, with a realloc, on a pop
        # that leaves it under half full, and a list made with two or more items grows to room
        # for eight on its next append (a loop's body at depth four then reallocated it once
        # per iteration). An empty list's first append makes room for four.
        stack: list[AsyncSteps] = []
        stack.append(base)
        self.stack = stack
        self.par = par
        self.args: tuple[Any, ...] = _NO_ARGS
        self.queued = False
        self.finished = False
        self.interrupt = False
        self.handed: BaseException | None = None
        self.loop_label: str | None = None
        self.result_code: str | None = None
        self.on_unhandled: Callable[[str], object] | None = None
        self.executed = False  # started by execute() (not promise())

    def _go(self, budget: int) -> int:
        """Run from the driver's ready queue."""
        self.queued = False
        self.driver._current = self
        return self.run(budget)

    def run(self, budget: int) -> int:
        """Run steps until the flow waits or ends, or ``budget`` steps are spent.

        This is the hot path: per step a queue pop (or the loop's next item), one frame object,
        one call and a few checks. A flow often runs only a step or two per call, so the set-up
        binds only what it must (module globals are as fast as locals on CPython 3.11+).
        """
        if self.finished or self.root._status is CANCELLING:
            return budget
        stack = self.stack
        base = stack[0]
        # None while nobody asked for the root's state: its steps then find it through their
        # parents when asked (most roots never need one: a dict less per root for the GC).
        state = base._state
        # type(), not __class__: the compiled build then knows ``cls`` is a type.
        cls = type(base)
        # A completed step object that nothing else references is reused for the next step:
        # nobody can observe it, and it saves an allocation and garbage-collector work per step.
        # Only where reference counts are proven to see every holder (SWITCHES.reuse), and only
        # for AsyncSteps itself: a subclass may allow weak references (which no count sees) or
        # add slots of its own (which the engine does not reset).
        reuse = SWITCHES.reuse and cls is _REUSABLE
        spare: AsyncSteps | None = None
        args: Any  # the next call's arguments: a tuple, or repeat()'s index alone (an int)
        # The innermost frame, kept here rather than read from the stack per step: the stack is
        # the chain of parents (each frame's ``_parent`` is the one below it), so a completed
        # frame's parent is the new top. Re-read only where something else changed the stack.
        frame = stack[-1]
        # One ``try`` spans the whole run (in the compiled build entering a ``try`` saves the
        # thread's exception state), and only what a step's call raised is the step's error:
        # ``res`` holds ``_RUNNING`` while a step's function runs, and its result then (one
        # store per step, where a flag set and cleared would be two). Anything else propagates.
        res: Any = None
        while True:
            try:
                while budget > 0:
                    q = frame._queue
                    if q:
                        item = q.pop()
                        if not q:  # a waiting flow keeps no empty lists for the GC to scan
                            frame._queue = None
                        if type(item) is tuple:
                            func, onerror = item
                        else:
                            func = item  # type: ignore[assignment]
                            onerror = None
                        args = self.args
                    else:
                        # The frame's queue is exhausted: the next loop iteration, or the frame
                        # completes.
                        if frame is base:
                            self._finish(None)
                            return budget
                        ext = frame._ext
                        if ext is not None:
                            loop = ext.loop
                            if loop is not None:
                                # The last item's arguments let go first: enumerate() and a
                                # dict's items then refill their tuple rather than make a new one.
                                args = None
                                # repeat() or loop(): a C iterator that cannot raise.
                                if loop.builtin:
                                    args = next(loop.it, None)
                                else:
                                    try:
                                        args = next(loop.it, None)
                                    except Exception as exc:
                                        # A collection changed, a generator raised.
                                        if not self._unwound(exc):
                                            return budget
                                        frame = stack[-1]
                                        continue
                                if args is not None:
                                    # The iteration's arguments go to its call from here: the
                                    # flow's ``args`` are for steps taken from a queue (what
                                    # success() gave).
                                    func = loop.func
                                    onerror = _loop_onerror
                                else:
                                    # A loop that ends succeeds with no arguments.
                                    self.args = _NO_ARGS
                                    loop = None
                            if loop is None:
                                _end_ext(frame)
                        else:
                            loop = None
                        if loop is None:
                            frame._status = DONE
                            stack.pop()
                            frame = frame._parent  # type: ignore[assignment]
                            continue
                    if spare is None:  # _new_frame(), inlined: this runs for every step
                        # cls.__new__(cls), spelt so: the compiled build calls the type's allocator
                        # in C (no look-up, no argument tuple); the pure build, object.__new__.
                        step: AsyncSteps = cls.__new__(cls)
                        step._state = state
                        step._flow = self
                        step._queue = None
                        step._ext = None
                        step._binary = None
                    else:
                        step = spare
                        spare = None
                    step._parent = frame
                    step._onerror = onerror
                    step._func = func
                    step._status = EXEC
                    stack.append(step)
                    budget -= 1
                    # Calls with a fixed number of arguments run without building a tuple and,
                    # for a Python function, without a nested interpreter loop. No arguments are
                    # the empty tuple, a singleton in CPython: an identity test, not a truth test.
                    res = _RUNNING
                    if args is _NO_ARGS:
                        res = func(step)
                    elif type(args) is tuple:
                        if len(args) == 1:  # noqa: SIM108 (a statement: fewer instructions compiled)
                            res = func(step, args[0])
                        else:
                            res = func(step, *args)
                    elif type(args) is int:  # repeat()'s index: the iteration's one argument
                        res = func(step, args)
                    else:  # values from C: fit() to what func declares
                        res = func(step, *args.fit(func))
                    if self.interrupt:
                        handed = self.handed
                        if handed is None:
                            self._interrupted()
                            return budget
                        # The step ended with an error handed over rather than raised (see
                        # _hooks.refuse): unwound as if it had raised it.
                        self.handed = None
                        self.interrupt = False
                        if not self._unwound(handed):
                            return budget
                        frame = stack[-1]
                        continue
                    st = step._status
                    if st is EXEC:
                        # A coroutine of the compiled build (await_()'s own) is no
                        # CoroutineType: the ABC check runs only for a result that is neither
                        # None nor a CoroutineType (two calls, not one of a tuple: no tuple
                        # built per step).
                        if res is not None and (
                                isinstance(res, CoroutineType) or isinstance(res, Coroutine)):  # noqa: SIM101
                            self._start_coroutine(step, res)
                            return budget
                        q = step._queue
                        if q:
                            q.reverse()
                            step._status = SUBSTEPS
                            ext = step._ext
                            if ext is None or ext.loop is None:  # a loop set its iteration's args
                                self.args = _NO_ARGS  # sub-steps start with no arguments (as in JS)
                            frame = step
                            continue
                        ext = step._ext
                        if ext is not None:
                            if ext.waiting:
                                step._status = WAIT
                                return budget
                            _end_ext(step)
                        self.args = _NO_ARGS
                        step._status = DONE
                        stack.pop()
                    elif st is DONE:
                        stack.pop()
                        ext = step._ext
                        if ext is not None:
                            _end_ext(step)
                    else:  # the step waits, or something it called moved the stack
                        if not stack:  # its flow ended meanwhile
                            return budget
                        frame = stack[-1]
                        continue
                    # Two references: ``step`` and getrefcount's argument. Nobody kept the object.
                    if reuse and ext is None and getrefcount(step) == 2 and step._queue is None \
                            and step._binary is None:
                        spare = step
                break
            except BaseException as exc:
                if res is not _RUNNING:
                    raise
                res = None
                if self.interrupt:
                    self._interrupted()
                    return budget
                if not self._unwound(exc):
                    return budget
                frame = stack[-1]
                continue
        self.driver._schedule(self)
        return 0

    # -- errors -------------------------------------------------------------------------------

    def _unwound(self, exc: BaseException) -> bool:
        """Unwind ``exc``, the top step's error: ``True`` if the run goes on from the new top,
        ``False`` if it stops here (the flow waits, ended, or is to be cancelled)."""
        if self._step_raised(exc) is not GO_ON:
            return False
        if self.interrupt:
            self._interrupted()
            return False
        return True

    def _step_raised(self, exc: BaseException) -> bool | None:
        """The top step's callback raised: unwind. What :meth:`_unwind` returns."""
        state = _root_state(self)
        if isinstance(exc, FutoInError):
            code = exc.code
            if state["last_exception"] is not exc:
                state["error_info"] = exc.info
                state["last_exception"] = exc
        elif isinstance(exc, BaseExceptionGroup) and _judgeable_group(exc):
            code = _judge_group(exc, state)
        elif isinstance(exc, Exception):
            code = Errors.Timeout if _is_timeout(exc) else Errors.InternalError
            state["error_info"] = f"{type(exc).__name__}: {exc}"
            state["last_exception"] = exc
        else:
            raise exc  # KeyboardInterrupt, SystemExit, the backend's cancellation: never ours
        return self._unwind(code)

    def throw(self, code: str, reason: str) -> None:
        """Raise ``code`` at the innermost active step (a timeout, an external error).

        A coroutine step running (in a task, or awaited inline) is interrupted first: its scope
        is cancelled with ``reason`` (a timeout's says whose limit it was).
        """
        if self.finished or self.root._status is CANCELLING:
            return
        top = self.stack[-1]
        if top._status is FAILING:
            # An error is already unwinding through here (waiting for cancelled tasks to end):
            # it will pass every enclosing step, the timed one included.
            return
        ext = top._ext
        if top._status is CORO and ext is not None and ext.scope is not None:
            # Let the coroutine's own cleanup finish first: unwinding goes on when its task ends.
            ext.pending = code
            cancel_scope(ext.scope, reason)
            return
        if self._unwind(code) is GO_ON:
            self.driver._schedule(self)

    def throw_at(self, frame: AsyncSteps, code: str) -> None:
        """A deferred external error: applies only if ``frame`` is still the innermost step."""
        if (not self.finished and self.stack[-1] is frame and frame._status is FAILING
                and self._unwind(code) is GO_ON):
            self.driver._schedule(self)

    def _unwind(self, code: str, fresh: bool = True) -> bool | None:
        """Unwind from the innermost step outwards.

        :data:`GO_ON` if a handler recovered, :data:`FAILED` if the flow failed, :data:`PAUSED`
        if the unwinding waits at a parallel step for the coroutines of its cancelled branches
        to end (it goes on by itself then, as a task group's exit waits for its children).
        ``fresh``: the error starts here (not resumed, nor coming out of a branch), so
        ``async_stack`` is its path.
        """
        stack = self.stack
        state = _root_state(self)
        self.args = _NO_ARGS  # steps an error handler adds start with no arguments
        if fresh and code != Errors.LoopBreak and code != Errors.LoopCont:
            state["async_stack"] = _stack_funcs(stack) if self.par is None else _step_path(self)
            if SWITCHES.active:
                _ins.failed(self, stack[-1], code, state.get("error_info"))
        while len(stack) > 1:
            top = stack[-1]
            ext = top._ext
            if ext is not None and ext.par is not None and not ext.par.over:
                # The run stays in ext.par while paused: whoever waits for the coroutines
                # under this frame (an outer unwinding, cancel()) still finds them.
                resume = partial(self._resume_unwind, code, self.loop_label)
                if ext.par.stop_branches(None, resume, f"parallel step unwound by {code}"):
                    top._status = FAILING
                    return PAUSED
            frame = stack.pop()
            frame._status = DONE
            frame._queue = None
            if frame._ext is not None:
                code = self._cancel_frame(frame, code) or code
                if self._cancelled():  # the cancel handler cancelled the root
                    return FAILED
            onerror = frame._onerror
            if onerror is None:
                continue
            parent = frame._parent
            assert parent is not None
            handler = _new_frame(parent, self, HANDLER)
            handler._func = onerror
            stack.append(handler)
            try:
                onerror(handler, code)
                if self._cancelled():  # the handler cancelled the root: nothing else runs
                    return FAILED
            except FutoInError as exc:
                if self._cancelled():
                    return FAILED
                if state["last_exception"] is not exc:
                    state["error_info"] = exc.info
                    state["last_exception"] = exc
                code = exc.code
            except Exception as exc:
                if self._cancelled():
                    return FAILED
                code = Errors.InternalError
                state["error_info"] = f"{type(exc).__name__}: {exc}"
                state["last_exception"] = exc
            else:
                if handler._status is DONE:  # success(): go on after the failed step
                    stack.pop()
                    if handler._ext is not None:
                        _end_ext(handler)  # its stack() clean-ups
                    return GO_ON
                if handler._queue:  # add(): its steps run at the failed step's level
                    handler._queue.reverse()
                    handler._status = SUBSTEPS
                    return GO_ON
            handler._status = DONE
            handler._queue = None
            stack.pop()
            if handler._ext is not None:
                _end_ext(handler)
        self._finish(code)
        return FAILED

    def _cancelled(self) -> bool:
        """The root was cancelled by a handler: at once, or when the running step returns."""
        if self.finished:
            return True
        current = self.driver._current
        return current is not None and current.interrupt and current.root is self.root

    def _resume_unwind(self, code: str, label: str | None = None) -> None:
        """Go on unwinding ``code`` (with the loop ``label`` it carries): after a pause, or
        coming out of a failed branch."""
        if self.finished or self.root._status is CANCELLING:
            return
        self.loop_label = label
        if self._unwind(code, False) is GO_ON:
            self.driver._schedule(self)

    def _cancel_frame(self, frame: AsyncSteps, code: str | None) -> str | None:
        """A frame leaves the stack abnormally: drop its parallel run, cancel its coroutine and
        its timer; call its cancel handler; run its cleanups. An exception in the cancel handler
        replaces ``code`` while unwinding, and is logged while cancelling (``code`` is
        ``None``)."""
        ext = frame._ext
        assert ext is not None
        if ext.par is not None:
            # The run is over by now: its branches were stopped by _unwind (or walked by
            # _cancel_frames, which drops the run before the frame).
            ext.par = None
        scope = ext.scope
        if scope is not None:
            ext.scope = None
            cancel_scope(scope, flow_reason(
                self, "the flow was cancelled" if code is None else f"step unwound by {code}"))
        coro = ext.coro
        if coro is not None:  # its task may never start (its group is cancelled): close it now
            ext.coro = None
            if scope is None:
                coro.close()
        timer = ext.timer
        if timer is not None:
            ext.timer = None
            timer.cancel()
        oncancel = ext.oncancel
        if oncancel is not None:
            ext.oncancel = None
            try:
                oncancel(frame)
            except Exception as exc:
                if code is None:
                    logger.exception("cancel handler %r raised", oncancel)
                else:
                    state = self.root.state
                    code = Errors.InternalError
                    state["error_info"] = f"{type(exc).__name__}: {exc}"
                    state["last_exception"] = exc
        if ext.cleanups or ext.on_exit is not None:
            _run_cleanups(ext)
        return code

    # -- cancellation -------------------------------------------------------------------------

    def _cancel(self) -> None:
        """Run the cancel handlers of every active step, innermost first; the flow ends."""
        if self.finished:
            return
        self._cancel_frames()

    def _cancel_frames(self) -> None:
        """Pop every frame of this flow and of the branches nested in it, innermost first,
        each with its cancel handler and cleanups (:meth:`_cancel_frame`).

        Also the end of a flow halted by :func:`_halt`, once its coroutines have ended. The
        branches of a parallel step are cancelled before the step itself, depth first, with an
        explicit list of flows rather than recursion: any depth of nesting is cancelled. A
        branch whose stack is empty has ended already (completed, failed or cancelled).
        """
        self.finished = True
        todo = [self]
        while todo:
            flow = todo[-1]
            stack = flow.stack
            while len(stack) > 1:
                frame = stack[-1]
                ext = frame._ext
                if ext is not None and ext.par is not None:  # its branches first
                    par = ext.par
                    ext.par = None
                    par.over = True
                    live = [branch for branch in reversed(par.flows) if branch.stack]
                    if live:
                        for branch in live:
                            branch.finished = True
                        todo.extend(live)
                        break
                stack.pop()
                frame._status = DONE
                frame._queue = None
                if ext is not None:
                    self._cancel_frame(frame, None)
            else:
                todo.pop()
                if stack:
                    stack[0]._status = DONE
                    stack[0]._queue = None  # steps that never ran go now (await_() closes its own)
                if flow.par is not None:
                    flow._drop_links()

    def _drop_links(self) -> None:
        """A finished branch lets go of its container and parallel run: no reference cycles
        are left for the garbage collector, the branch is freed as soon as it is unreferenced."""
        self.stack.clear()
        self.par = None

    def cancel_root(self, wait: bool = True, reason: str | None = None) -> None:
        """``asi.cancel()`` on the root: cancel every flow of the root, end with ``Cancelled``.

        As when the task awaiting ``promise()`` is cancelled, the root's coroutine steps are
        cancelled first and, with ``wait``, the cancel handlers run once their tasks have ended
        (the root's flows stand still meanwhile).
        """
        if self.finished:
            return
        root = self.root
        if reason is not None:
            self.cancel_reason = reason
        if root._status is CANCELLING:
            if wait:
                return
        elif wait and _stop_coroutines(self, flow_reason(self, "root.cancel()")):
            root._status = CANCELLING
            self.driver._join([self], partial(self.cancel_root, False))
            return
        self._cancel()
        self.result_code = Errors.Cancelled
        self._root_done()

    def abort(self) -> None:
        """The task running the root was cancelled (or hit a BaseException): cancel handlers run."""
        if not self.finished:
            self._cancel()
            self.result_code = Errors.Cancelled

    def _interrupted(self) -> None:
        self.interrupt = False
        root_flow = self.root._flow
        assert root_flow is not None
        root_flow.cancel_root()

    # -- completion -----------------------------------------------------------------------------

    def _finish(self, code: str | None) -> None:
        self.finished = True
        stack = self.stack
        base = stack[0]
        base._status = DONE
        base._queue = None  # steps that never ran (after an error) go now
        self.result_code = code
        par = self.par
        if par is None:
            label = self.loop_label
            if label is not None and (code == Errors.LoopBreak or code == Errors.LoopCont):
                what = "break_loop" if code == Errors.LoopBreak else "continue_loop"
                self.root.state["error_info"] = (
                    f"{what}({label!r}): no enclosing loop has that label")
            self._root_done()
        else:
            # A finished branch lets go of its container and parallel run (_drop_links(),
            # written out on this hot path).
            stack.clear()
            self.par = None
            if code is None:
                par.branch_done()
            else:
                par.branch_failed(self, code)

    def _root_done(self) -> None:
        driver = self.driver
        if driver._sleep_scope is not None:
            driver._wake()  # the driver is idle: let it see the root is over
        if self.executed:
            root = self.root
            driver._roots.discard(root)
            # (Instruments hear of its end from _traced._HookedFlow, which overrides this.)
            root._flow = None  # no root <-> flow cycle: both are freed as soon as unreferenced
            code = self.result_code
            if code is not None and code != Errors.Cancelled:
                handler = self.on_unhandled
                if handler is not None:
                    try:
                        handler(code)
                    except Exception:
                        logger.exception("unhandled_error callback %r raised", handler)
                else:
                    logger.error("AsyncSteps root failed with unhandled error %s (error_info=%r)",
                                 code, self.root.state.get("error_info"))

    def outcome(self) -> Any:
        """The finished flow's result: the last ``success()`` arguments (``None`` for none, the
        value for one, a tuple for several). Only once :meth:`failure` gave ``None``."""
        args = self.args
        if not args:
            return None
        return args[0] if len(args) == 1 else args

    def failure(self) -> FutoInError | None:
        """What ``promise()`` raises for the finished flow, or ``None`` if it succeeded.

        Returned, not raised: the caller raises it, so that the traceback has no frame of this
        method (in the compiled build each frame of a traceback is an object of its own, and a
        failed root's error is often kept in a cycle with its caller's frame).
        """
        code = self.result_code
        if code is None:
            return None
        state = _root_state(self)
        # Subscripts reach dict's C slot; ``state.get`` goes through State's attribute hook.
        # The keys are there unless a step deleted one (MissingVariable is a KeyError).
        try:
            last = state["last_exception"]
        except KeyError:
            last = None
        if code == Errors.Cancelled:
            reason: str | None = getattr(self, "cancel_reason", None)
            return FutoInError(Errors.Cancelled, "the root was cancelled" if reason is None
                               else f"the root was cancelled: {reason}")
        try:
            info = state["error_info"]
        except KeyError:
            info = None
        if isinstance(last, FutoInError) and last.code == code and last.info is info:
            return last
        err = FutoInError(code, info)
        if isinstance(last, BaseException):
            err.__cause__ = last  # (raise err from last)
        return err

    # -- coroutine steps --------------------------------------------------------------------------

    def _start_coroutine(self, step: AsyncSteps, coro: Coroutine[Any, Any, Any]) -> None:
        step._status = CORO
        ext = _own_ext(step)
        ext.coro = coro
        self.driver._start_coroutine(step, coro)


def _start_root(root: AsyncSteps, budget: int) -> int:
    """First run of a root started with ``execute()`` (from its driver's ready queue).

    A function of this module rather than a method of the root, so that the compiled build's
    driver calls it directly in C (as it does ``_Flow._go``), not through a method look-up.
    """
    if root._status is not ROOT or root._flow is not None:
        return budget  # cancelled before it could start
    tool = root._tool
    assert tool is not None
    # What instruments and the flow dump need is kept only while asked for (see _traced).
    if not SWITCHES.hooked:
        flow = _Flow(tool, root, root, None)
    else:
        from ._traced import hooked_flow

        flow = hooked_flow(tool, root, True)
    q = root._queue
    if q:
        q.reverse()
    root._flow = flow
    flow.on_unhandled = root._unhandled
    flow.executed = True
    tool._current = flow
    return flow.run(budget)


_scope_classes: dict[str, type[CancelScope]] = {}


def scope_class(library: str) -> type[CancelScope]:
    """The running backend's own CancelScope class (called in the event loop's thread).

    Instantiated directly, it skips AnyIO's per-call lookup of the backend (through sniffio,
    a measurable part of an ``async def`` step's cost on asyncio).
    """
    cls = _scope_classes.get(library)
    if cls is None:
        if library == "trio":
            # AnyIO's CancelScope on trio is a thin wrapper of trio's own, which has the same
            # cancel(), cancel_called and deadline: skip the wrapper (about 7,000 instructions
            # of a step's 55,000-instruction scope).
            cls = cast("type[CancelScope]", sys.modules["trio"].CancelScope)
        else:
            cls = type(CancelScope())
        _scope_classes[library] = cls
    return cls


def _close_unstarted(step: AsyncSteps) -> None:
    """Close the coroutine of ``step``, cancelled before it started: it never runs."""
    ext = step._ext
    if ext is not None and ext.coro is not None:
        coro = ext.coro
        ext.coro = None
        coro.close()


def _coroutine_done(step: AsyncSteps, result: Any, error: BaseException | None,
                    inline: bool) -> bool:
    """A coroutine step's coroutine ended with ``result`` or ``error``: complete the step.

    ``True`` if the flow can go on now (only ``inline``: the caller runs it); otherwise it is
    scheduled, or waits, or is over.
    """
    flow = step._flow
    ext = step._ext
    assert flow is not None and ext is not None
    if flow.finished or flow.root._status is CANCELLING:
        # Halted, or the root's cancel() waits for this coroutine: cancel handlers run next.
        return False
    pending = ext.pending
    if pending is not None:  # a timeout or external error waited for this coroutine to end
        ext.pending = None
        if error is None:  # else the coroutine's own error wins, as in a task group
            if step._status is CORO and flow.stack[-1] is step:
                step._status = WAIT
                return _go_on(flow, flow._unwind(pending), inline)
            return False
    if step._status is not CORO or flow.finished:
        return False  # cancelled (parallel sibling failed, root cancelled): handlers already ran
    if error is not None:
        step._status = EXEC
        return _go_on(flow, flow._step_raised(error), inline)
    if step._queue:
        step._queue.reverse()
        flow.args = _NO_ARGS
        if result is not None:
            step._status = EXEC
            return _go_on(flow, flow._step_raised(FutoInError(
                Errors.InternalError, "an async step returned a result and added sub-steps")),
                inline)
        step._status = SUBSTEPS
    elif ext.waiting and result is None and ext.timer is None and ext.oncancel is None:
        step._status = WAIT
        return False
    else:
        flow.args = _NO_ARGS if result is None else (result,)
        step._status = DONE
        flow.stack.pop()
        _end_ext(step)
    return _go_on(flow, GO_ON, inline)


def _go_on(flow: _Flow, can: bool | None, inline: bool) -> bool:
    """Go on with ``flow`` if ``can`` is :data:`GO_ON` (a result of ``_unwind``, tested for
    truth): ``True`` if the caller runs it now (``inline``), else it is scheduled."""
    if not can:
        return False
    if inline:
        return True
    flow.driver._schedule(flow)
    return False


def _inline_cancelled(driver: _Driver, step: AsyncSteps) -> None:
    """An inline coroutine step ended because its scope was cancelled: by ``asi.cancel()``
    (which waits for it), an external error or timeout (``pending``), or the shared scope's
    deadline (the flow's nearest timeout, now due)."""
    ext = step._ext
    flow = step._flow
    assert ext is not None and flow is not None
    if flow.root._status is CANCELLING or flow.finished:
        return
    pending = ext.pending
    if pending is None:
        driver._fire_timers()  # the deadline: the timeout's own handler unwinds
        if step._status is not CORO or flow.stack[-1] is not step or flow.finished:
            return
        pending = Errors.Timeout  # pragma: no cover - the timer and the deadline agree
    ext.pending = None
    if step._status is CORO and flow.stack[-1] is step:
        step._status = WAIT
        if flow._unwind(pending) is GO_ON:
            driver._schedule(flow)


def _outer_flow(flow: _Flow) -> _Flow | None:
    """The flow whose parallel step ``flow`` is a branch of; ``None`` for a root's own flow."""
    par = flow.par
    return None if par is None else par.frame._flow


def _flow_deadline(flow: _Flow) -> float:
    """The nearest deadline of the timeouts active in ``flow`` and in the flows it is a
    parallel branch of."""
    deadline = math.inf
    current: _Flow | None = flow
    while current is not None:
        for frame in current.stack:
            ext = frame._ext
            if ext is not None and ext.timer is not None and ext.deadline < deadline:
                deadline = ext.deadline
        current = _outer_flow(current)
    return deadline


# -- what comes out of user code -------------------------------------------------------------------


def _is_timeout(exc: BaseException) -> bool:
    """A deadline of the user's own: ``TimeoutError`` (``anyio.fail_after``, ``asyncio.timeout``)
    or ``trio.TooSlowError``."""
    if isinstance(exc, TimeoutError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(exc, trio.TooSlowError)


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    todo: list[BaseException] = [group]
    while todo:
        exc = todo.pop()
        if isinstance(exc, BaseExceptionGroup):
            todo.extend(reversed(exc.exceptions))
        else:
            out.append(exc)
    return out


def _judgeable_group(group: BaseExceptionGroup[Any]) -> bool:
    """Does the group hold an error of the step's? Not when its leaves are all the backend's
    cancellation (the step was cancelled), nor when one is a ``KeyboardInterrupt`` or the
    like (never ours)."""
    cancelled = get_cancelled_exc_class()
    errors = False
    for leaf in _leaves(group):
        if isinstance(leaf, Exception):
            errors = True
        elif not isinstance(leaf, cancelled):
            return False
    return errors


def _judge_group(group: BaseExceptionGroup[Any], state: State) -> str:
    """The error code of a group from a nursery or task group inside a step, judged by its leaves
    (cancellations aside): the first ``FutoInError`` decides the code and ``error_info``; with no
    FutoInError, a lone timeout is ``Timeout`` and anything else ``InternalError``. A lone
    FutoInError is ``state.last_exception`` itself; otherwise the group is."""
    errors = [e for e in _leaves(group) if isinstance(e, Exception)]
    for exc in errors:
        if isinstance(exc, FutoInError):
            state["error_info"] = exc.info
            state["last_exception"] = exc if len(errors) == 1 else group
            return exc.code
    state["error_info"] = "; ".join(f"{type(e).__name__}: {e}" for e in errors)
    state["last_exception"] = group
    if len(errors) == 1 and _is_timeout(errors[0]):
        return Errors.Timeout
    return Errors.InternalError




def _running_coroutines(flow: _Flow, out: list[AsyncSteps]) -> None:
    """Collect the coroutine steps of ``flow`` and of the parallel branches nested in it whose
    coroutine has not ended (an explicit list of flows, not recursion: any depth of nesting).

    A branch is searched as long as it holds frames: a parallel step whose unwinding is paused
    keeps its run (``ext.par``), and its halted branches keep their frames until their
    coroutines end, so whoever waits for the coroutines under a frame finds them all.
    """
    todo = [flow]
    while todo:
        for frame in todo.pop().stack:
            ext = frame._ext
            if ext is None:
                continue
            if frame._status is CORO and ext.coro is not None:
                out.append(frame)
            par = ext.par
            if par is not None:
                todo.extend(branch for branch in par.flows if branch.stack)


def _has_running(flows: list[_Flow]) -> bool:
    running: list[AsyncSteps] = []
    for flow in flows:
        _running_coroutines(flow, running)
        if running:
            return True
    return False


def _stop_coroutines(flow: _Flow, reason: str) -> bool:
    """Cancel the coroutines still running under ``flow`` with ``reason`` (close those whose
    task has not started: they never run). ``True`` if some are still ending."""
    running: list[AsyncSteps] = []
    _running_coroutines(flow, running)
    ending = False
    for step in running:
        ext = step._ext
        assert ext is not None
        scope = ext.scope
        if scope is not None:
            cancel_scope(scope, reason)
            ending = True
        else:
            coro = ext.coro
            assert coro is not None
            ext.coro = None
            coro.close()
    return ending


def _halt(flow: _Flow) -> None:
    """Make ``flow`` and every branch nested in it stand still, frames kept: nothing of them
    runs on (a coroutine that ends, a timer, a step) until :meth:`_Flow._cancel_frames`
    unwinds them, once their coroutines have ended."""
    todo = [flow]
    while todo:
        current = todo.pop()
        current.finished = True
        for frame in current.stack:
            ext = frame._ext
            if ext is not None and ext.par is not None:
                todo.extend(branch for branch in ext.par.flows if branch.stack)


def _stack_funcs(stack: list[AsyncSteps]) -> list[object]:
    """The callables of a flow's active steps, outermost first (not its base frame's)."""
    funcs = []
    for i in range(1, len(stack)):
        frame = stack[i]
        funcs.append(frame._func)
    return funcs


def _step_path(flow: _Flow) -> list[object]:
    """The callables of the active steps from the root to the innermost step of ``flow``,
    through the parallel steps and branches it is nested in."""
    parts: list[list[object]] = []
    current: _Flow | None = flow
    while current is not None:
        parts.append(_stack_funcs(current.stack))
        current = _outer_flow(current)
    return [func for part in reversed(parts) for func in part]


"""What every frame shares: the step statuses, the rarely used frame parts, their clean-up."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

from ._errors import Errors, FutoInError

#: True in the compiled build (Cython makes ``cython.compiled`` a constant), False in the pure
#: one, with or without Cython installed.
COMPILED: bool
if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # the decorators below are no-ops in the pure build
        from . import _nocython as cython
COMPILED = bool(cython.compiled)

if TYPE_CHECKING:
    from anyio import CancelScope

    from ._driver import Handle
    from ._loops import _LoopRun
    from ._parallel import _ParallelRun
    from ._steps import AsyncSteps
    from ._types import CancelHandler

logger = logging.getLogger("futoin_anyio")

# Step object statuses (``AsyncSteps._status``), compared by identity on the hot path. A step
# object is "in service" (``bool(asi)`` is true) in every status but SUBSTEPS, DONE and FAILING;
# each API method checks the status it needs.
MODEL: Final = 0  # a root not executed yet: add() builds level 0
EXEC: Final = 1  # its execute callback is running
HANDLER: Final = 2  # its error handler is running (a fresh object in the failed step's place)
SUBSTEPS: Final = 3  # its callback returned, its sub-steps run
WAIT: Final = 4  # waiting for an external success()/error(), a timeout or a cancel
CORO: Final = 5  # an async def step (or await_) is running: awaited inline, or as a task
ROOT: Final = 6  # a root that is executing
DONE: Final = 7  # out of service: completed, failed or cancelled
# Failing: failed by an external error() that unwinds it once the running step returns; or a
# parallel step whose unwinding waits for the coroutine tasks of its cancelled branches to end.
FAILING: Final = 8
# A root whose cancel() waits for its coroutine tasks to end (still in service: its steps' cancel
# handlers have not run yet).
CANCELLING: Final = 9

_STATUS_NAMES = ("model", "executing", "in error handler", "running sub-steps", "waiting",
                 "awaiting", "running root", "out of service", "failing", "cancelling")

_T = TypeVar("_T")
#: An object of ``cls`` without its ``__init__``. The compiled build's extension types have
#: their own ``__new__``, which ``object.__new__`` refuses to stand in for.
_new: Callable[[type[_T]], _T] = (
    (lambda cls: cls.__new__(cls)) if COMPILED else object.__new__)
_NO_ARGS: tuple[Any, ...] = ()


class _Switches:
    """What the engine tests on its paths: whether instruments or the dump's times are on (set
    by ``_instrument``), whether step objects may be reused (set once by ``_flow``), and how many
    scopes the engine has cancelled (``_reasons``). One object, read by every engine module: in
    the compiled build each test reads a C field, not a module attribute."""

    __slots__ = ("active", "cancels", "hooked", "reuse", "times")

    def __init__(self) -> None:
        #: Some instrument is registered, globally or on a tool.
        self.active = False
        #: The flow dump asked for times (``dump.record_times()``).
        self.times = False
        #: ``active or times``: the one test a root's start makes.
        self.hooked = False
        #: ``_Flow.run`` may reuse a completed step object nobody holds (``_flow``).
        self.reuse = False
        #: The number of the engine's last cancel (``_reasons.cancel_scope``): an inline run asks
        #: its scope whether it was cancelled (trio's property reads the clock) only once this
        #: has changed since the scope was entered.
        self.cancels = 0


SWITCHES: Final = _Switches()


# The compiled build keeps up to 512 freed frames (of _Frame and AsyncSteps, not of a Python
# subclass) for the next ones: a step object per step, without a trip to the allocator and
# without counting towards the cyclic collector's next run (docs/internals.rst, "Free lists").
@cython.freelist(512)
@cython.cclass
class _Frame:
    """The data of a step object: :class:`~futoin_anyio.AsyncSteps` (``_steps``) is its one
    subclass here, and adds the API. It is a frame of its flow's stack (see ``_flow``).

    Declared here, below the flow runner, so that the compiled build's flow runner knows the
    layout of the step objects it makes without importing ``_steps`` (see the checklists of
    ``docs/internals.rst``): a new slot goes here and into ``_frame.pxd``.
    """

    # ``_binary`` caches the C binding of the binary bridge (a step with one is never reused).
    # No ``__weakref__``: a step object nothing references may be reused (see ``_Flow.run``).
    __slots__ = (
        "_binary",
        "_ext",
        "_flow",
        "_func",
        "_onerror",
        "_parent",
        "_queue",
        "_started",
        "_state",
        "_status",
        "_tool",
        "_unhandled",
    )


@cython.freelist(512)
@cython.cclass
class _Ext:
    """The rarely used parts of a frame."""

    __slots__ = ("cleanups", "coro", "deadline", "exit_arg", "loop", "on_exit", "oncancel",
                 "par", "pending", "scope", "timer", "waiting")

    def __init__(self) -> None:
        self.waiting = False
        self.oncancel: CancelHandler | None = None
        self.timer: Handle | None = None
        self.deadline = 0.0  # of ``timer``, on the event loop's clock
        self.par: _ParallelRun | None = None
        self.loop: _LoopRun | None = None
        self.scope: CancelScope | None = None
        self.coro: Coroutine[Any, Any, Any] | None = None
        self.pending: str | None = None
        self.cleanups: list[tuple[Callable[[Any], object] | None, Any]] | None = None
        #: ``on_exit(exit_arg)`` is called once when the frame leaves the stack, however it
        #: ends, after the cleanups: the entry of a sync primitive (``_mutex``) leaves through it.
        self.on_exit: Callable[[Any], object] | None = None
        self.exit_arg: Any = None


class _SharedWait(_Ext):
    """The type of :data:`_WAIT_ONLY`: read-only, so a missed :func:`_own_ext` fails loudly."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"the shared _Ext of waiting steps is read-only (set {name})")


#: The one ``_Ext`` shared by the steps that only wait (``wait_external()``, the common case):
#: they allocate nothing. Before storing anything else, a frame gets its own (:func:`_own_ext`).
_WAIT_ONLY = _SharedWait.__new__(_SharedWait)
for _name in _Ext.__slots__:
    object.__setattr__(_WAIT_ONLY, _name, None)
object.__setattr__(_WAIT_ONLY, "waiting", True)
del _name


def _own_ext(frame: AsyncSteps) -> _Ext:
    """The frame's own ``_Ext``, made now if it has none or shares :data:`_WAIT_ONLY`."""
    ext = frame._ext
    if ext is None or ext is _WAIT_ONLY:
        mine = _Ext()
        mine.waiting = ext is not None
        frame._ext = ext = mine
    return ext


def _internal(message: str) -> NoReturn:
    raise FutoInError(Errors.InternalError, message)


def _wrong_thread(what: str) -> NoReturn:
    raise RuntimeError(
        f"{what} must be called on the event loop's thread; from another thread only success() "
        "and error() of a step waiting for an external event and cancel() of a root are allowed")


def _end_ext(frame: AsyncSteps) -> None:
    """A frame completed normally: drop its timer and cancel handler, run stack() cleanups
    and the exit hook."""
    ext = frame._ext
    if ext is None:
        return
    timer = ext.timer
    if timer is not None:
        ext.timer = None
        timer.cancel()
    if ext.oncancel is not None:
        ext.oncancel = None
    if ext.cleanups or ext.on_exit is not None:
        _run_cleanups(ext)


def _run_cleanups(ext: _Ext) -> None:
    """The frame leaves the stack, however it ends: its stack() clean-ups (newest first), then
    its exit hook."""
    cleanups = ext.cleanups
    if cleanups:
        ext.cleanups = None
        for cleanup, obj in reversed(cleanups):
            if cleanup is not None:
                try:
                    cleanup(obj)
                except Exception:
                    logger.exception("stack() cleanup %r raised", cleanup)
    on_exit = ext.on_exit
    if on_exit is not None:
        ext.on_exit = None
        on_exit(ext.exit_arg)

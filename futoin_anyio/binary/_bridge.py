"""The C <-> Python bridge: our ``FutoInAsyncSteps`` / ``FutoInSync``, and wrappers of foreign ones.

Errors never cross into C. Every ``extern "Python"`` trampoline catches everything; what it
caught is *recorded* on the innermost C call that Python is making on this thread (a
:class:`_Call`), and raised again in Python once that C function has returned. This is how a C
step that calls ``handle_error()`` (or ``breakLoop()``, or misuses a pointer) and then returns
fails exactly like a Python step whose ``error()`` raised. After something was recorded, further
table calls in the same C callback are ignored: C code must return after ``handle_error()``.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, final

from .._errors import Errors, FutoInError
from .._frame import _CORO, _EXEC, _HANDLER
from .._state import State
from ._ffi import ffi, lib
from ._values import FromC, emit_args, fit_args, receive_args, release

__all__ = (
    "ForeignAsyncSteps",
    "ForeignSync",
    "StateVariable",
    "binary_of",
    "c_error_handler",
    "c_step",
    "sync_binary_of",
    "wrap",
    "wrap_sync",
)

_log = logging.getLogger("futoin_anyio")
NULL = ffi.NULL


# -- recording errors raised under a trampoline --------------------------------------------------


class _Call:
    """One C function Python is calling; collects the first exception C caused meanwhile."""

    __slots__ = ("exc",)

    def __init__(self) -> None:
        self.exc: BaseException | None = None


class _Misuse(Exception):
    """A misuse of the binary interface detected in C (NULL or freed pointer...)."""


class _TLS(threading.local):
    def __init__(self) -> None:
        self.calls: list[_Call] = []


_tls = _TLS()


def _current() -> _Call | None:
    calls = _tls.calls
    return calls[-1] if calls else None


def _record(exc: BaseException) -> None:
    call = _current()
    if call is not None:
        if call.exc is None:
            call.exc = exc
        return
    # C called us outside of any callback we made (a foreign thread, an external event):
    # there is no step to fail, so it can only be logged.
    _log.error("futoin_anyio.binary: error in a call from C: %r", exc, exc_info=exc)


def _run_c(asi: Any, func: Any, *args: Any) -> Any:
    """Call the C function ``func(*args)``; raise what C caused through our table meanwhile."""
    calls = _tls.calls
    call = _Call()
    calls.append(call)
    try:
        result = func(*args)
    finally:
        calls.pop()
    exc = call.exc
    if exc is not None:
        if isinstance(exc, _Misuse):
            if asi is not None and hasattr(asi, "error"):
                asi.error(Errors.InternalError, str(exc))
            raise FutoInError(Errors.InternalError, str(exc)) from None
        raise exc
    return result


def _on_trampoline_error(exc_type: Any, exc: Any, tb: Any) -> None:
    # Only reached if the guard itself failed (e.g. MemoryError): never let it into C.
    _record(exc if exc is not None else exc_type())


_F = TypeVar("_F", bound=Callable[..., Any])


def _def_extern(func: _F) -> _F:
    """Register ``func`` as the ``extern "Python"`` function of the same name."""
    ffi.def_extern(onerror=_on_trampoline_error)(func)
    return func


def _decode(s: Any, what: str) -> str:
    if s == NULL:
        raise TypeError(f"{what} is NULL")
    raw = ffi.string(s)
    try:
        return raw.decode("utf-8")  # type: ignore[no-any-return]
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not valid UTF-8: {exc.reason}") from None


def _opt_label(label: Any) -> str | None:
    return None if label == NULL else _decode(label, "label")


def _need(ptr: Any, what: str) -> None:
    if ptr == NULL:
        raise TypeError(f"{what} is NULL")


# -- our FutoInAsyncSteps ----------------------------------------------------------------------


class _Binding:
    """The C object of one Python step (or root, or parallel) and its table implementation."""

    __slots__ = ("__weakref__", "_error_info", "_ref", "handle", "kept", "kept_mem", "kind",
                 "mem", "ptr")

    #: kinds
    STEP = 0
    PARALLEL = 1

    def __init__(self, target: Any, kind: int) -> None:
        # Held strongly: a step caches its binding in its ``_binary`` slot (a cycle the garbage
        # collector breaks), which also keeps the engine from reusing that step object.
        self._ref: Callable[[], Any] = lambda: target
        self.kind = kind
        self.handle = ffi.new_handle(self)
        self.mem = ffi.new("FtnPyAsyncSteps *")
        self.ptr = lib.ftnpy_asi_init(self.mem, self.handle)
        self._error_info: Any = None
        # stack() memory of a pointer that has no executing step to hold it (see _stack)
        self.kept: list[tuple[Any, Any]] | None = None
        self.kept_mem: list[Any] = []

    @property
    def target(self) -> Any:
        target = self._ref()
        if target is None:
            raise _Misuse("the AsyncSteps behind this FutoInAsyncSteps pointer is gone")
        return target

    def kill(self) -> None:
        lib.ftnpy_asi_kill(self.mem)

    def step_only(self, what: str) -> Any:
        if self.kind == _Binding.PARALLEL:
            raise _Misuse(f"{what}() is not available on a parallel() pointer: use add()/addSync()")
        return self.target


# Pointers from newInstance(), alive until free().
_instances: dict[int, tuple[_Binding, Any]] = {}
# Freed bindings are kept a while, so a use after free() finds a dead marker, not junk.
_quarantine: deque[_Binding] = deque(maxlen=256)


def _binding(asi: Any) -> _Binding:
    b: _Binding | None = asi._binary
    if b is None:
        b = asi._binary = _Binding(asi, _Binding.STEP)
    return b


def binary_of(asi: Any) -> Any:
    """The stable ``FutoInAsyncSteps *`` of a step object (``AsyncSteps.binary()``)."""
    if isinstance(asi, ForeignAsyncSteps):
        return asi.binary()
    return _binding(asi).ptr


def _addr(ptr: Any) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def wrap(ptr: Any) -> Any:
    """An AsyncSteps interface over a ``FutoInAsyncSteps *`` (``AsyncSteps.wrap()``).

    Our own pointer gives back the Python step object; a foreign one a
    :class:`ForeignAsyncSteps` that calls through its function table.
    """
    if not isinstance(ptr, ffi.CData):
        raise TypeError(f"wrap() needs a FutoInAsyncSteps * cdata, got {type(ptr).__name__}")
    ptr = ffi.cast("FutoInAsyncSteps *", ptr)
    if ptr == NULL:
        raise ValueError("wrap(): NULL FutoInAsyncSteps pointer")
    h = lib.ftnpy_asi_handle(ptr)
    if h != NULL:
        b: _Binding = ffi.from_handle(h)
        return b.target if b.kind == _Binding.STEP else _ParallelView(b)
    if ptr.api == NULL:
        raise ValueError("wrap(): FutoInAsyncSteps pointer with a NULL api table")
    return ForeignAsyncSteps(ptr, _Keep())


@final
class _ParallelView:
    """``wrap()`` of one of our parallel() pointers: the Python parallel object's add()/sync()."""

    __slots__ = ("_b",)

    def __init__(self, b: _Binding) -> None:
        self._b = b

    def add(self, func: Any, onerror: Any = None) -> _ParallelView:
        self._b.target.add(func, onerror)
        return self

    def sync(self, obj: Any, func: Any, onerror: Any = None) -> _ParallelView:
        self._b.target.sync(obj, func, onerror)
        return self

    def binary(self) -> Any:
        return self._b.ptr


def _table(name: str, default: Any = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``func(binding, *args)`` as the ``extern "Python"`` function ``name``."""

    def deco(func: Callable[..., Any]) -> Callable[..., Any]:
        def trampoline(h: Any, *args: Any) -> Any:
            calls = _tls.calls
            if calls and calls[-1].exc is not None:
                return default  # the C callback already failed: it must just return
            try:
                return func(ffi.from_handle(h), *args)
            except BaseException as exc:
                _record(exc)
                return default

        trampoline.__name__ = name
        ffi.def_extern(name=name, onerror=_on_trampoline_error)(trampoline)
        return func

    return deco


class _CStep:
    """A C execute callback as a Python step."""

    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any, *args: Any) -> None:
        # The callee owns the values (it may move them out of their slots, as the reference
        # does); what it left in its slots is cleaned up here, once. Never NULL: no values is
        # an empty FutoInArgs.
        cargs = emit_args(args, True, [])
        try:
            _run_c(asi, lib.ftnpy_call_exec, self.f, binary_of(asi), self.data, cargs)
        finally:
            lib.ftnpy_reset_args(cargs)


class _CErrorHandler:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any, code: str) -> None:
        ccode = ffi.new("char[]", code.encode("utf-8"))
        _run_c(asi, lib.ftnpy_call_error, self.f, binary_of(asi), self.data, ccode)


class _CCancel:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any) -> None:
        _run_c(asi, lib.ftnpy_call_cancel, self.f, binary_of(asi), self.data)


class _CLoopBody:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any, *_: Any) -> None:
        _run_c(asi, lib.ftnpy_call_loop, self.f, binary_of(asi), self.data)


class _CRepeatBody:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any, i: int, *_: Any) -> None:
        _run_c(asi, lib.ftnpy_call_repeat, self.f, binary_of(asi), self.data, i)


def _c_data(data: Any) -> Any:
    if data is None:
        return NULL
    return ffi.cast("void *", data)


def c_step(func: Any, data: Any = None) -> Callable[..., None]:
    """A Python step that calls the C execute callback ``func(bsi, data, args)``.

    ``func`` is a cdata function pointer (from any cffi module: ``ffi.addressof(lib, "name")``),
    ``data`` a pointer or an integer. The step's arguments reach C as borrowed ``FutoInArgs``;
    what C reports through the table (``handle_error()``...) applies when it returns.
    """
    f = ffi.cast("FutoInAsyncSteps_execute_callback", func)
    _need(f, "c_step(): execute callback")
    return _CStep(f, _c_data(data))


def c_error_handler(func: Any, data: Any = None) -> Callable[[Any, str], None]:
    """A Python error handler that calls the C callback ``func(bsi, data, code)``."""
    f = ffi.cast("FutoInAsyncSteps_error_callback", func)
    _need(f, "c_error_handler(): error callback")
    return _CErrorHandler(f, _c_data(data))


def _error_handler(eh: Any, data: Any) -> _CErrorHandler | None:
    return None if eh == NULL else _CErrorHandler(eh, data)


@_table("ftnpy_py_add")
def _add(b: _Binding, data: Any, f: Any, eh: Any) -> None:
    _need(f, "add(): execute callback")
    b.target.add(_CStep(f, data), _error_handler(eh, data))


@_table("ftnpy_py_parallel", NULL)
def _parallel(b: _Binding, data: Any, eh: Any) -> Any:
    asi = b.step_only("parallel")
    par = asi.parallel(_error_handler(eh, data))
    pb = _Binding(par, _Binding.PARALLEL)
    # The pointer is valid while the step that made it executes (its parallel() is built).
    asi.stack(lambda: pb, _Binding.kill)
    return pb.ptr


_EMPTY = ffi.new("char[]", b"")


@final
class StateVariable:
    """A C state variable: what ``stateVariable()`` stored in ``asi.state[name]``.

    ``ptr`` is the ``void *`` returned by ``allocate(data)``; ``cleanup(data, ptr)`` runs exactly
    once, when this object is released with the root's state.
    """

    __slots__ = ("__weakref__", "ptr")

    def __init__(self, ptr: Any, cleanup: Any, data: Any) -> None:
        self.ptr = ptr
        if cleanup != NULL:
            weakref.finalize(self, lib.ftnpy_call_state_cleanup, cleanup, data, ptr)

    def __repr__(self) -> str:
        return f"<StateVariable {self.ptr}>"


@_table("ftnpy_py_state_variable", NULL)
def _state_variable(b: _Binding, data: Any, name: Any, allocate: Any, cleanup: Any) -> Any:
    _need(name, "stateVariable(): name")
    # Any bytes (the reference's Mutex uses raw pointer bytes): not UTF-8 maps through
    # surrogateescape, so every C name is one distinct Python key.
    key = ffi.string(name).decode("utf-8", "surrogateescape")
    state = b.target.state
    if key == "error_info":
        info = state.get("error_info")
        if info is None:
            return _EMPTY  # as the reference: an empty string, never NULL
        # valid until the next stateVariable("error_info") on this pointer, or its release
        b._error_info = ffi.new("char[]", str(info).encode("utf-8", "replace"))
        return b._error_info
    var = state.get(key)
    if type(var) is StateVariable:
        return var.ptr
    if var is not None:
        if isinstance(var, ffi.CData):
            return ffi.cast("void *", var)
        raise TypeError(
            f"stateVariable(): state[{key!r}] holds a Python {type(var).__name__}, not a C pointer"
        )
    if allocate == NULL:
        return NULL
    ptr = lib.ftnpy_call_alloc(allocate, data)
    state[key] = StateVariable(ptr, cleanup, data)
    return ptr


def _stack_cleanup(cleanup: Any) -> Callable[[Any], None]:
    def done(mem: Any) -> None:
        if cleanup != NULL:
            lib.ftnpy_call_stack_cleanup(cleanup, mem)

    return done


def _executing(asi: Any) -> bool:
    st = asi._status
    return st is _EXEC or st is _HANDLER or st is _CORO


def _release_kept(kept: list[tuple[Any, Any]]) -> None:
    while kept:
        ptr, cleanup = kept.pop()
        _stack_cleanup(cleanup)(ptr)


@_table("ftnpy_py_stack", NULL)
def _stack(b: _Binding, size: int, cleanup: Any) -> Any:
    mem = ffi.new("char[]", size or 1)  # zeroed; cffi aligns it for any C type
    ptr = ffi.cast("void *", mem)
    target = b.target
    owner = target._owner if b.kind == _Binding.PARALLEL else target
    if _executing(owner):
        # The usual case: freed, after cleanup, when the executing step ends.
        owner.stack(lambda: mem, lambda _m: _stack_cleanup(cleanup)(ptr))
        return ptr
    # A root before execute(), or a step that is leaving (the reference's wrappers keep their
    # step data and themselves there): the memory lives as long as the pointer's Python object.
    kept = b.kept
    if kept is None:
        kept = b.kept = []
        weakref.finalize(b, _release_kept, kept)
    kept.append((ptr, cleanup))
    b.kept_mem.append(mem)
    return ptr


@_table("ftnpy_py_success")
def _success(b: _Binding, cargs: Any) -> None:
    asi = b.step_only("success")
    values = () if cargs == NULL else receive_args(cargs, True)
    asi.success(*values)
    if values:
        flow = asi._flow
        if flow is not None and type(flow.args) is tuple and len(flow.args) == len(values):
            # Values from C: the next Python step gets those it declares (the reference pads
            # every call to four values with placeholders and leaves old values in unused slots).
            flow.args = FromC(flow.args)


@_table("ftnpy_py_handle_error")
def _handle_error(b: _Binding, code: Any, info: Any) -> None:
    asi = b.step_only("handle_error")
    scode = _decode(code, "handle_error(): code")
    sinfo = None if info == NULL else _decode(info, "handle_error(): info")
    asi.error(scode, sinfo)


@_table("ftnpy_py_set_timeout")
def _set_timeout(b: _Binding, ms: int) -> None:
    b.step_only("setTimeout").set_timeout(ms)


@_table("ftnpy_py_set_cancel")
def _set_cancel(b: _Binding, data: Any, ch: Any) -> None:
    _need(ch, "setCancel(): cancel callback")
    b.step_only("setCancel").set_cancel(_CCancel(ch, data))


@_table("ftnpy_py_wait_external")
def _wait_external(b: _Binding) -> None:
    b.step_only("waitExternal").wait_external()


@_table("ftnpy_py_loop")
def _loop(b: _Binding, data: Any, f: Any, label: Any) -> None:
    _need(f, "loop(): body")
    b.step_only("loop").loop(_CLoopBody(f, data), _opt_label(label))


@_table("ftnpy_py_repeat")
def _repeat(b: _Binding, data: Any, count: int, f: Any, label: Any) -> None:
    _need(f, "repeat(): body")
    b.step_only("repeat").repeat(count, _CRepeatBody(f, data), _opt_label(label))


@_table("ftnpy_py_break_loop")
def _break_loop(b: _Binding, label: Any) -> None:
    b.step_only("breakLoop").break_loop(_opt_label(label))


@_table("ftnpy_py_continue_loop")
def _continue_loop(b: _Binding, label: Any) -> None:
    b.step_only("continueLoop").continue_loop(_opt_label(label))


@_table("ftnpy_py_execute")
def _execute(b: _Binding, data: Any, eh: Any) -> None:
    asi = b.step_only("execute")
    ptr = b.ptr
    unhandled = None
    if eh != NULL:

        def unhandled(code: str) -> None:
            ccode = ffi.new("char[]", code.encode("utf-8"))
            _run_c(None, lib.ftnpy_call_error, eh, ptr, data, ccode)

    asi.execute(unhandled)


@_table("ftnpy_py_cancel")
def _cancel(b: _Binding) -> None:
    b.step_only("cancel").cancel()


@_table("ftnpy_py_add_sync")
def _add_sync(b: _Binding, sync: Any, data: Any, f: Any, eh: Any) -> None:
    _need(f, "addSync(): execute callback")
    obj = wrap_sync(sync)
    b.target.sync(obj, _CStep(f, data), _error_handler(eh, data))


def _root_of(b: _Binding) -> Any:
    target = b.target
    if b.kind == _Binding.PARALLEL:
        target = target._owner
    return target


def _flow_id(asi: Any) -> int:
    """rootId: one per sequential flow, so each parallel branch has its own (spec 1.11.4)."""
    from .._engine import flow_key

    return id(flow_key(asi))


@_table("ftnpy_py_root_id", 0)
def _root_id(b: _Binding) -> int:
    return _flow_id(_root_of(b))


@_table("ftnpy_py_is_valid", 0)
def _is_valid(b: _Binding) -> int:
    target = b._ref()
    return int(target is not None and bool(target))


@_table("ftnpy_py_new_instance", NULL)
def _new_instance(b: _Binding) -> Any:
    asi = _root_of(b).new_instance()
    nb = asi._binary = _Binding(asi, _Binding.STEP)
    _instances[_addr(nb.ptr)] = (nb, asi)
    return nb.ptr


@_table("ftnpy_py_free")
def _free(b: _Binding) -> None:
    entry = _instances.pop(_addr(b.ptr), None)
    if entry is None:
        raise _Misuse("free(): the pointer was not returned by newInstance() (or freed twice)")
    b.kill()
    _quarantine.append(b)


@final
class _Scheduled:
    """A C callback scheduled on our tool. Only its timer holds it: ``_sched`` maps
    ``FutoInHandle.data3`` to it weakly, so the entry goes with the timer (fired, cancelled or
    dropped with its tool)."""

    __slots__ = ("__weakref__", "handle", "marker", "tool")

    def __init__(self, tool: Any) -> None:
        self.tool = tool
        self.handle: Any = None
        self.marker = ffi.new("char[]", 1)  # FutoInHandle.data1: non-NULL while scheduled


_sched: weakref.WeakValueDictionary[int, _Scheduled] = weakref.WeakValueDictionary()
_sched_ids = itertools.count(1)


def _tool_of(b: _Binding) -> Any:
    tool = _root_of(b).tool
    if tool is None:
        raise _Misuse("this AsyncSteps has no AsyncTool to schedule on")
    return tool


@_table("ftnpy_py_sched")
def _schedule(b: _Binding, deferred: int, ms: int, data: Any, cb: Any, out: Any) -> None:
    _need(cb, "sched_*(): callback")
    tool = _tool_of(b)
    sid = next(_sched_ids)
    rec = _Scheduled(tool)

    def fire() -> None:
        _sched.pop(sid, None)
        rec.handle = None  # the record is held by this timer only: drop the cycle
        _run_c(None, lib.ftnpy_call_sched, cb, data)

    rec.handle = tool.deferred(ms, fire) if deferred else tool.immediate(fire)
    _sched[sid] = rec
    # data1: non-NULL, so code that tests a handle for emptiness sees a live one. data2 is
    # NULL: it is no C++ IAsyncTool (the reference's Handle::cancel() would call through it);
    # test and cancel through the table (sched_is_valid / sched_cancel).
    out.data1 = ffi.cast("void *", rec.marker)
    out.data2 = NULL
    out.data3 = sid


def _scheduled(handle: Any) -> _Scheduled | None:
    rec = _sched.get(int(handle.data3))
    if rec is None or handle.data1 != ffi.cast("void *", rec.marker):
        return None
    return rec


@_table("ftnpy_py_sched_cancel")
def _sched_cancel(b: _Binding, handle: Any) -> None:
    _need(handle, "sched_cancel(): handle")
    rec = _scheduled(handle)
    if rec is not None:
        _sched.pop(int(handle.data3), None)
        rec.tool.cancel(rec.handle)
        rec.handle = None


@_table("ftnpy_py_sched_is_valid", 0)
def _sched_is_valid(b: _Binding, handle: Any) -> int:
    _need(handle, "sched_is_valid(): handle")
    rec = _scheduled(handle)
    return int(rec is not None and rec.tool.is_valid(rec.handle))


@_table("ftnpy_py_is_same_thread", 0)
def _is_same_thread(b: _Binding) -> int:
    return int(_tool_of(b).is_same_thread())


@_def_extern
def ftnpy_py_misuse(func: Any, what: Any) -> None:
    _record(_Misuse(f"{ffi.string(func).decode()}(): {ffi.string(what).decode()}"))


@_def_extern
def ftnpy_py_release(v: Any) -> None:
    release(v)


# -- foreign FutoInAsyncSteps ------------------------------------------------------------------


class _Keep(list[Any]):
    """Handles given to one foreign root's C side; kept as long as any wrapper of it lives."""

    __slots__ = ()


class _Rec:
    __slots__ = ("a", "b", "keep")

    def __init__(self, keep: _Keep, a: Any, b: Any = None) -> None:
        self.keep = keep
        self.a = a
        self.b = b


def _handle(keep: _Keep, a: Any, b: Any = None) -> Any:
    h = ffi.new_handle(_Rec(keep, a, b))
    keep.append(h)
    return h


class _Thrown(Exception):
    """Already reported to the foreign table (error/break/continue): just unwind the callback."""


def _check(rc: int, what: str) -> None:
    if rc < 0:
        raise FutoInError(Errors.InternalError, f"{what}: NULL function in the foreign table")


_FOREIGN_STATE = b"futoin_anyio.state"
_states: dict[int, State] = {}


@final
class ForeignAsyncSteps:
    """:meth:`AsyncSteps.wrap` of a ``FutoInAsyncSteps *`` implemented elsewhere.

    Every call goes through the pointer's function table; Python steps and handlers added to it
    are called back from C. ``error()``, ``break_loop()`` and ``continue_loop()`` call the table
    and then raise, as in Python, to leave the callback. Keep the wrapper of a root alive until
    its execution is over: the C side only holds raw pointers to the Python callbacks.
    """

    __slots__ = ("_keep", "_ptr")

    def __init__(self, ptr: Any, keep: _Keep) -> None:
        self._ptr = ptr
        self._keep = keep

    def binary(self) -> Any:
        """The wrapped ``FutoInAsyncSteps *``."""
        return self._ptr

    def wrap(self, ptr: Any) -> Any:
        """An AsyncSteps interface over another ``FutoInAsyncSteps *`` (as ``AsyncSteps.wrap``)."""
        return wrap(ptr)

    # common API
    def add(self, func: Callable[..., Any], onerror: Callable[..., Any] | None = None) -> Any:
        """Add a Python step (``func(asi, *args)``) and error handler through the table's
        ``add``. Coroutine functions cannot run on a foreign AsyncSteps."""
        if not callable(func):
            raise TypeError(f"add(): step must be callable, got {type(func).__name__}")
        if inspect.iscoroutinefunction(func):
            raise TypeError("add(): coroutine steps cannot run on a foreign AsyncSteps")
        h = _handle(self._keep, func, onerror)
        _check(
            lib.ftnpy_f_add(
                self._ptr,
                h,
                lib.ftnpy_py_exec_cb,
                lib.ftnpy_py_error_cb if onerror is not None else NULL,
            ),
            "add()",
        )
        return self

    def parallel(self, onerror: Callable[..., Any] | None = None) -> ForeignAsyncSteps:
        """Add a parallel step; the returned wrapper takes its branches with :meth:`add`."""
        h = _handle(self._keep, None, onerror)
        out = ffi.new("FutoInAsyncSteps **")
        _check(
            lib.ftnpy_f_parallel(
                self._ptr, h, lib.ftnpy_py_error_cb if onerror is not None else NULL, out
            ),
            "parallel()",
        )
        if out[0] == NULL:
            raise FutoInError(Errors.InternalError, "parallel(): the foreign table returned NULL")
        return ForeignAsyncSteps(out[0], self._keep)

    def sync(
        self, obj: Any, func: Callable[..., Any], onerror: Callable[..., Any] | None = None
    ) -> Any:
        """Add ``func`` as a step run inside ``obj``'s critical section (``addSync``): ``obj``
        is a ``FutoInSync *``, an object with ``.binary()`` or a Python ISync."""
        if isinstance(obj, ffi.CData):
            sync_ptr = ffi.cast("FutoInSync *", obj)
        elif hasattr(obj, "binary"):
            sync_ptr = obj.binary()
        else:
            sync_ptr = sync_binary_of(obj)
        h = _handle(self._keep, func, onerror)
        self._keep.append(sync_ptr)
        _check(
            lib.ftnpy_f_add_sync(
                self._ptr,
                sync_ptr,
                h,
                lib.ftnpy_py_exec_cb,
                lib.ftnpy_py_error_cb if onerror is not None else NULL,
            ),
            "sync()",
        )
        return self

    def success_step(self, *args: Any) -> Any:
        """Add a step that succeeds with ``args``."""
        return self.add(lambda asi, *_: asi.success(*args))

    @property
    def state(self) -> State:
        """A Python :class:`State` shared by the foreign root (kept as a C state variable)."""
        out = ffi.new("void **")
        _check(
            lib.ftnpy_f_state_variable(
                self._ptr,
                NULL,
                _FOREIGN_STATE,
                lib.ftnpy_py_alloc_cb,
                lib.ftnpy_py_state_cleanup_cb,
                out,
            ),
            "stateVariable()",
        )
        st = _states.get(_addr(out[0]))
        if st is None:
            raise FutoInError(Errors.InternalError, "stateVariable() did not keep our state")
        info = self.state_variable("error_info")
        if info != NULL:
            st["error_info"] = ffi.string(ffi.cast("char *", info)).decode("utf-8", "replace")
        return st

    def state_variable(self, name: str) -> Any:
        """The raw ``stateVariable(name)`` lookup (no allocation): a ``void *``, maybe NULL."""
        out = ffi.new("void **")
        _check(
            lib.ftnpy_f_state_variable(self._ptr, NULL, name.encode("utf-8"), NULL, NULL, out),
            "stateVariable()",
        )
        return out[0]

    def new_instance(self) -> ForeignAsyncSteps:
        """A new root of the same implementation (``newInstance``); release it with :meth:`free`."""
        out = ffi.new("FutoInAsyncSteps **")
        _check(lib.ftnpy_f_new_instance(self._ptr, out), "newInstance()")
        if out[0] == NULL:
            raise FutoInError(Errors.InternalError, "newInstance() returned NULL")
        return ForeignAsyncSteps(out[0], _Keep())

    def free(self) -> None:
        """Release an instance made by :meth:`new_instance` (the table's ``free``)."""
        _check(lib.ftnpy_f_free(self._ptr), "free()")

    def __bool__(self) -> bool:
        """The table's ``isValid``."""
        out = ffi.new("int *")
        _check(lib.ftnpy_f_is_valid(self._ptr, out), "isValid()")
        return bool(out[0])

    def root_id(self) -> int:
        """The table's ``rootId``: the same number for all steps of one sequential flow."""
        out = ffi.new("ptrdiff_t *")
        _check(lib.ftnpy_f_root_id(self._ptr, out), "rootId()")
        return int(out[0])

    # execution API
    def success(self, *args: Any) -> None:
        """Complete the step with ``args`` (at most four, moved to the implementation)."""
        cargs = emit_args(args, True, [])  # never NULL: no values is an empty FutoInArgs
        _check(lib.ftnpy_f_success(self._ptr, cargs), "success()")

    def error(self, code: str, info: Any = None) -> None:
        """Fail the step through ``handle_error(code, info)``, then raise to leave the callback."""
        cinfo = NULL if info is None else str(info).encode("utf-8")
        _check(lib.ftnpy_f_handle_error(self._ptr, code.encode("utf-8"), cinfo), "handle_error()")
        raise _Reported(code, info)

    def set_timeout(self, timeout_ms: float) -> None:
        """The table's ``setTimeout`` (milliseconds)."""
        _check(lib.ftnpy_f_set_timeout(self._ptr, int(timeout_ms)), "setTimeout()")

    def set_cancel(self, oncancel: Callable[[Any], Any]) -> None:
        """Wait for an external event; ``oncancel(asi)`` runs if the step is cancelled."""
        h = _handle(self._keep, oncancel)
        _check(lib.ftnpy_f_set_cancel(self._ptr, h, lib.ftnpy_py_cancel_cb), "setCancel()")

    def wait_external(self) -> None:
        """Wait for an external ``success()``/``error()`` (``waitExternal``)."""
        _check(lib.ftnpy_f_wait_external(self._ptr), "waitExternal()")

    def stack(
        self,
        size_or_factory: int | Callable[[], Any],
        cleanup: Callable[[Any], object] | None = None,
    ) -> Any:
        """``int``: C memory of that size (a ``void *``); a factory: its result, kept with a
        one-byte C allocation whose cleanup calls ``cleanup(obj)``."""
        out = ffi.new("void **")
        if isinstance(size_or_factory, int):
            # the clean-up pointer is always callable: the reference calls it unchecked
            _check(
                lib.ftnpy_f_stack(self._ptr, size_or_factory, lib.ftnpy_py_stack_cleanup_cb, out),
                "stack()",
            )
            obj = out[0]
        else:
            obj = size_or_factory()
            _check(lib.ftnpy_f_stack(self._ptr, 1, lib.ftnpy_py_stack_cleanup_cb, out), "stack()")
        if out[0] == NULL:
            raise FutoInError(Errors.InternalError, "stack() returned NULL")
        _stacks[_addr(out[0])] = (obj, cleanup)
        return obj

    # loops
    def loop(self, func: Callable[..., Any], label: str | None = None) -> Any:
        """Add a loop running ``func(asi)`` until it breaks (``loop``)."""
        h = _handle(self._keep, func)
        _check(lib.ftnpy_f_loop(self._ptr, h, lib.ftnpy_py_loop_cb, _label(label)), "loop()")
        return self

    def repeat(self, count: int, func: Callable[..., Any], label: str | None = None) -> Any:
        """Add a loop running ``func(asi, i)`` for ``i`` in ``range(count)`` (``repeat``)."""
        h = _handle(self._keep, func)
        _check(
            lib.ftnpy_f_repeat(self._ptr, h, count, lib.ftnpy_py_repeat_cb, _label(label)),
            "repeat()",
        )
        return self

    def for_each(
        self,
        collection: Mapping[Any, Any] | Iterable[Any],
        func: Callable[..., Any],
        label: str | None = None,
    ) -> Any:
        """Add a loop over a snapshot of ``collection``: ``func(asi, key, value)`` for a
        mapping, ``func(asi, index, item)`` otherwise (built on ``repeat``)."""
        items = list(
            collection.items() if isinstance(collection, Mapping) else enumerate(collection)
        )
        return self.repeat(len(items), lambda asi, i: func(asi, *items[i]), label)

    def break_loop(self, label: str | None = None) -> None:
        """Break the (labelled) loop through ``breakLoop``, then raise to leave the callback."""
        _check(lib.ftnpy_f_break_loop(self._ptr, _label(label)), "breakLoop()")
        raise _Thrown("breakLoop")

    def continue_loop(self, label: str | None = None) -> None:
        """Continue the (labelled) loop through ``continueLoop``, then raise to leave."""
        _check(lib.ftnpy_f_continue_loop(self._ptr, _label(label)), "continueLoop()")
        raise _Thrown("continueLoop")

    # control API
    def execute(self, unhandled_error: Callable[[str], object] | None = None) -> None:
        """Start this root; ``unhandled_error(code)`` gets an error no handler took."""
        h = _handle(self._keep, unhandled_error)
        _run_c(
            None,
            lib.ftnpy_f_execute,
            self._ptr,
            h,
            lib.ftnpy_py_unhandled_cb if unhandled_error is not None else NULL,
        )

    def cancel(self) -> None:
        """Cancel this root (``cancel``)."""
        _check(lib.ftnpy_f_cancel(self._ptr), "cancel()")

    # AsyncTool part of the table
    @property
    def tool(self) -> Any:
        """The table's scheduler, shaped like an AsyncTool: ``immediate(func)``,
        ``deferred(ms, func)``, ``cancel(handle)``, ``is_valid(handle)``,
        ``is_same_thread()``; handles are ``FutoInHandle *``."""
        return _ForeignTool(self)

    # spec aliases
    successStep = success_step
    setTimeout = set_timeout
    setCancel = set_cancel
    waitExternal = wait_external
    breakLoop = break_loop
    continueLoop = continue_loop
    newInstance = new_instance
    forEach = for_each
    loopForEach = for_each
    rootId = root_id

    def __repr__(self) -> str:
        return f"<ForeignAsyncSteps {self._ptr}>"


class _Reported(FutoInError):
    """``error()`` on a foreign AsyncSteps: already passed to ``handle_error``."""


def _label(label: str | None) -> Any:
    return NULL if label is None else label.encode("utf-8")


_stacks: dict[int, tuple[Any, Callable[[Any], object] | None]] = {}


@final
class _ForeignTool:
    """``sched_*`` / ``is_same_thread`` of a foreign table, shaped like an AsyncTool."""

    __slots__ = ("_asi",)

    def __init__(self, asi: ForeignAsyncSteps) -> None:
        self._asi = asi

    def immediate(self, func: Callable[[], object]) -> Any:
        out = ffi.new("FutoInHandle *")
        h = _handle(self._asi._keep, func)
        _check(
            lib.ftnpy_f_sched_immediate(self._asi._ptr, h, lib.ftnpy_py_sched_cb, out),
            "sched_immediate()",
        )
        return out

    def deferred(self, delay_ms: float, func: Callable[[], object]) -> Any:
        out = ffi.new("FutoInHandle *")
        h = _handle(self._asi._keep, func)
        _check(
            lib.ftnpy_f_sched_deferred(
                self._asi._ptr, int(delay_ms), h, lib.ftnpy_py_sched_cb, out
            ),
            "sched_deferred()",
        )
        return out

    def cancel(self, handle: Any) -> None:
        _check(lib.ftnpy_f_sched_cancel(self._asi._ptr, handle), "sched_cancel()")

    def is_valid(self, handle: Any) -> bool:
        out = ffi.new("int *")
        _check(lib.ftnpy_f_sched_is_valid(self._asi._ptr, handle, out), "sched_is_valid()")
        return bool(out[0])

    def is_same_thread(self) -> bool:
        out = ffi.new("int *")
        _check(lib.ftnpy_f_is_same_thread(self._asi._ptr, out), "is_same_thread()")
        return bool(out[0])


def _report(w: ForeignAsyncSteps, exc: BaseException) -> None:
    """An exception escaped a Python callback called by foreign C: turn it into handle_error."""
    if isinstance(exc, (_Thrown, _Reported)):
        return
    if isinstance(exc, FutoInError):
        code, info = exc.code, exc.info
    else:
        code, info = Errors.InternalError, f"{type(exc).__name__}: {exc}"
    cinfo = NULL if info is None else str(info).encode("utf-8", "replace")
    rc = lib.ftnpy_f_handle_error(w._ptr, code.encode("utf-8"), cinfo)
    if rc < 0 or not isinstance(exc, Exception):
        _record(exc)


def _callback(bsi: Any, data: Any, call: Callable[[ForeignAsyncSteps, _Rec], None]) -> None:
    rec: _Rec = ffi.from_handle(data)
    w = ForeignAsyncSteps(bsi, rec.keep)
    try:
        call(w, rec)
    except BaseException as exc:
        _report(w, exc)


@_def_extern
def ftnpy_py_exec_cb(bsi: Any, data: Any, cargs: Any) -> None:
    def call(w: ForeignAsyncSteps, rec: _Rec) -> None:
        # We own the values (the reference hands them over and never cleans them up).
        args = () if cargs == NULL else receive_args(cargs, True)
        rec.a(w, *fit_args(rec.a, args))

    _callback(bsi, data, call)


@_def_extern
def ftnpy_py_error_cb(bsi: Any, data: Any, code: Any) -> None:
    def call(w: ForeignAsyncSteps, rec: _Rec) -> None:
        rec.b(w, _decode(code, "error code"))

    _callback(bsi, data, call)


@_def_extern
def ftnpy_py_unhandled_cb(bsi: Any, data: Any, code: Any) -> None:
    rec: _Rec = ffi.from_handle(data)
    try:
        rec.a(_decode(code, "error code"))
    except BaseException as exc:
        _record(exc)


@_def_extern
def ftnpy_py_cancel_cb(bsi: Any, data: Any) -> None:
    _callback(bsi, data, lambda w, rec: rec.a(w))


@_def_extern
def ftnpy_py_loop_cb(bsi: Any, data: Any) -> None:
    _callback(bsi, data, lambda w, rec: rec.a(w))


@_def_extern
def ftnpy_py_repeat_cb(bsi: Any, data: Any, i: int) -> None:
    _callback(bsi, data, lambda w, rec: rec.a(w, i))


@_def_extern
def ftnpy_py_sched_cb(data: Any) -> None:
    rec: _Rec = ffi.from_handle(data)
    try:
        rec.a()
    except BaseException as exc:
        _record(exc)


@_def_extern
def ftnpy_py_alloc_cb(data: Any) -> Any:
    st = State()
    h = ffi.new_handle(st)
    _states[_addr(h)] = st
    _state_handles[_addr(h)] = h
    return h


_state_handles: dict[int, Any] = {}


@_def_extern
def ftnpy_py_state_cleanup_cb(data: Any, value: Any) -> None:
    _states.pop(_addr(value), None)
    _state_handles.pop(_addr(value), None)


@_def_extern
def ftnpy_py_stack_cleanup_cb(value: Any) -> None:
    obj, cleanup = _stacks.pop(_addr(value), (None, None))
    if cleanup is not None:
        try:
            cleanup(obj)
        except BaseException as exc:
            _record(exc)


# -- FutoInSync ---------------------------------------------------------------------------------


class _SyncBinding:
    """Our ``FutoInSync`` over a Python ISync object."""

    __slots__ = ("__weakref__", "_ref", "handle", "held", "mem", "ptr")

    def __init__(self, obj: Any) -> None:
        self._ref = weakref.ref(obj)
        self.handle = ffi.new_handle(self)
        self.mem = ffi.new("FtnPySync *")
        self.ptr = lib.ftnpy_sync_init(self.mem, self.handle)
        # rootId -> holders of the critical section (see _lock)
        self.held: dict[int, list[Any]] = {}

    @property
    def obj(self) -> Any:
        obj = self._ref()
        if obj is None:
            raise _Misuse("the ISync object behind this FutoInSync pointer is gone")
        return obj


_sync_bindings: weakref.WeakKeyDictionary[Any, _SyncBinding] = weakref.WeakKeyDictionary()


def sync_binary_of(obj: Any) -> Any:
    """A stable ``FutoInSync *`` for any Python ISync object (``Mutex.binary()`` etc.).

    ``lock`` holds the object's critical section from a helper root (``obj.sync()`` of a new
    instance) until ``unlock``; the lock step waits for it. One consequence: re-entering a Mutex
    through ``lock`` from the flow that holds it through Python is not recognised as re-entry.
    """
    sb = _sync_bindings.get(obj)
    if sb is None:
        sb = _sync_bindings[obj] = _SyncBinding(obj)
    return sb.ptr


def wrap_sync(ptr: Any) -> Any:
    """An ISync for ``asi.sync()`` over a ``FutoInSync *``: ours gives the Python object back."""
    if not isinstance(ptr, ffi.CData):
        raise TypeError(f"wrap_sync() needs a FutoInSync * cdata, got {type(ptr).__name__}")
    ptr = ffi.cast("FutoInSync *", ptr)
    if ptr == NULL:
        raise ValueError("NULL FutoInSync pointer")
    h = lib.ftnpy_sync_handle(ptr)
    if h != NULL:
        sb: _SyncBinding = ffi.from_handle(h)
        return sb.obj
    if ptr.api == NULL:
        raise ValueError("FutoInSync pointer with a NULL api table")
    return ForeignSync(ptr)


class _Held:
    __slots__ = ("bsi", "locked", "sync")

    def __init__(self, sync: Any, bsi: Any) -> None:
        self.sync = sync
        self.bsi = bsi
        self.locked = False

    def release(self) -> None:
        if self.locked:
            self.locked = False
            _run_c(None, lib.ftnpy_f_unlock, self.sync, self.bsi)


@final
class ForeignSync:
    """A foreign ``FutoInSync *`` as a Python ISync: ``lock`` in a step, ``unlock`` at its end."""

    __slots__ = ("_ptr",)

    def __init__(self, ptr: Any) -> None:
        self._ptr = ptr

    def binary(self) -> Any:
        return self._ptr

    def sync(
        self, asi: Any, func: Callable[..., Any], onerror: Callable[..., Any] | None = None
    ) -> Any:
        sync = self._ptr

        def outer(asi: Any, *args: Any) -> None:
            held = _Held(sync, binary_of(asi))
            asi.stack(lambda: held, _Held.release)

            def lock(asi: Any, *_: Any) -> None:
                rc = _run_c(asi, lib.ftnpy_f_lock, sync, binary_of(asi))
                if rc < 0:
                    raise FutoInError(Errors.InternalError, "FutoInSync: NULL lock function")

            def locked(asi: Any, *_: Any) -> None:
                held.locked = True
                asi.success(*args)

            asi.add(lock)
            asi.add(locked)
            asi.add(func, onerror)

        return asi.add(outer)


def _sync_trampoline(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(func: Callable[..., Any]) -> Callable[..., Any]:
        def trampoline(h: Any, bsi: Any) -> None:
            calls = _tls.calls
            if calls and calls[-1].exc is not None:
                return
            try:
                func(ffi.from_handle(h), bsi)
            except BaseException as exc:
                _record(exc)

        ffi.def_extern(name=name, onerror=_on_trampoline_error)(trampoline)
        return func

    return deco


@_sync_trampoline("ftnpy_py_lock")
def _lock(sb: _SyncBinding, bsi: Any) -> None:
    _need(bsi, "lock(): bsi")
    asi = wrap(bsi)
    obj = sb.obj
    rid = asi.root_id() if isinstance(asi, ForeignAsyncSteps) else _flow_id(asi)
    holder = asi.new_instance() if not isinstance(asi, ForeignAsyncSteps) else None
    if holder is None:
        raise _Misuse("lock(): Python ISync objects are lockable from our AsyncSteps only")
    state = {"acquired": False}

    def hold(hasi: Any, *_: Any) -> None:
        state["acquired"] = True
        sb.held.setdefault(rid, []).append(hasi)
        hasi.wait_external()
        asi.success()

    def enter(hasi: Any) -> None:
        obj.sync(hasi, hold)

    def failed(code: str) -> None:
        if not state["acquired"] and asi:
            with contextlib.suppress(FutoInError):
                asi.error(code)

    holder.add(enter)
    asi.set_cancel(lambda _asi: holder.cancel())
    holder.execute(failed)


@_sync_trampoline("ftnpy_py_unlock")
def _unlock(sb: _SyncBinding, bsi: Any) -> None:
    _need(bsi, "unlock(): bsi")
    asi = wrap(bsi)
    rid = asi.root_id() if isinstance(asi, ForeignAsyncSteps) else _flow_id(asi)
    holders = sb.held.get(rid)
    if not holders:
        raise _Misuse("unlock() without a matching lock()")
    hasi = holders.pop(0)
    if not holders:
        del sb.held[rid]
    hasi.success()

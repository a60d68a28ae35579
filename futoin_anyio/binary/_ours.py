"""Our AsyncSteps seen from C: the ``FutoInAsyncSteps`` of a Python step and its 25 functions.

Each table function of ``ffi/ftnpy.c`` checks its pointer and calls the trampoline of the same
name here (``@_table``), which runs the call on the Python step behind the pointer.
"""

from __future__ import annotations

import itertools
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, final

from .._frame import CORO, EXEC, HANDLER
from .._hooks import flow_key
from . import _bridge, _sync
from ._ffi import ffi, lib
from ._trampolines import (
    NULL,
    _addr,
    _decode,
    _def_extern,
    _Misuse,
    _need,
    _on_trampoline_error,
    _opt_label,
    _record,
    _run_c,
    _tls,
)
from ._values import FromC, emit_args, receive_args, release


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
            _run_c(asi, lib.ftnpy_call_exec, self.f, _bridge.binary_of(asi), self.data, cargs)
        finally:
            lib.ftnpy_reset_args(cargs)


class _CErrorHandler:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any, code: str) -> None:
        ccode = ffi.new("char[]", code.encode("utf-8"))
        _run_c(asi, lib.ftnpy_call_error, self.f, _bridge.binary_of(asi), self.data, ccode)


class _CCancel:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any) -> None:
        _run_c(asi, lib.ftnpy_call_cancel, self.f, _bridge.binary_of(asi), self.data)


class _CLoopBody:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any, *_: Any) -> None:
        _run_c(asi, lib.ftnpy_call_loop, self.f, _bridge.binary_of(asi), self.data)


class _CRepeatBody:
    __slots__ = ("data", "f")

    def __init__(self, f: Any, data: Any) -> None:
        self.f = f
        self.data = data

    def __call__(self, asi: Any, i: int, *_: Any) -> None:
        _run_c(asi, lib.ftnpy_call_repeat, self.f, _bridge.binary_of(asi), self.data, i)


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
    return st is EXEC or st is HANDLER or st is CORO


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
    obj = _sync.wrap_sync(sync)
    b.target.sync(obj, _CStep(f, data), _error_handler(eh, data))


def _root_of(b: _Binding) -> Any:
    target = b.target
    if b.kind == _Binding.PARALLEL:
        target = target._owner
    return target


def _flow_id(asi: Any) -> int:
    """rootId: one per sequential flow, so each parallel branch has its own (spec 1.11.4)."""
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

    __slots__ = ("__weakref__", "handle", "tool")

    def __init__(self, tool: Any) -> None:
        self.tool = tool
        self.handle: Any = None


_sched: weakref.WeakValueDictionary[int, _Scheduled] = weakref.WeakValueDictionary()
_sched_ids = itertools.count(1)
# data1 and data2 of our handles: a static C object laid out as a C++ IAsyncTool (ffi/table.py,
# IASYNCTOOL_VTABLE), so the reference's IAsyncTool::Handle can cancel and test them.
_HTOOL = lib.ftnpy_htool_ptr()


def _tool_of(b: _Binding) -> Any:
    root = _root_of(b)
    flow = root._flow
    tool = flow.driver if flow is not None else root._tool
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
    # data1 (the C++ Handle's internal_): non-NULL, so code that tests a handle for emptiness
    # sees a live one. data2 (its async_tool_): what Handle::cancel() and operator bool call
    # through. data3: the timer's id, never reused.
    out.data1 = _HTOOL
    out.data2 = _HTOOL
    out.data3 = sid


def _scheduled(handle: Any) -> _Scheduled | None:
    # data1 is NULL once a C++ Handle cancelled (and reset) it; data2 tells our handles apart
    if handle.data1 == NULL or handle.data2 != _HTOOL:
        return None
    return _sched.get(int(handle.data3))


def _cancel_timer(handle: Any) -> None:
    rec = _scheduled(handle)
    if rec is not None:
        _sched.pop(int(handle.data3), None)
        rec.tool.cancel(rec.handle)
        rec.handle = None


def _timer_valid(handle: Any) -> int:
    rec = _scheduled(handle)
    return int(rec is not None and rec.tool.is_valid(rec.handle))


@_table("ftnpy_py_sched_cancel")
def _sched_cancel(b: _Binding, handle: Any) -> None:
    _need(handle, "sched_cancel(): handle")
    _cancel_timer(handle)


@_table("ftnpy_py_sched_is_valid", 0)
def _sched_is_valid(b: _Binding, handle: Any) -> int:
    _need(handle, "sched_is_valid(): handle")
    return _timer_valid(handle)


# The IAsyncTool slots behind data2 (ftnpy_htool_cancel / ftnpy_htool_is_valid in ffi/ftnpy.c):
# no FutoInAsyncSteps pointer comes with them (the step that scheduled may be gone), and they
# act even after the current C callback failed: a cancel C++ asked for is never dropped, so the
# callback cannot fire on data C++ freed after cancelling.
@_def_extern
def ftnpy_py_htool_cancel(handle: Any) -> None:
    _cancel_timer(handle)


@_def_extern
def ftnpy_py_htool_is_valid(handle: Any) -> int:
    return _timer_valid(handle)


@_table("ftnpy_py_is_same_thread", 0)
def _is_same_thread(b: _Binding) -> int:
    return int(_tool_of(b).is_same_thread())


@_def_extern
def ftnpy_py_misuse(func: Any, what: Any) -> None:
    _record(_Misuse(f"{ffi.string(func).decode()}(): {ffi.string(what).decode()}"))


@_def_extern
def ftnpy_py_release(v: Any) -> None:
    release(v)



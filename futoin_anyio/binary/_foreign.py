"""A foreign ``FutoInAsyncSteps *`` seen from Python: :class:`ForeignAsyncSteps`.

Every call goes through the pointer's function table (the generated ``ftnpy_f_*`` of
``ffi/table.py``); Python callbacks given to it are called back through the ``ftnpy_py_*_cb``
trampolines here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from .._errors import Errors, FutoInError
from .._state import State
from . import _bridge, _sync
from ._ffi import ffi, lib
from ._trampolines import NULL, _addr, _decode, _def_extern, _record, _run_c
from ._values import emit_args, fit_args, receive_args


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
        return _bridge.wrap(ptr)

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
            sync_ptr = _sync.sync_binary_of(obj)
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



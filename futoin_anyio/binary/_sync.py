"""Sync objects both ways: our ``FutoInSync`` over a Python ISync, and :class:`ForeignSync`."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any, final

from .._errors import Errors, FutoInError
from . import _bridge, _foreign
from ._ffi import ffi, lib
from ._ours import _flow_id
from ._trampolines import NULL, _Misuse, _need, _on_trampoline_error, _record, _run_c, _tls


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
            held = _Held(sync, _bridge.binary_of(asi))
            asi.stack(lambda: held, _Held.release)

            def lock(asi: Any, *_: Any) -> None:
                rc = _run_c(asi, lib.ftnpy_f_lock, sync, _bridge.binary_of(asi))
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
    asi = _bridge.wrap(bsi)
    obj = sb.obj
    rid = asi.root_id() if isinstance(asi, _foreign.ForeignAsyncSteps) else _flow_id(asi)
    holder = asi.new_instance() if not isinstance(asi, _foreign.ForeignAsyncSteps) else None
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
    asi = _bridge.wrap(bsi)
    rid = asi.root_id() if isinstance(asi, _foreign.ForeignAsyncSteps) else _flow_id(asi)
    holders = sb.held.get(rid)
    if not holders:
        raise _Misuse("unlock() without a matching lock()")
    hasi = holders.pop(0)
    if not holders:
        del sb.held[rid]
    hasi.success()

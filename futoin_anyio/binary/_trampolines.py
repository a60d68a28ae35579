"""Errors never cross into C: recording what a trampoline caught, raising it in Python.

Every ``extern "Python"`` trampoline catches everything; what it caught is *recorded* on the
innermost C call that Python is making on this thread (a :class:`_Call`), and raised again in
Python once that C function has returned. This is how a C step that calls ``handle_error()``
(or ``breakLoop()``, or misuses a pointer) and then returns fails exactly like a Python step
whose ``error()`` raised. After something was recorded, further table calls in the same C
callback are ignored: C code must return after ``handle_error()``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .._errors import Errors, FutoInError
from ._ffi import ffi

_log = logging.getLogger("futoin_anyio")
NULL = ffi.NULL


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


def _addr(ptr: Any) -> int:
    return int(ffi.cast("uintptr_t", ptr))

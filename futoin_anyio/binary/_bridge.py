"""The C <-> Python bridge: the two dispatchers, and the names the package exports.

``binary_of(asi)`` gives the ``FutoInAsyncSteps *`` of any AsyncSteps; ``wrap(ptr)`` the
Python interface of any pointer. The sections live in their own modules: ``_trampolines``
(errors recorded under a trampoline), ``_ours`` (our AsyncSteps seen from C), ``_foreign`` (a
foreign pointer seen from Python), ``_sync`` (sync objects both ways).
"""

from __future__ import annotations

from typing import Any

from ._ffi import ffi, lib
from ._foreign import ForeignAsyncSteps, _Keep
from ._ours import StateVariable, _Binding, _binding, _ParallelView, c_error_handler, c_step
from ._sync import ForeignSync, sync_binary_of, wrap_sync
from ._trampolines import NULL

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


def binary_of(asi: Any) -> Any:
    """The stable ``FutoInAsyncSteps *`` of a step object (``AsyncSteps.binary()``)."""
    if isinstance(asi, ForeignAsyncSteps):
        return asi.binary()
    return _binding(asi).ptr


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

"""The engine calls that the sync primitives and the binary bridge make, and the binary plug.

They only read or set a step object's frame parts (``_frame``), or check a ``sync()``'s
arguments: the primitives (``_mutex``, ``_throttle``, ``_limiter``, ``redis``) and ``binary/``
import this module, not the engine's.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._errors import Errors, FutoInError
from ._frame import SUBSTEPS, WAIT, _own_ext
from ._types import _Item

if TYPE_CHECKING:
    from ._steps import AsyncSteps

__all__ = ("check_section", "flow_key", "go_on_with", "on_exit", "register_binary", "root_id")


def root_id(asi: AsyncSteps) -> int:
    """A number identifying the root of ``asi`` (the same for all its steps)."""
    flow = asi._flow
    return id(flow.root if flow is not None else asi)


def check_section(what: str, func: object, onerror: object) -> None:
    """``sync()`` arguments are checked as ``add()`` checks its own: misuse is InternalError."""
    if not callable(func):
        raise FutoInError(Errors.InternalError,
                          f"{what}.sync(): the step must be callable, got {type(func).__name__}")
    if onerror is not None and not callable(onerror):
        raise FutoInError(Errors.InternalError,
                          f"{what}.sync(): onerror must be callable, got {type(onerror).__name__}")


def flow_key(asi: AsyncSteps) -> object:
    """The identity of the sequential flow ``asi`` belongs to: a root, or one parallel branch."""
    flow = asi._flow
    return flow if flow is not None else asi


def on_exit(asi: AsyncSteps, hook: Callable[[Any], object], arg: Any) -> None:
    """Call ``hook(arg)`` once when the step ``asi`` leaves its flow's stack, however it ends:
    success, error or cancellation (one hook per step; it must not raise)."""
    ext = _own_ext(asi)
    ext.on_exit = hook
    ext.exit_arg = arg


def refuse(asi: AsyncSteps, error: BaseException) -> None:
    """End the running step ``asi`` with ``error`` when it returns, as if it had raised it:
    its flow unwinds it the same way, with no traceback made (a refusal's error has none of
    the engine's frames). Only from the step's own function, which returns at once."""
    flow = asi._flow
    assert flow is not None
    flow.handed = error
    flow.interrupt = True


def go_on_with(asi: AsyncSteps, item: _Item, args: tuple[Any, ...]) -> bool:
    """Let a step parked in ``wait_external()`` go on with ``item`` as its one sub-step, called
    with ``args``: the step stays on the stack until that sub-step ends (a primitive's entry
    that waited for its turn). Same thread only. ``False`` (and nothing done) if the step no
    longer waits: an error or a cancellation is about to unwind it."""
    if asi._status is not WAIT:
        return False
    flow = asi._flow
    assert flow is not None and not asi._queue
    asi._queue = [item]
    asi._status = SUBSTEPS
    flow.args = args
    driver = flow.driver
    driver._schedule(flow)
    return True


# -- the binary interface (futoin_anyio.binary, §2.7) plugs in here --------------------------------

_binary_adapter: Any = None


def register_binary(adapter: Any) -> None:
    """Install the binary interface: ``binary_of(asi)``, ``wrap(ptr)``, ``wrap_sync(ptr)``.

    ``futoin_anyio.binary`` registers itself when imported; the engine knows nothing else of C.
    """
    global _binary_adapter
    _binary_adapter = adapter


def _binary() -> Any:
    if _binary_adapter is None:
        import_module("futoin_anyio.binary")  # registers itself (or says what is missing)
    return _binary_adapter

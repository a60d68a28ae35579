"""FTN12 universal binary interface (section 2.7) through cffi.

The C header with the spec's declarations ships in this package::

    cc -I"$(python -c 'import futoin_anyio.binary as b; print(b.get_include())')" ...

and ``#include "futoin.h"`` gives ``FutoInAsyncSteps``, ``FutoInArgs``,
``FutoInBinaryValue``, ``FutoInSync`` and friends, from C11 or C++11.

``asi.binary()`` gives C a ``FutoInAsyncSteps *`` for a step; ``AsyncSteps.wrap(ptr)``
gives Python an AsyncSteps interface over any such pointer (ours or a foreign one);
:func:`c_step` turns a C execute callback into a Python step. The conventions (ownership,
lifetimes, what cannot be checked) are in the documentation's "The binary interface" page.
"""

from __future__ import annotations

import importlib.util
import os

try:
    from ._bridge import ForeignAsyncSteps as ForeignAsyncSteps
    from ._bridge import ForeignSync as ForeignSync
    from ._bridge import StateVariable as StateVariable
    from ._bridge import c_error_handler as c_error_handler
    from ._bridge import c_step as c_step
    from ._bridge import sync_binary_of as sync_binary_of
    from ._bridge import wrap_sync as wrap_sync
    from ._values import MAX_ARGS as MAX_ARGS
    from ._values import BinaryFloat as BinaryFloat
    from ._values import BinaryInt as BinaryInt
    from ._values import BinaryStr as BinaryStr
    from ._values import ForeignObject as ForeignObject
    from ._values import Typed as Typed
except ImportError as exc:  # pragma: no cover - only without the compiled extension
    if exc.name != "futoin_anyio.binary._ffi":
        raise
    raise ImportError(
        "futoin_anyio.binary needs its compiled cffi extension (futoin_anyio.binary._ffi): "
        "install futoin_anyio with a C compiler available (pip install .), or run "
        "`python ffi/build.py` in a source checkout"
    ) from exc

from .. import _hooks
from . import _bridge

_hooks.register_binary(_bridge)

__all__ = (
    "MAX_ARGS",
    "BinaryFloat",
    "BinaryInt",
    "BinaryStr",
    "ForeignAsyncSteps",
    "ForeignObject",
    "ForeignSync",
    "StateVariable",
    "Typed",
    "c_error_handler",
    "c_step",
    "get_include",
    "require_build_tools",
    "sync_binary_of",
    "wrap_sync",
)


def get_include() -> str:
    """Return the folder holding ``futoin.h``, for a compiler's ``-I`` option.

    Like :func:`numpy.get_include`, it points inside the installed package.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def require_build_tools() -> None:
    """Check that C steps can be compiled at run time (with cffi's ``ffi.compile()``).

    That needs setuptools, which virtual environments of Python 3.12 and later no longer
    have: it comes with the ``c`` extra (``pip install 'futoin_anyio[c]'``). A C compiler is
    needed too.

    :raises RuntimeError: setuptools is missing; the message names the extra.
    """
    try:
        found = importlib.util.find_spec("setuptools") is not None
    except (ImportError, ValueError):  # blocked, or a broken entry in sys.modules
        found = False
    if not found:
        raise RuntimeError(
            "compiling C steps at run time (cffi's ffi.compile()) needs setuptools, which this "
            "Python environment lacks: pip install 'futoin_anyio[c]'"
        )


def _fixup_module_metadata() -> None:
    """Show public objects under their public path (clean reprs, tracebacks and docs)."""
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith(__name__ + "._"):
            obj.__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata

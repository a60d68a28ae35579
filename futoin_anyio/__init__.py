"""FutoIn AsyncSteps (FTN12 v1.14) native to AnyIO and Trio structured concurrency."""

from contextlib import suppress as _suppress

from ._driver import Handle as Handle
from ._errors import Errors as Errors
from ._errors import FutoInError as FutoInError

# ``COMPILED``: True when the engine runs compiled (Cython extension modules built at install),
# False in the pure-Python build (docs/internals.rst). A flag, not an API: not in __all__.
from ._frame import COMPILED as COMPILED
from ._instrument import Instrument as Instrument
from ._instrument import add_instrument as add_instrument
from ._instrument import remove_instrument as remove_instrument
from ._limiter import Limiter as Limiter
from ._limiter import LimiterStatistics as LimiterStatistics
from ._mutex import Mutex as Mutex
from ._mutex import MutexStatistics as MutexStatistics
from ._parallel import ParallelSteps as ParallelSteps
from ._results import promise_as as promise_as
from ._state import State as State
from ._steps import AsyncSteps as AsyncSteps
from ._throttle import Throttle as Throttle
from ._throttle import ThrottleStatistics as ThrottleStatistics
from ._tool import AsyncTool as AsyncTool
from ._tool import AsyncToolStatistics as AsyncToolStatistics
from ._types import ISync as ISync

__all__ = (
    "AsyncSteps",
    "AsyncTool",
    "AsyncToolStatistics",
    "Errors",
    "FutoInError",
    "Handle",
    "ISync",
    "Instrument",
    "Limiter",
    "LimiterStatistics",
    "Mutex",
    "MutexStatistics",
    "ParallelSteps",
    "State",
    "Throttle",
    "ThrottleStatistics",
    "add_instrument",
    "promise_as",
    "remove_instrument",
)

#: The one version source: pyproject.toml reads it (``[tool.setuptools.dynamic]``).
__version__ = "0.1.0"


def _fixup_module_metadata() -> None:
    """Show public objects under their public path (clean reprs, tracebacks and docs)."""
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith("futoin_anyio._"):
            # An extension type of the compiled build (AsyncSteps) is immutable: it keeps its own.
            with _suppress(TypeError):
                obj.__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata

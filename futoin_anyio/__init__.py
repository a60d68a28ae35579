"""FutoIn AsyncSteps (FTN12 v1.14) native to AnyIO and Trio structured concurrency."""

from ._engine import AsyncSteps as AsyncSteps
from ._engine import ISync as ISync
from ._engine import ParallelSteps as ParallelSteps
from ._errors import Errors as Errors
from ._errors import FutoInError as FutoInError
from ._state import State as State
from ._tool import AsyncTool as AsyncTool
from ._tool import AsyncToolStatistics as AsyncToolStatistics
from ._tool import Handle as Handle

__all__ = (
    "AsyncSteps",
    "AsyncTool",
    "AsyncToolStatistics",
    "Errors",
    "FutoInError",
    "Handle",
    "ISync",
    "ParallelSteps",
    "State",
)

__version__ = "0.1.0"

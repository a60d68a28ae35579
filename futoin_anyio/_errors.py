"""FutoIn errors: the exception raised by ``asi.error()`` and the standard codes."""

from __future__ import annotations

from typing import Any, Final, final

__all__ = ("Errors", "FutoInError")


class FutoInError(Exception):
    """A FutoIn error: ``code`` is the error code string, ``info`` the optional ``error_info``.

    ``asi.error(code, info)`` raises it; an unhandled error makes ``await asi.promise()`` raise it.
    ``str(e)`` starts with the code.
    """

    __slots__ = ("code", "info")

    code: str
    info: Any

    def __init__(self, code: str, info: Any = None) -> None:
        self.args = (code, info)  # what BaseException.__init__ sets, without a super() call
        self.code = code
        self.info = info

    def __str__(self) -> str:
        if self.info is None:
            return self.code
        return f"{self.code}: {self.info}"

    def __repr__(self) -> str:
        return f"FutoInError({self.code!r}, {self.info!r})"

    def __reduce__(self) -> tuple[type[FutoInError], tuple[str, Any]]:
        return (type(self), (self.code, self.info))


@final
class Errors:
    """The standard FutoIn error codes (FTN3 and FTN12), each as a plain ``str``."""

    ConnectError: Final = "ConnectError"
    CommError: Final = "CommError"
    UnknownInterface: Final = "UnknownInterface"
    NotSupportedVersion: Final = "NotSupportedVersion"
    NotImplemented: Final = "NotImplemented"
    Unauthorized: Final = "Unauthorized"
    InternalError: Final = "InternalError"
    InvokerError: Final = "InvokerError"
    InvalidRequest: Final = "InvalidRequest"
    DefenseRejected: Final = "DefenseRejected"
    PleaseReauth: Final = "PleaseReauth"
    SecurityError: Final = "SecurityError"
    Timeout: Final = "Timeout"
    LoopBreak: Final = "LoopBreak"
    LoopCont: Final = "LoopCont"
    #: This library's code for a root stopped by ``asi.cancel()``.
    Cancelled: Final = "Cancelled"

    def __init__(self) -> None:  # pragma: no cover - namespace only
        raise TypeError("Errors is a namespace of error codes, not a class to instantiate")

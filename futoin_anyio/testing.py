"""Helpers to test AsyncSteps code with pytest, on asyncio and on trio.

The main one is :func:`as_test`: it turns a step into an async test function
that AnyIO's pytest plugin runs once per backend, like the JS reference's
``$as_test`` aid::

    from futoin_anyio.testing import as_test, expect_error

    @as_test
    def test_greeting(asi):
        def check(asi, text):
            assert text == "hello"

        asi.add(lambda asi: asi.success("hello"))
        asi.add(check)

    @as_test(onerror=expect_error("DefenseRejected"))
    def test_full_queue_rejects(asi):
        ...

:class:`Trace` records what a flow does (steps, error handlers, cancel
handlers) so a test can assert the exact order, and :func:`backend` builds
``anyio_backend`` fixture values, with trio's autojump clock for tests that
wait on time.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeAlias, overload

import anyio

from . import AsyncSteps, AsyncTool
from ._types import CancelHandler, ErrorHandler, StepFunc

#: A test function of :func:`as_test`: a step, or a method taking ``(self, asi, ...)``.
_TestStep: TypeAlias = Callable[..., object]

__all__ = ("BACKENDS", "Trace", "as_test", "backend", "expect_error")

#: What :func:`as_test` returns: an async test function for pytest.
AsyncTestFunc: TypeAlias = Callable[..., Coroutine[Any, Any, None]]

#: The backends every test should run on, in the order of the fixture params.
BACKENDS: Final = ("asyncio", "trio")

#: Default limit, in seconds, for one :func:`as_test` flow.
DEFAULT_TIMEOUT: Final = 10.0


def backend(name: str, *, autojump_clock: bool = False) -> str | tuple[str, dict[str, Any]]:
    """Build the value of an ``anyio_backend`` fixture.

    :param name: ``"asyncio"`` or ``"trio"``.
    :param autojump_clock: under trio, run with a fresh
        ``trio.testing.MockClock(autojump_threshold=0)``: time jumps to the
        next deadline whenever every task is blocked, so timeouts and
        throttling periods are exact and take no real time.  asyncio has no
        such clock and runs in real time.
    :returns: a value anyio's pytest plugin accepts.

    Use it in a test module (or ``conftest.py``)::

        @pytest.fixture(params=BACKENDS)
        def anyio_backend(request):
            return backend(request.param, autojump_clock=True)
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}, expected one of {BACKENDS}")
    if name == "trio" and autojump_clock:
        import trio.testing

        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    return name


def expect_error(code: str, info: object = ...) -> ErrorHandler:
    """Make an error handler for a negative test: accept exactly ``code``.

    The handler recovers (``asi.success()``) when the error code is ``code``
    and, if ``info`` is given, ``asi.state.error_info == info``.  Any other
    error is passed on, so the test fails with it.

    :param code: the expected error code, e.g. ``Errors.DefenseRejected``.
    :param info: the expected ``error_info``; not checked when omitted.
    """

    def onerror(asi: AsyncSteps, error: str) -> None:
        if error == code and (info is ... or asi.state.error_info == info):
            asi.success()

    onerror.__qualname__ = onerror.__name__ = f"expect_error({code!r})"
    return onerror


@overload
def as_test(func: _TestStep, /) -> AsyncTestFunc: ...


@overload
def as_test(
    *, onerror: ErrorHandler | None = None, timeout: float | None = DEFAULT_TIMEOUT
) -> Callable[[_TestStep], AsyncTestFunc]: ...


def as_test(
    func: _TestStep | None = None,
    /,
    *,
    onerror: ErrorHandler | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> AsyncTestFunc | Callable[[_TestStep], AsyncTestFunc]:
    """Turn a step into a pytest test that runs it as an AsyncSteps flow.

    The decorated function is a step: ``def test_x(asi, ...)`` (or ``async
    def``).  The test builds a root with that one step, runs it with
    ``await asi.promise()`` inside an :class:`~futoin_anyio.AsyncTool` (so
    ``asi.new_instance().execute()`` works too) and fails if the flow ends
    with an unhandled error.  When the error came from a Python exception (a
    failed ``assert``), that exception is raised, so pytest shows it as
    usual.  The test carries the ``anyio`` mark, so it runs on every backend
    of the ``anyio_backend`` fixture.

    Parameters after ``asi`` are pytest fixtures.  In a test class, write
    ``def test_x(self, asi, ...)``.

    :param onerror: makes a negative test: the step's flow must fail, and
        ``onerror(asi, code)`` is its error handler; it must call
        ``asi.success()`` to accept the error (see :func:`expect_error`).  A
        flow that does not fail fails the test.
    :param timeout: limit in seconds for the whole flow (``None``: no limit);
        the flow is cancelled and :exc:`TimeoutError` raised when it expires.
    """

    def decorate(step: _TestStep) -> AsyncTestFunc:
        signature = inspect.signature(step)
        params = list(signature.parameters.values())
        method = bool(params) and params[0].name == "self"
        skip = 2 if method else 1
        if len(params) < skip:
            raise TypeError(f"{step.__qualname__} must take the AsyncSteps as a parameter")
        fixtures = params[: skip - 1] + params[skip:]

        @functools.wraps(step)
        async def test(*args: Any, **kwargs: Any) -> None:
            # pytest passes fixtures by keyword; ``args`` is ``(self,)`` in a class.
            bound = functools.partial(step, *args, **kwargs) if args or kwargs else step
            await _run(bound, onerror, timeout, step.__qualname__)

        test.__signature__ = signature.replace(parameters=fixtures)  # type: ignore[attr-defined]

        return _mark_anyio(test)

    if func is not None:
        return decorate(func)
    return decorate


def _mark_anyio(test: AsyncTestFunc) -> AsyncTestFunc:
    try:
        import pytest
    except ImportError:  # pragma: no cover - only useful under pytest anyway
        return test
    marked: AsyncTestFunc = pytest.mark.anyio(test)
    return marked


async def _run(
    step: StepFunc, onerror: ErrorHandler | None, limit: float | None, name: str
) -> None:
    failures: list[str] = []

    def record_error(asi: AsyncSteps, code: str) -> None:
        failures.append(code)
        assert onerror is not None
        onerror(asi, code)

    from . import FutoInError

    try:
        with anyio.fail_after(limit):
            async with AsyncTool() as tool:
                asi = AsyncSteps(tool=tool)
                asi.add(step, record_error if onerror is not None else None)
                try:
                    await asi.promise()
                except FutoInError as e:
                    cause = e.__cause__
                    if isinstance(cause, Exception) and not isinstance(cause, FutoInError):
                        # A failed assert or another Python error: show it as is.
                        raise cause from e
                    raise
    except TimeoutError as e:
        if e.args:
            raise
        raise TimeoutError(
            f"the flow of {getattr(step, '__qualname__', step)!r} did not finish within "
            f"{limit} s: a step waits for an external event that never came?"
        ) from None
    if onerror is not None and not failures:
        raise AssertionError(f"{name}: the flow was expected to fail, but it succeeded")


class Trace:
    """An ordered record of what a flow did, for exact assertions.

    Each factory method returns a callback that appends one event string to
    :attr:`events` when called::

        trace = Trace()
        asi.add(trace.step("outer"), trace.onerror("outer onerror"))
        ...
        assert trace.events == ["outer", "outer onerror: Timeout"]
    """

    __slots__ = ("events",)

    def __init__(self) -> None:
        #: The events, in the order they happened.
        self.events: list[str] = []

    def __call__(self, event: str) -> None:
        """Record ``event``."""
        self.events.append(event)

    def step(self, name: str, *results: Any) -> StepFunc:
        """A step recording ``name`` (and its arguments, if it gets any).

        :param results: if given, the step calls ``asi.success(*results)``;
            otherwise it succeeds implicitly with no arguments.
        """

        def step(asi: AsyncSteps, *args: Any) -> None:
            self.events.append(_with_args(name, args))
            if results:
                asi.success(*results)

        return step

    def fail(self, name: str, code: str, info: object = None) -> StepFunc:
        """A step recording ``name``, then failing with ``asi.error(code, info)``."""

        def step(asi: AsyncSteps, *args: Any) -> None:
            self.events.append(_with_args(name, args))
            asi.error(code, info)

        return step

    def wait(self, name: str) -> StepFunc:
        """A step recording ``name`` and waiting until cancelled or timed out.

        It installs a cancel handler that records ``"<name> cancel"``.
        """

        def step(asi: AsyncSteps, *args: Any) -> None:
            self.events.append(_with_args(name, args))
            asi.set_cancel(self.oncancel(f"{name} cancel"))

        return step

    def onerror(
        self, name: str, *, recover: bool = False, result: tuple[Any, ...] = ()
    ) -> ErrorHandler:
        """An error handler recording ``"<name>: <code>"``.

        :param recover: call ``asi.success(*result)``; otherwise the handler
            returns and the error goes on to the outer handler.
        """

        def onerror(asi: AsyncSteps, code: str) -> None:
            self.events.append(f"{name}: {code}")
            if recover:
                asi.success(*result)

        return onerror

    def oncancel(self, name: str) -> CancelHandler:
        """A cancel handler (for ``asi.set_cancel()``) recording ``name``."""

        def oncancel(asi: AsyncSteps) -> None:
            self.events.append(name)

        return oncancel

    def __repr__(self) -> str:
        return f"Trace({self.events!r})"


def _with_args(name: str, args: tuple[Any, ...]) -> str:
    if not args:
        return name
    return f"{name}{args!r}" if len(args) > 1 else f"{name}({args[0]!r})"

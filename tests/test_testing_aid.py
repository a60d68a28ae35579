"""futoin_anyio.testing, and the orderings documented in docs/structured.rst.

The second half (``TestDocumentedOrderings``) is the check the
structured-concurrency page promises: each diagram there is one test here, and
the expected event lists are also what the JS reference prints for the same
flows.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from futoin_anyio import AsyncSteps, Errors, FutoInError
from futoin_anyio.testing import BACKENDS, Trace, as_test, backend, expect_error

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


# -- as_test: tests that pass ----------------------------------------------------------------


@as_test
def test_plain_step_runs(asi: AsyncSteps) -> None:
    def check(asi: AsyncSteps, a: int, b: int) -> None:
        assert (a, b) == (1, 2)
        asi.state.checked = True

    def verify(asi: AsyncSteps) -> None:
        assert asi.state.checked

    asi.add(lambda asi: asi.success(1, 2))
    asi.add(check)
    asi.add(verify)


@as_test
async def test_coroutine_step_runs(asi: AsyncSteps) -> None:
    start = anyio.current_time()
    await anyio.sleep(0.01)
    assert anyio.current_time() - start >= 0.009  # virtual time on trio


@as_test
def test_fixtures_are_passed(asi: AsyncSteps, tmp_path: Any, anyio_backend_name: str) -> None:
    assert tmp_path.exists()
    assert anyio_backend_name in BACKENDS


@as_test(onerror=expect_error(Errors.Timeout))
def test_negative_timeout(asi: AsyncSteps) -> None:
    asi.set_timeout(1000)  # nobody completes it; virtual time under trio


@as_test(onerror=expect_error("MyError", "details"))
def test_negative_with_info(asi: AsyncSteps) -> None:
    asi.error("MyError", "details")


class TestInClass:
    @as_test
    def test_method(self, asi: AsyncSteps) -> None:
        assert isinstance(self, TestInClass)

    @as_test
    async def test_async_method(self, asi: AsyncSteps, anyio_backend_name: str) -> None:
        await anyio.lowlevel.checkpoint()
        assert anyio_backend_name in BACKENDS


#: A test module of decorated tests, each saying where it ran: run by a pytest of its own below.
_DECORATED = """
import anyio
import anyio.lowlevel
import pytest

from futoin_anyio.testing import BACKENDS, as_test, backend

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request):
    return backend(request.param, autojump_clock=True)


@as_test
def test_plain(asi, anyio_backend_name):
    asi.add(lambda asi: print("ran plain on", anyio_backend_name))


@as_test
async def test_coroutine(asi, anyio_backend_name):
    await anyio.sleep(0.01)
    print("ran coroutine on", anyio_backend_name)


class TestInClass:
    @as_test
    def test_method(self, asi, anyio_backend_name):
        print("ran method on", anyio_backend_name)

    @as_test
    async def test_async_method(self, asi, anyio_backend_name):
        await anyio.lowlevel.checkpoint()
        print("ran async method on", anyio_backend_name)
"""


def test_the_decorated_tests_run_on_both_backends(pytester: pytest.Pytester) -> None:
    # A pytest of its own, rather than what the tests above left behind: under pytest-xdist
    # those may run in another worker, or after this one.
    pytester.makepyfile(test_decorated=_DECORATED)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=4 * len(BACKENDS))
    out = result.stdout.str()
    for kind in ("plain", "coroutine", "method", "async method"):
        for name in BACKENDS:
            assert out.count(f"ran {kind} on {name}\n") == 1, (kind, name, out)


def test_as_test_builds_the_pytest_signature() -> None:
    import inspect

    assert list(inspect.signature(test_fixtures_are_passed).parameters) == [
        "tmp_path",
        "anyio_backend_name",
    ]
    assert list(inspect.signature(TestInClass.test_method).parameters) == ["self"]
    assert any(m.name == "anyio" for m in getattr(test_plain_step_runs, "pytestmark", ()))


def test_as_test_needs_the_asi_parameter() -> None:
    with pytest.raises(TypeError, match="AsyncSteps"):
        as_test(lambda: None)


# -- as_test: tests that must fail ---------------------------------------------------------


async def test_failed_assert_is_raised_as_is() -> None:
    def step(asi: AsyncSteps) -> None:
        value = len(asi.state)
        assert value < 0, "boom"

    with pytest.raises(AssertionError, match="boom"):
        await as_test(step)()


async def test_unhandled_futoin_error_fails() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.error(Errors.CommError, "down")

    with pytest.raises(FutoInError) as info:
        await as_test(step)()
    assert info.value.code == Errors.CommError


async def test_negative_test_fails_when_the_flow_succeeds() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.success()

    with pytest.raises(AssertionError, match="expected to fail"):
        await as_test(onerror=expect_error(Errors.Timeout))(step)()


async def test_expect_error_passes_other_codes_on() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.error(Errors.CommError)

    with pytest.raises(FutoInError) as info:
        await as_test(onerror=expect_error(Errors.Timeout))(step)()
    assert info.value.code == Errors.CommError


async def test_expect_error_checks_info() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.error("MyError", "other")

    with pytest.raises(FutoInError):
        await as_test(onerror=expect_error("MyError", "details"))(step)()


async def test_timeout_cancels_a_hung_flow() -> None:
    trace = Trace()
    with pytest.raises(TimeoutError):
        await as_test(timeout=0.2)(trace.wait("hung"))()
    assert trace.events == ["hung", "hung cancel"]


# -- backend() and Trace ---------------------------------------------------------------------


def test_backend_values() -> None:
    import trio.testing

    assert backend("asyncio") == "asyncio"
    assert backend("asyncio", autojump_clock=True) == "asyncio"
    assert backend("trio") == "trio"
    value = backend("trio", autojump_clock=True)
    other = backend("trio", autojump_clock=True)
    assert isinstance(value, tuple)
    assert isinstance(other, tuple)
    assert value[0] == "trio"
    assert isinstance(value[1]["clock"], trio.testing.MockClock)
    assert value[1]["clock"] is not other[1]["clock"]
    with pytest.raises(ValueError, match="curio"):
        backend("curio")


async def test_trace_records_steps_errors_and_results() -> None:
    trace = Trace()
    asi = AsyncSteps()
    asi.add(trace.step("first", 1, 2))
    asi.add(trace.step("second"))
    asi.add(trace.fail("third", "Oops"), trace.onerror("third onerror", recover=True, result=(7,)))
    asi.add(trace.step("fourth"))
    asi.add(trace.fail("fifth", "Bad"), trace.onerror("fifth onerror"))
    with pytest.raises(FutoInError):
        await asi.promise()
    trace("done")
    assert trace.events == [
        "first",
        "second(1, 2)",
        "third",
        "third onerror: Oops",
        "fourth(7)",
        "fifth",
        "fifth onerror: Bad",
        "done",
    ]
    assert repr(trace).startswith("Trace([")


# -- the orderings of docs/structured.rst ----------------------------------------------------


def running_example(trace: Trace, *, timeout_ms: int | None = None) -> AsyncSteps:
    """``A`` (cancel handler, error handler) with a waiting sub-step ``B``."""

    def a(asi: AsyncSteps) -> None:
        if timeout_ms is not None:
            asi.set_timeout(timeout_ms)
        asi.set_cancel(trace.oncancel("A_cancel"))
        asi.add(trace.wait("B"), trace.onerror("B_onerror"))

    return AsyncSteps().add(a, trace.onerror("A_onerror"))


def parallel_example(trace: Trace, fail_y: bool) -> AsyncSteps:
    def a(asi: AsyncSteps) -> None:
        asi.set_cancel(trace.oncancel("A_cancel"))
        p = asi.parallel(trace.onerror("P_onerror"))
        p.add(trace.wait("X"))

        def y(asi: AsyncSteps) -> None:
            trace("Y")
            asi.set_cancel(trace.oncancel("Y_cancel"))
            if fail_y:

                def fail() -> None:
                    with contextlib.suppress(FutoInError):
                        asi.error(Errors.CommError)

                tool = asi.tool
                assert tool is not None
                tool.deferred(10, fail)

        p.add(y, trace.onerror("Y_onerror"))

    return AsyncSteps().add(a, trace.onerror("A_onerror"))


class TestDocumentedOrderings:
    async def test_cancel_scope_around_the_flow(self) -> None:
        trace = Trace()
        with anyio.move_on_after(1) as scope:
            await running_example(trace).promise()
        assert scope.cancelled_caught
        assert trace.events == ["B", "B cancel", "A_cancel"]

    async def test_root_cancel(self) -> None:
        trace = Trace()
        asi = running_example(trace)

        async def cancel_later() -> None:
            await anyio.sleep(0.1)
            asi.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_later)
            with pytest.raises(FutoInError) as info:
                await asi.promise()
        assert info.value.code == "Cancelled"
        assert trace.events == ["B", "B cancel", "A_cancel"]

    async def test_timeout(self) -> None:
        trace = Trace()
        with pytest.raises(FutoInError) as info:
            await running_example(trace, timeout_ms=100).promise()
        assert info.value.code == Errors.Timeout
        assert trace.events == [
            "B",
            "B cancel",
            "B_onerror: Timeout",
            "A_cancel",
            "A_onerror: Timeout",
        ]

    async def test_timeout_recovered_inside(self) -> None:
        trace = Trace()

        def a(asi: AsyncSteps) -> None:
            asi.set_timeout(100)
            asi.set_cancel(trace.oncancel("A_cancel"))
            asi.add(trace.wait("B"), trace.onerror("B_onerror", recover=True, result=("r",)))
            asi.add(trace.step("after B"))

        asi = AsyncSteps().add(a, trace.onerror("A_onerror")).add(trace.step("next"))
        await asi.promise()
        assert trace.events == ["B", "B cancel", "B_onerror: Timeout", "after B('r')", "next"]

    async def test_failing_parallel_branch(self) -> None:
        trace = Trace()
        with pytest.raises(FutoInError) as info:
            await parallel_example(trace, fail_y=True).promise()
        assert info.value.code == Errors.CommError
        assert trace.events == [
            "X",
            "Y",
            "Y_cancel",
            "Y_onerror: CommError",
            "X cancel",
            "P_onerror: CommError",
            "A_cancel",
            "A_onerror: CommError",
        ]

    async def test_outer_cancel_during_parallel(self) -> None:
        trace = Trace()
        with anyio.move_on_after(1) as scope:
            await parallel_example(trace, fail_y=False).promise()
        assert scope.cancelled_caught
        assert trace.events == ["X", "Y", "X cancel", "Y_cancel", "A_cancel"]

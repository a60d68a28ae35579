"""``AsyncSteps.wrap()`` of a foreign ``FutoInAsyncSteps *``: tests/native/foreign.c.

The executor there is plain C against the shipped header; nothing in it knows Python.
It runs synchronously inside ``execute()``, so these tests need no event loop.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from futoin_anyio.binary._ffi import ffi

from futoin_anyio import FutoInError
from futoin_anyio.binary import _bridge, _foreign, _values
from futoin_anyio.binary._values import (
    FTN_TYPE_ARRAY,
    FTN_TYPE_BOOL,
    FTN_TYPE_DOUBLE,
    FTN_TYPE_FLOAT,
    FTN_TYPE_INT8,
    FTN_TYPE_INT16,
    FTN_TYPE_INT32,
    FTN_TYPE_INT64,
    FTN_TYPE_STRING,
    FTN_TYPE_STRING16,
    FTN_TYPE_STRING32,
    FTN_TYPE_UINT8,
    FTN_TYPE_UINT16,
    FTN_TYPE_UINT32,
    FTN_TYPE_UINT64,
    Typed,
)

sys.path.insert(0, str(Path(__file__).parent / "native"))
import ftn_native

pytestmark = pytest.mark.skipif(not ftn_native.have_compiler(), reason="needs a C compiler")


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return ftn_native.build(
        "_ftn_test_foreign", "foreign.c", ftn_native.FOREIGN_CDEF, tmp_path_factory.mktemp("f")
    )


@pytest.fixture
def flib(native: ModuleType) -> Iterator[Any]:
    native.lib.f_reset_stats()
    yield native.lib
    gc.collect()
    assert not _values._moved, "a value moved to C was never cleaned up"


@pytest.fixture
def root(flib: Any) -> Iterator[Any]:
    ptr = flib.f_new_root()
    yield _bridge.wrap(ptr)
    flib.f_free_root(ptr)


def run(root: Any) -> list[str]:
    unhandled: list[str] = []
    root.execute(unhandled.append)
    return unhandled


def test_wrap_gives_a_foreign_interface(root: Any) -> None:
    assert isinstance(root, _bridge.ForeignAsyncSteps)
    assert root.binary() is not None
    assert bool(root)


def test_steps_and_args_cross_through_c(root: Any, flib: Any) -> None:
    moved_before = len(_values._moved)
    seen: list[tuple[Any, ...]] = []
    root.add(lambda asi: asi.success(1, "two", 3.5, [1, 2]))
    def reply(asi: Any, *args: Any) -> None:
        seen.append(args)
        asi.success(b"\x00\xff", True)

    root.add(reply)
    root.add(lambda asi, *args: seen.append(args))
    assert run(root) == []
    assert seen == [(1, "two", 3.5, [1, 2]), (b"\x00\xff", True)]
    assert flib.f_get_stats().steps_run == 3
    # values handed to an execute callback are the callee's: we consumed all 6 (each cleaned
    # up once through its type's cleanup), the executor's reset afterwards finds empty slots
    assert flib.f_get_stats().values_reset == 0
    assert moved_before == len(_values._moved)


EVERY_TYPE = [
    (Typed(FTN_TYPE_BOOL, True), True),
    (Typed(FTN_TYPE_INT8, -128), -128),
    (Typed(FTN_TYPE_INT16, -32768), -32768),
    (Typed(FTN_TYPE_INT32, -(2**31)), -(2**31)),
    (Typed(FTN_TYPE_INT64, -(2**63)), -(2**63)),
    (Typed(FTN_TYPE_UINT8, 255), 255),
    (Typed(FTN_TYPE_UINT16, 65535), 65535),
    (Typed(FTN_TYPE_UINT32, 2**32 - 1), 2**32 - 1),
    (Typed(FTN_TYPE_UINT64, 2**64 - 1), 2**64 - 1),
    (Typed(FTN_TYPE_FLOAT, 1.5), 1.5),
    (Typed(FTN_TYPE_DOUBLE, 1e300), 1e300),
    (Typed(FTN_TYPE_STRING, "héllo €"), "héllo €"),
    (Typed(FTN_TYPE_STRING16, "h€llo 𝄞"), "h€llo 𝄞"),
    (Typed(FTN_TYPE_STRING32, "h€llo 𝄞"), "h€llo 𝄞"),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_BOOL, [True, False]), [True, False]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_INT8, [-1, 2]), [-1, 2]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_INT16, [-1, 2]), [-1, 2]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_INT32, [-1, 2]), [-1, 2]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_INT64, [-1, 2]), [-1, 2]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_UINT8, b"\x01\x02"), b"\x01\x02"),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_UINT16, [1, 65535]), [1, 65535]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_UINT32, [1, 2**32 - 1]), [1, 2**32 - 1]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_UINT64, [1, 2**64 - 1]), [1, 2**64 - 1]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_FLOAT, [0.5, -2.0]), [0.5, -2.0]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_DOUBLE, [0.1, 1e-300]), [0.1, 1e-300]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_DOUBLE, []), []),
    (object, object),  # FTN_TYPE_CUSTOM_OBJECT: the very same Python object comes back
]


@pytest.mark.parametrize(("sent", "expected"), EVERY_TYPE, ids=lambda v: repr(v)[:30])
def test_value_round_trip_every_type(root: Any, sent: Any, expected: Any) -> None:
    got: list[Any] = []
    root.add(lambda asi: asi.success(sent))
    root.add(lambda asi, value: got.append(value))
    assert run(root) == []
    assert got == [expected]
    assert isinstance(got[0], type(expected))
    if type(sent) is Typed and not sent.flags & FTN_TYPE_ARRAY:
        assert getattr(got[0], "flags", sent.flags) == sent.flags  # the binary type is kept
    if expected is object:
        assert got[0] is object


def test_error_reaches_python_handler_with_info(root: Any) -> None:
    trace: list[Any] = []

    def failing(asi: Any) -> None:
        asi.error("MyError", "some info")
        trace.append("not reached")

    def onerror(asi: Any, code: str) -> None:
        trace.append((code, asi.state.error_info))
        asi.success("recovered")

    root.add(failing, onerror)
    root.add(lambda asi, value: trace.append(value))
    assert run(root) == []
    assert trace == [("MyError", "some info"), "recovered"]


def test_python_exception_becomes_internal_error(root: Any, flib: Any) -> None:
    root.add(lambda asi: 1 / 0)
    assert run(root) == ["InternalError"]
    assert ffi.string(flib.f_error_info(ffi.cast("void *", root.binary()))).startswith(
        b"ZeroDivisionError"
    )


def test_loops_break_continue_and_labels(root: Any) -> None:
    trace: list[Any] = []

    def body(asi: Any, i: int) -> None:
        if i == 1:
            asi.continue_loop()
        if i == 3:
            asi.break_loop()
        trace.append(i)

    root.add(lambda asi: asi.repeat(10, body))

    def outer(asi: Any) -> None:
        def inner(asi: Any) -> None:
            trace.append("inner")
            asi.break_loop("OUTER")

        asi.loop(inner)

    root.add(lambda asi: asi.loop(outer, "OUTER"))
    root.add(lambda asi: asi.for_each({"a": 1}, lambda asi, k, v: trace.append((k, v))))
    assert run(root) == []
    assert trace == [0, 2, "inner", ("a", 1)]


def test_parallel_substeps_state_and_root_id(root: Any) -> None:
    trace: list[Any] = []
    ids: set[int] = set()

    def start(asi: Any) -> None:
        asi.state["shared"] = []
        ids.add(asi.root_id())
        par = asi.parallel()
        def first(a: Any) -> None:
            a.state["shared"].append(1)
            ids.add(a.root_id())

        par.add(first)
        par.add(lambda a: a.state["shared"].append(2))

    root.add(start)
    root.add(lambda asi: trace.append(sorted(asi.state["shared"])))
    assert run(root) == []
    assert trace == [[1, 2]]
    assert len(ids) == 1


def test_state_is_released_with_the_root(flib: Any) -> None:
    ptr = flib.f_new_root()
    root = _bridge.wrap(ptr)
    root.add(lambda asi: asi.state.update(x=1))
    before = len(_foreign._states)
    assert run(root) == []
    assert len(_foreign._states) == before + 1
    flib.f_free_root(ptr)
    assert len(_foreign._states) == before
    assert flib.f_get_stats().freed == 1


def test_stack_cleanup_runs_once_at_step_end(root: Any) -> None:
    cleaned: list[Any] = []

    def step(asi: Any) -> None:
        mem = asi.stack(16, cleaned.append)
        assert mem != ffi.NULL
        obj = asi.stack(lambda: ["obj"], cleaned.append)
        assert obj == ["obj"]
        cleaned.append("step end")

    root.add(step)
    assert run(root) == []
    assert cleaned[0] == "step end"
    # the executor runs stack cleanups in reverse order, each exactly once
    assert len(cleaned) == 3
    assert cleaned[1] == ["obj"]
    assert isinstance(cleaned[2], ffi.CData)


def test_sched_through_the_table(root: Any) -> None:
    trace: list[str] = []

    def step(asi: Any) -> None:
        tool = asi.tool
        assert tool.is_same_thread()
        h = tool.immediate(lambda: trace.append("immediate"))
        d = tool.deferred(5, lambda: trace.append("deferred"))
        assert tool.is_valid(h) and tool.is_valid(d)
        tool.cancel(d)
        assert not tool.is_valid(d)

    root.add(step)
    assert run(root) == []
    assert trace == ["immediate"]


def test_set_timeout_cancel_and_wait_external_reach_the_table(root: Any, flib: Any) -> None:
    cancelled: list[str] = []

    def step(asi: Any) -> None:
        asi.set_timeout(100)
        asi.set_cancel(lambda a: cancelled.append("cancel"))
        asi.wait_external()  # this executor cannot wait: the step fails, cancel runs

    root.add(step)
    assert run(root) == ["InternalError"]
    assert cancelled == ["cancel"]
    assert flib.f_timeouts_set(ffi.cast("void *", root.binary())) == 1


def test_new_instance_and_free(root: Any, flib: Any) -> None:
    other = root.new_instance()
    assert isinstance(other, _bridge.ForeignAsyncSteps)
    assert other.root_id() != root.root_id()
    got: list[int] = []
    other.add(lambda asi: got.append(1))
    assert run(other) == []
    other.free()
    assert got == [1]
    assert flib.f_get_stats().freed == 1


def test_foreign_sync_in_foreign_executor(root: Any, flib: Any) -> None:
    sync = flib.f_new_sync(1, 0)
    trace: list[Any] = []
    root.sync(sync, lambda asi: trace.append(flib.f_sync_holders(sync)))
    assert run(root) == []
    assert trace == [1]
    assert flib.f_sync_holders(sync) == 0
    stats = flib.f_get_stats()
    assert (stats.lock_calls, stats.unlock_calls) == (2, 2)  # executor + fs_lock counters
    flib.f_free_sync(sync)


def test_more_than_four_args_is_a_type_error(root: Any) -> None:
    errors: list[Any] = []

    def step(asi: Any) -> None:
        try:
            asi.success(1, 2, 3, 4, 5)
        except TypeError as exc:
            errors.append(str(exc))
            asi.success()

    root.add(step)
    assert run(root) == []
    assert "at most 4" in errors[0]


def test_bad_pointers() -> None:
    with pytest.raises(TypeError):
        _bridge.wrap(1234)
    with pytest.raises(ValueError, match="NULL"):
        _bridge.wrap(ffi.NULL)
    table = ffi.new("FutoInAsyncStepsAPI *")  # every function NULL
    obj = ffi.new("void *[1]", [table])
    w = _bridge.wrap(ffi.cast("FutoInAsyncSteps *", obj))
    with pytest.raises(FutoInError) as info:
        w.add(lambda asi: None)
    assert info.value.code == "InternalError"
    assert "NULL function" in str(info.value)
    with pytest.raises(FutoInError):
        bool(w)


def test_foreign_sync_with_null_table_in_foreign_executor(root: Any, flib: Any) -> None:
    sync = flib.f_new_sync(1, 1)
    w = _bridge.wrap_sync(sync)
    assert isinstance(w, _bridge.ForeignSync)
    flib.f_free_sync(sync)


def test_our_mutex_in_a_foreign_executor_is_refused_clearly(root: Any, flib: Any) -> None:
    """Known limit: our Python primitives wait on our event loop, so a foreign executor that
    calls their FutoInSync lock() gets a clear InternalError, and no permit is taken."""
    from futoin_anyio import Mutex

    mutex = Mutex(1)
    root.sync(mutex.binary(), lambda asi: None)
    with pytest.raises(FutoInError, match="lockable from our AsyncSteps only") as info:
        run(root)
    assert info.value.code == "InternalError"
    assert mutex.statistics().held == 0
    assert mutex.statistics().waiting == 0

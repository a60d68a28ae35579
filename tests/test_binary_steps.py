"""C steps (tests/native/csteps.c) driving our AsyncSteps through ``asi.binary()``."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest
import trio.testing
from futoin_anyio.binary._ffi import ffi, lib

from futoin_anyio import AsyncSteps, AsyncTool, FutoInError
from futoin_anyio.binary import _bridge, _ours
from futoin_anyio.binary._values import (
    _KEEP,
    FTN_TYPE_ARRAY,
    FTN_TYPE_BOOL,
    FTN_TYPE_CUSTOM_OBJECT,
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
    ForeignObject,
    Typed,
)

sys.path.insert(0, str(Path(__file__).parent / "native"))
import ftn_native

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not ftn_native.have_compiler(), reason="needs a C compiler"),
]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "trio":
        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    return "asyncio"


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return ftn_native.build(
        "_ftn_test_csteps", "csteps.c", ftn_native.CSTEPS_CDEF, tmp_path_factory.mktemp("c")
    )


@pytest.fixture
def c(native: ModuleType) -> Iterator[Any]:
    native.lib.c_reset()
    yield native


def cstep(native: ModuleType, name: str, data: Any = None) -> Any:
    return _bridge.c_step(native.ffi.addressof(native.lib, name), data)


def stats(native: ModuleType) -> Any:
    return native.lib.c_get_stats()


def log(native: ModuleType) -> list[str]:
    text: str = native.ffi.string(stats(native).log).decode()
    return text.split(";")[:-1]


async def run(*steps: Any, state: dict[str, Any] | None = None) -> Any:
    root = AsyncSteps(state)
    for step in steps:
        root.add(step)
    return await root.promise()


FROM_C = [
    (FTN_TYPE_BOOL, True),
    (FTN_TYPE_INT8, -5),
    (FTN_TYPE_INT16, -300),
    (FTN_TYPE_INT32, -70000),
    (FTN_TYPE_INT64, -5000000000),
    (FTN_TYPE_UINT8, 200),
    (FTN_TYPE_UINT16, 60000),
    (FTN_TYPE_UINT32, 4000000000),
    (FTN_TYPE_UINT64, 18000000000000000000),
    (FTN_TYPE_FLOAT, 1.5),
    (FTN_TYPE_DOUBLE, 2.25),
    (FTN_TYPE_STRING, "héllo €"),
    (FTN_TYPE_STRING16, "h€l𝄞"),
    (FTN_TYPE_STRING32, "h€l𝄞"),
    (FTN_TYPE_ARRAY | FTN_TYPE_INT32, [-1, 2, 3]),
    (FTN_TYPE_ARRAY | FTN_TYPE_UINT8, b"\x00\xff"),
    (FTN_TYPE_ARRAY | FTN_TYPE_DOUBLE, [0.5, -1.25]),
]


@pytest.mark.parametrize(("flags", "expected"), FROM_C, ids=[hex(f) for f, _ in FROM_C])
async def test_c_emits_every_type(c: ModuleType, flags: int, expected: Any) -> None:
    got: list[Any] = []
    await run(cstep(c, "c_emit", flags), lambda asi, value: got.append(value))
    assert got == [expected]
    assert isinstance(got[0], type(expected))
    # a width other than the default one is kept, so the value goes back to C unchanged
    assert getattr(got[0], "flags", flags if type(got[0]) is type(expected) else None) == flags
    assert stats(c).value_cleanups == 1  # we received it: its cleanup ran exactly once


# every width that arrives as a width class (_values._KEEP): INT64, DOUBLE and UTF-8 stay plain
KEPT = [(f, v) for f, v in FROM_C if f in _KEEP]


def test_every_width_class_is_covered() -> None:
    assert {f for f, _ in KEPT} == set(_KEEP)


@pytest.mark.parametrize(("flags", "expected"), KEPT, ids=[hex(f) for f, _ in KEPT])
async def test_width_classes_print_as_their_plain_value(
    c: ModuleType, flags: int, expected: Any
) -> None:
    # issue 28: a log line f"got {x}" shows the value; repr() keeps the width
    got: list[Any] = []
    await run(cstep(c, "c_emit", flags), lambda asi, value: got.append(value))
    (x,) = got
    plain = type(expected)(x)
    assert type(x) is _KEEP[flags] and type(plain) is type(expected)
    assert str(x) == f"{x}" == format(x) == str(plain)
    assert f"{x!s}" == str(plain) and f"got {x}" == f"got {plain}"
    specs = {int: [">12", "x", ",", "+d"], float: [".2f", ">8", "e"], str: [">12", "^9", ".2"]}
    for spec in specs[type(expected)]:
        assert format(x, spec) == format(plain, spec), spec
    assert repr(x) == f"{type(x).__name__}({plain!r})"
    assert repr(x) != repr(plain)

async def test_c_custom_object_lives_until_released(c: ModuleType) -> None:
    got: list[Any] = []
    await run(cstep(c, "c_emit", FTN_TYPE_CUSTOM_OBJECT), lambda asi, v: got.append(v))
    obj = got[0]
    assert isinstance(obj, ForeignObject)
    assert obj.owned
    assert obj.length == 7
    assert c.ffi.cast("int *", obj.p)[0] == 42
    assert stats(c).value_cleanups == 0  # still held by Python
    got.clear()
    del obj
    gc.collect()
    assert stats(c).value_cleanups == 1


TO_C = [
    (True, True),
    (-(2**63), -(2**63)),
    (2**64 - 1, 2**64 - 1),
    (0.1, 0.1),
    ("ünïcode ✓", "ünïcode ✓"),
    (b"\x00\x01", b"\x00\x01"),
    ([1, 2, 3], [1, 2, 3]),
    ([True, False], [True, False]),
    ([1, 2.5], [1.0, 2.5]),
    (Typed(FTN_TYPE_INT8, -1), -1),
    (Typed(FTN_TYPE_UINT16, 65535), 65535),
    (Typed(FTN_TYPE_FLOAT, 0.25), 0.25),
    (Typed(FTN_TYPE_STRING16, "𝄞x"), "𝄞x"),
    (Typed(FTN_TYPE_STRING32, "𝄞x"), "𝄞x"),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_INT16, [-2, 3]), [-2, 3]),
    (Typed(FTN_TYPE_ARRAY | FTN_TYPE_UINT64, [2**64 - 1]), [2**64 - 1]),
]


@pytest.mark.parametrize(("sent", "expected"), TO_C, ids=lambda v: repr(v)[:24])
async def test_python_values_round_trip_through_c(c: ModuleType, sent: Any, expected: Any) -> None:
    got: list[Any] = []
    await run(lambda asi: asi.success(sent), cstep(c, "c_echo"), lambda asi, v: got.append(v))
    assert got == [expected]
    assert isinstance(got[0], type(expected))
    if type(sent) is Typed and not sent.flags & FTN_TYPE_ARRAY:
        assert got[0].flags == sent.flags  # the type is kept: sent on, it stays the same


async def test_python_object_round_trips_as_itself(c: ModuleType) -> None:
    marker = object()
    got: list[Any] = []
    await run(
        lambda asi: asi.success(marker, None, [object()]),
        cstep(c, "c_echo"),
        lambda asi, *v: got.extend(v),
    )
    assert got[0] is marker
    assert got[1] is None
    assert isinstance(got[2], list)


async def test_c_reads_python_args(c: ModuleType) -> None:
    await run(lambda asi: asi.success(-7, "été", [1.0, 2.5], object()), cstep(c, "c_record_args"))
    assert stats(c).args_seen == 4
    assert log(c) == ["i64=-7", "str=ete", "doubles", "custom"]


async def test_more_than_four_args_to_a_c_step(c: ModuleType) -> None:
    with pytest.raises(FutoInError) as info:
        await run(lambda asi: asi.success(1, 2, 3, 4, 5), cstep(c, "c_echo"))
    assert info.value.code == "InternalError"
    assert "at most 4" in str(info.value)


BAD_VALUES = [
    (0, "unknown binary type flags 0x33", 1),
    (1, "invalid UTF-8", 1),
    (2, "invalid UTF-16", 1),
    (3, "invalid UTF-32", 1),
    (4, "follows an empty slot", 1),
    (5, "arrays of type 0x02", 1),
    (6, "NULL pointer", 1),
    (7, "unknown binary type flags 0x33", 2),
]


@pytest.mark.parametrize(("kind", "message", "cleanups"), BAD_VALUES)
async def test_bad_values_from_c(c: ModuleType, kind: int, message: str, cleanups: int) -> None:
    root = AsyncSteps()
    root.add(cstep(c, "c_emit_bad", kind))
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert info.value.code == "InternalError"
    assert "ValueError" in root.state.error_info
    assert message in root.state.error_info
    assert stats(c).value_cleanups == cleanups  # consumed even when rejected


async def test_every_table_entry_from_c(c: ModuleType) -> None:
    root = AsyncSteps()
    root.add(cstep(c, "c_full"))
    await root.promise()
    s = stats(c)
    assert log(c) == ["MyError", "my info", "got7"]
    assert s.allocs == 1  # stateVariable: allocated once per name per root
    assert s.branches == 2
    assert s.shared_counter_seen == 2
    assert s.repeat_mask == 0b101  # i=1 continued, i=3 broke out
    assert s.loop_count == 3
    assert s.valid_checks == 1
    assert s.same_thread == 1
    assert s.root_ids[0] != 0
    # one rootId per sequential flow: each parallel branch has its own (spec 1.11.4)
    assert len({s.root_ids[0], s.root_ids[1], s.root_ids[2]}) == 3
    assert s.stack_zeroed == 1
    assert s.stack_cleanups == 1
    assert s.state_cleanups == 0
    del root
    gc.collect()
    assert s.state_cleanups == 1  # released with the root's state, once


async def test_wait_external_completed_by_sched_immediate(c: ModuleType) -> None:
    assert await run(cstep(c, "c_wait")) == 99
    assert log(c) == ["deferred valid", "deferred cancelled", "immediate valid"]
    assert stats(c).sched_fired == 1
    assert stats(c).cancels == 0


async def test_timeout_runs_c_cancel_handler(c: ModuleType) -> None:
    with pytest.raises(FutoInError) as info:
        await run(cstep(c, "c_timeout", 10))
    assert info.value.code == "Timeout"
    assert stats(c).cancels == 1


async def _until(cond: Any) -> None:
    with anyio.fail_after(5):
        # the conditions are C-side counters: nothing to wait on but the loop itself
        while not cond():  # noqa: ASYNC110
            await anyio.sleep(0.001)


async def test_new_instance_execute_free_and_use_after_free(c: ModuleType) -> None:
    async with AsyncTool():
        root = AsyncSteps()
        root.add(cstep(c, "c_spawn"))
        await root.promise()
        await _until(lambda: stats(c).unhandled == 1)
        assert log(c) == ["Oops"]
        assert stats(c).root_ids[3] not in (0, _root_id(root))
        later = AsyncSteps()
        later.add(cstep(c, "c_use_freed"))
        with pytest.raises(FutoInError) as info:
            await later.promise()
    assert info.value.code == "InternalError"
    assert "used after free()" in later.state.error_info
    assert log(c) == ["Oops", "freed invalid"]


def _root_id(asi: Any) -> int:
    from futoin_anyio._hooks import root_id

    return root_id(asi)


async def test_cancel_of_a_new_instance_from_c(c: ModuleType) -> None:
    async with AsyncTool():
        await run(cstep(c, "c_spawn_waiting", 100000))
        await _until(lambda: "waiting" in log(c))
        assert stats(c).cancels == 0
        await run(cstep(c, "c_cancel_spawned"))
        await _until(lambda: stats(c).cancels == 1)
    assert stats(c).unhandled == 0  # cancel() runs cancel handlers, no error handler


BAD_CALLS = [
    (0, "add(): execute callback is NULL"),
    (1, "add(): NULL FutoInAsyncSteps pointer"),
    (2, "not valid UTF-8"),
    (3, "code is NULL"),
    (4, "not returned by newInstance()"),
    (5, "holds a Python str"),
    (6, "setCancel(): cancel callback is NULL"),
]


@pytest.mark.parametrize(("kind", "message"), BAD_CALLS)
async def test_bad_calls_from_c(c: ModuleType, kind: int, message: str) -> None:
    root = AsyncSteps({"py": "a Python value"})
    root.add(cstep(c, "c_bad_call", kind))
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert info.value.code == "InternalError"
    assert message in root.state.error_info


async def test_foreign_sync_in_our_parallel(c: ModuleType) -> None:
    sync = c.lib.c_new_sync()
    try:
        root = AsyncSteps()

        def start(asi: Any) -> None:
            asi.parallel().add(cstep(c, "c_add_sync", sync)).add(cstep(c, "c_add_sync", sync))

        root.add(start)
        await root.promise()
        assert log(c) == ["section", "section"]
        assert [c.lib.c_sync_counts(sync, i) for i in range(3)] == [2, 2, 0]
    finally:
        c.lib.c_free_sync(sync)


async def test_our_sync_pointer_unwraps_to_the_python_object(c: ModuleType) -> None:
    class Counting:
        def __init__(self) -> None:
            self.calls = 0

        def sync(self, asi: Any, func: Any, onerror: Any = None) -> None:
            self.calls += 1
            asi.add(func, onerror)

    obj = Counting()
    ptr = _bridge.sync_binary_of(obj)
    assert _bridge.sync_binary_of(obj) == ptr
    assert _bridge.wrap_sync(ptr) is obj
    await run(cstep(c, "c_add_sync", ptr))
    assert obj.calls == 1
    assert log(c) == ["section"]


async def test_binary_is_stable_and_wraps_back() -> None:
    seen: list[Any] = []

    def step(asi: Any) -> None:
        ptr = asi.binary()
        assert asi.binary() == ptr
        seen.append(AsyncSteps.wrap(ptr) is asi)
        seen.append(_bridge.wrap(ptr) is asi)

    await run(step)
    assert seen == [True, True]


async def test_a_loop_of_c_steps(c: ModuleType) -> None:
    # repeat() from C, each iteration add()ing a C step that calls success(bsi, NULL)
    await run(cstep(c, "c_bench", 1000))
    assert stats(c).bench_steps == 1000


async def test_sched_entry_goes_with_its_timer(c: ModuleType) -> None:
    """Issue 18 row 7: a C step's sched_deferred() outliving its root leaves nothing behind."""
    gc.collect()
    before = len(_ours._sched)
    # promise(): each root has a private driver; it ends with the root, and the timer with it
    for _ in range(50):
        await run(cstep(c, "c_sched_far", 60000))
    gc.collect()
    assert len(_ours._sched) == before
    assert stats(c).sched_fired == 0
    # in a tool the entry lives exactly as long as its timer: until it fires
    async with AsyncTool():
        for _ in range(3):
            root = AsyncSteps()
            root.add(cstep(c, "c_sched_far", 300))
            root.execute()
        await anyio.sleep(0.05)
        gc.collect()
        assert len(_ours._sched) == before + 3  # roots ended, timers pending
        await anyio.sleep(1)
        assert stats(c).sched_fired == 3
    gc.collect()
    assert len(_ours._sched) == before


def _live_records() -> int:
    return sum(1 for obj in gc.get_objects() if type(obj) is _ours._Scheduled)


async def test_cancelled_sched_deferred_holds_nothing(c: ModuleType) -> None:
    """Issue 15 item 2: a C step's sched_deferred() cancelled with sched_cancel() lets its
    record (the tool, the callback) go at once, while another timer keeps the heap alive."""
    gc.collect()
    before = _live_records()
    failed: list[str] = []
    async with AsyncTool() as tool:
        keeper = tool.deferred(30_000, lambda: None)
        for _ in range(20):
            root = AsyncSteps(tool=tool)
            root.add(cstep(c, "c_wait"))
            root.execute(failed.append)
        while tool.statistics().roots:
            await anyio.lowlevel.checkpoint()
        gc.collect()
        assert _live_records() == before
        assert tool.statistics().scheduled == 1
        keeper.cancel()
    assert failed == []
    assert stats(c).sched_fired == 20  # each root's sched_immediate completed it
    assert "cancelled sched fired" not in log(c)


HTOOL_CANCEL = "void (*)(void *, FutoInHandle *)"
HTOOL_IS_VALID = "bool (*)(void *, FutoInHandle *)"


def _slot(handle: Any, index: int, ctype: str) -> Any:
    """The function in vtable slot ``index`` of ``handle.data2``, found as C++ finds it."""
    vtable = ffi.cast("void **", ffi.cast("void ***", handle.data2)[0])
    return ffi.cast(ctype, vtable[index])


async def test_handles_dispatch_through_their_iasynctool_vtable() -> None:
    """Issue 28 without a C++ compiler: what the reference's IAsyncTool::Handle does with our
    handles (cancel() and operator bool call slots of data2's vtable), done from C types."""
    fired: list[int] = []
    cb = ffi.callback("void (void *)", lambda data: fired.append(int(ffi.cast("intptr_t", data))))
    seen: list[Any] = []

    def use(asi: AsyncSteps) -> None:
        b = asi.binary()
        h1, h2 = (
            ffi.new("FutoInHandle *", b.api.sched_deferred(b, 20, ffi.cast("void *", i), cb))
            for i in (1, 2)
        )
        assert h1.data1 == h1.data2 == lib.ftnpy_htool_ptr() and h1.data3 != h2.data3
        cancel = _slot(h1, lib.FTNPY_HTOOL_SLOT_CANCEL, HTOOL_CANCEL)
        is_valid = _slot(h1, lib.FTNPY_HTOOL_SLOT_IS_VALID, HTOOL_IS_VALID)
        copy = ffi.new("FutoInHandle *", h1[0])
        seen.append(is_valid(h1.data2, h1))
        cancel(h1.data2, h1)
        seen.extend([h1.data1 == ffi.NULL, is_valid(h1.data2, h1), is_valid(copy.data2, copy)])
        cancel(copy.data2, copy)  # the timer is gone: a no-op
        seen.append(bool(b.api.sched_is_valid(b, copy)))  # the table agrees
        asi.state["kept"] = h2

    async def wait(asi: AsyncSteps) -> None:
        await anyio.sleep(0.1)  # the timers run in this root's driver
        h2 = asi.state["kept"]
        seen.append(_slot(h2, lib.FTNPY_HTOOL_SLOT_IS_VALID, HTOOL_IS_VALID)(h2.data2, h2))

    await run(use, wait)
    assert seen == [True, True, False, False, False, False]
    assert fired == [2]  # the cancelled timer never fired, the other did


async def test_other_iasynctool_slots_report_a_misuse(caplog: pytest.LogCaptureFixture) -> None:
    # a Handle never calls them; called anyway (here outside any C callback), it is an error
    # that says what happened, never a crash
    handle = ffi.new("FutoInHandle *")
    handle.data2 = lib.ftnpy_htool_ptr()
    await anyio.lowlevel.checkpoint()
    for index in range(lib.FTNPY_HTOOL_NSLOTS):
        if index not in (lib.FTNPY_HTOOL_SLOT_CANCEL, lib.FTNPY_HTOOL_SLOT_IS_VALID):
            _slot(handle, index, "void (*)(void)")()
    messages = [r.getMessage() for r in caplog.records if r.name == "futoin_anyio"]
    assert len(messages) == lib.FTNPY_HTOOL_NSLOTS - 2
    assert all("only cancel() and is_valid()" in m for m in messages), messages

"""Run one interop case against the C++ reference in this process; print its outcome as JSON.

Usage: ``python tests/interop/run_case.py LIBRARY CASE BACKEND`` (``LIBRARY`` from
``refbuild.py``). tests/test_interop_reference.py runs every case in a subprocess, so a crash
of either side is a failed test, not a dead run; CI runs some of them under valgrind.

``cpp_*`` cases: C++ code (ref_cases.cpp) drives our AsyncSteps (C++ -> Py). ``py_*`` cases:
Python drives a reference root through ``AsyncSteps.wrap()`` (Py -> C++).
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from cffi import FFI

from futoin_anyio import AsyncSteps, AsyncTool, FutoInError
from futoin_anyio.binary import _bridge, _ffi, _ours

CDEF = """
const char* cpp_log(void);
void cpp_reset(void);
void cpp_add_to_root(uintptr_t root);
void cpp_parallel_and_instance(void*, void*, void*);
void cpp_error_info(void*, void*, void*);
void cpp_sched_handles(void*, void*, void*);
void cpp_add_echo(uintptr_t bsi);
void cpp_add_leave(uintptr_t bsi);
void cpp_int32_out(void*, void*, void*);
void cpp_add_int32_in(uintptr_t bsi);
void cpp_placeholders(void*, void*, void*);
void cpp_mutex(void*, void*, void*);
void cpp_root_ids(void*, void*, void*);
void cpp_e2e(void*, void*, void*);
void cpp_sched_far(void*, void*, void*);
void cpp_handle_cancel(void*, void*, void*);
void cpp_handle_kept(void);
void cpp_relinquish(void*, void*, void*);
void cpp_relinquish_wait(void*, void*, void*);
void* ref_new(void);
uintptr_t ref_binary(void* r);
int ref_iterate(void* r, int64_t* delay_ms);
int ref_idle(void* r);
void ref_free(void* r);
void ref_add_cpp_echo(void* r);
uintptr_t ref_mutex(void);
"""

ffi = FFI()
ffi.cdef(CDEF)
lib: Any = None
CASES: dict[str, Callable[[], Awaitable[Any]]] = {}
MIB = 1024 * 1024


def case(func: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    CASES[func.__name__] = func
    return func


def cpp_log() -> list[str]:
    return str(ffi.string(lib.cpp_log()).decode()).split(";")[:-1]


def step(name: str, data: int | None = None) -> Any:
    return _bridge.c_step(getattr(lib, name), data)


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def run_root(root: AsyncSteps) -> Any:
    return await root.promise()


async def execute(root: AsyncSteps) -> list[Any]:
    """Run ``root`` with execute() in the current AsyncTool (its timers live in that tool)."""
    done = anyio.Event()
    out: list[Any] = []

    def finish(*entry: Any) -> None:
        out.append(list(entry))
        done.set()

    root.add(lambda asi, *args: finish("ok", *args))
    root.execute(lambda code: finish("error", code))
    with anyio.fail_after(10):
        await done.wait()
    return out


# -- C++ -> Py ------------------------------------------------------------------------------


@case
async def cpp_root_parallel_instance() -> Any:
    """Row 3: the reference's wrapper keeps its step data with stack() on our root, on our
    parallel() pointers and on newInstance() pointers."""
    got: list[Any] = []
    async with AsyncTool():
        root = AsyncSteps()
        lib.cpp_add_to_root(int(_ffi.ffi.cast("uintptr_t", root.binary())))
        root.add(lambda asi, s: got.append(s))
        root.add(step("cpp_parallel_and_instance"))
        root.add(lambda asi, n: got.append(n))
        await root.promise()
        await anyio.sleep(0.01)
    return {"log": sorted(cpp_log()), "got": got}


@case
async def cpp_error_info() -> Any:
    root = AsyncSteps()
    root.add(step("cpp_error_info"))
    await root.promise()
    return cpp_log()


@case
async def cpp_sched_handles() -> Any:
    async with AsyncTool():
        root = AsyncSteps()
        root.add(step("cpp_sched_handles"))
        assert await execute(root) == [["ok"]]
        await anyio.sleep(0.2)
    return cpp_log()


def addr(asi: AsyncSteps) -> int:
    return int(_ffi.ffi.cast("uintptr_t", asi.binary()))


def _strings_through(cpp_add: str, n: int) -> Callable[[], Awaitable[Any]]:
    async def run() -> Any:
        seen: list[int] = []

        def make(asi: AsyncSteps, i: int) -> None:
            asi.add(lambda asi: asi.success(chr(97 + i % 26) * MIB))
            getattr(lib, cpp_add)(addr(asi))
            asi.add(lambda asi, *args: seen.append(len(args[0]) if args else -1))

        root = AsyncSteps()
        root.repeat(5, make)  # warm up: allocator pools, code paths
        await root.promise()
        gc.collect()
        before = rss_kib()
        root = AsyncSteps()
        root.repeat(n, make)
        await root.promise()
        gc.collect()
        after = rss_kib()
        return {"n": n, "seen": sorted(set(seen)), "rss_before_kib": before, "rss_after_kib": after}

    return run


N_STRINGS = int(os.environ.get("FUTOIN_INTEROP_N", "300"))


@case
async def cpp_strings_echo() -> Any:
    """Row 6 / item 3: N x 1 MiB strings Py -> C++ -> Py through a C++ step moving them back."""
    return await _strings_through("cpp_add_echo", N_STRINGS)()


@case
async def cpp_strings_left() -> Any:
    """Row 6: the C++ step takes string&& and leaves it: re-sent with placeholders, freed."""
    return await _strings_through("cpp_add_leave", N_STRINGS)()


@case
async def cpp_int32_width() -> Any:
    got: list[Any] = []
    root = AsyncSteps()
    root.add(step("cpp_int32_out"))
    def relay(asi: AsyncSteps, v: Any, s: Any) -> None:
        got.extend([type(v).__name__, v, s])
        asi.success(v, s)

    root.add(relay)
    lib.cpp_add_int32_in(addr(root))
    root.add(lambda asi, v: got.append(v))
    await root.promise()
    return {"log": cpp_log(), "got": got}


@case
async def cpp_placeholders() -> Any:
    root = AsyncSteps()
    root.add(step("cpp_placeholders"))
    await root.promise()
    gc.collect()
    return cpp_log()


@case
async def cpp_arity() -> Any:
    """Row 9: Python steps fed from C++ get the values they declare."""
    got: list[Any] = []
    root = AsyncSteps()
    root.add(step("cpp_int32_out"))
    root.add(lambda asi, v: got.append(int(v)))
    root.add(step("cpp_int32_out"))
    root.add(lambda asi: got.append("none"))
    root.add(step("cpp_int32_out"))
    root.add(lambda asi, *args: got.append(len(args)))
    await root.promise()
    return got


@case
async def cpp_mutex() -> Any:
    async with AsyncTool():
        roots = [AsyncSteps(), AsyncSteps()]
        for i, root in enumerate(roots):
            root.add(step("cpp_mutex", i))
        async with anyio.create_task_group() as tg:
            for root in roots:
                tg.start_soon(run_root, root)
    return cpp_log()


@case
async def cpp_root_ids() -> Any:
    root = AsyncSteps()
    root.add(step("cpp_root_ids"))
    await root.promise()
    return cpp_log()


@case
async def cpp_e2e() -> Any:
    got: list[Any] = []
    async with AsyncTool():
        root = AsyncSteps()
        root.add(step("cpp_e2e"))
        root.add(lambda asi, s, n: got.extend([s, int(n)]))
        await root.promise()
        first = cpp_log()
        lib.cpp_reset()
        root = AsyncSteps()
        root.add(step("cpp_e2e", 1))
        root.add(lambda asi, *args: got.append("not reached"))
        outcome = "?"
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal outcome
                try:
                    await root.promise()
                    outcome = "success"
                except FutoInError as exc:
                    outcome = exc.code

            tg.start_soon(watch)
            # wait until the C++ flow reached its last step, then cancel from Python
            with anyio.fail_after(10):
                while "loop=3" not in cpp_log():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            root.cancel()
    return {"first": first, "got": got, "second": cpp_log(), "outcome": outcome}


@case
async def cpp_sched_outlives_root() -> Any:
    """Issue 18 row 7: a deferred callback outliving its root leaves no bridge entry behind."""
    n = 50
    async with AsyncTool():
        for _ in range(n):
            root = AsyncSteps()
            root.add(step("cpp_sched_far"))
            await root.promise()
        pending = len(_ours._sched)
    gc.collect()
    return {"pending_while_tool_runs": pending, "left_after_tool": len(_ours._sched)}


@case
async def cpp_handle_cancel() -> Any:
    """Issue 28: the reference's IAsyncTool::Handle cancels and tests handles of our tool."""
    async with AsyncTool():
        root = AsyncSteps()
        root.add(step("cpp_handle_cancel"))
        assert await execute(root) == [["ok"]]
        await anyio.sleep(0.2)  # past the control timer and the wrapper's clean-up timers
        lib.cpp_handle_kept()
        left = len(_ours._sched)
    return {"log": cpp_log(), "left": left}


@case
async def cpp_relinquish() -> Any:
    """Issue 28: the reference's relinquish() over our steps resumes the flow."""
    got: list[Any] = []
    async with AsyncTool():
        root = AsyncSteps()
        root.add(step("cpp_relinquish"))
        root.add(lambda asi, n: got.append(int(n)))
        await root.promise()
        left = len(_ours._sched)
    return {"log": cpp_log(), "got": got, "left": left}


@case
async def cpp_relinquish_cancel() -> Any:
    """Issue 28: a root cancelled while a C++ step waits in relinquish(): the reference's
    cancel handler cancels the pending immediate through its Handle (our data2), so it never
    resumes the step (whose wrapper is freed with it)."""
    seen: list[Any] = []
    outcome = "?"
    async with AsyncTool():
        root = AsyncSteps()

        def arm(asi: AsyncSteps) -> None:
            tool = asi.tool
            assert tool is not None

            def check(turn: int = 0) -> None:
                # Immediates run in order: until relinquish() scheduled its own, look again
                # from a later one, which then runs before it.
                pending = len(_ours._sched)
                if pending == 0 and turn < 100:
                    tool.immediate(lambda: check(turn + 1))
                    return
                seen.append(["pending-before-cancel", pending])
                root.cancel()
                seen.append(["pending-after-cancel", len(_ours._sched)])

            tool.immediate(check)

        root.add(arm)
        root.add(step("cpp_relinquish_wait"))
        root.add(lambda asi: seen.append("not reached"))
        try:
            await root.promise()
            outcome = "success"
        except FutoInError as exc:
            outcome = exc.code
        await anyio.sleep(0.05)
        left = len(_ours._sched)
    return {"log": cpp_log(), "seen": seen, "outcome": outcome, "left": left}


# -- Py -> C++ ------------------------------------------------------------------------------


class Ref:
    """A reference AsyncTool (external loop) and root AsyncSteps, pumped from the event loop."""

    def __init__(self) -> None:
        self.r = lib.ref_new()
        self.asi: Any = AsyncSteps.wrap(_ffi.ffi.cast("FutoInAsyncSteps *", lib.ref_binary(self.r)))

    async def run(self, *, unhandled: list[str] | None = None) -> None:
        errors = unhandled if unhandled is not None else []
        self.asi.execute(errors.append)
        delay = ffi.new("int64_t *")
        with anyio.fail_after(20):
            while True:
                work = lib.ref_iterate(self.r, delay)
                if not work and lib.ref_idle(self.r):
                    break
                await anyio.sleep(0 if work else min(delay[0], 50) / 1000)
        if unhandled is None and errors:
            raise AssertionError(f"unhandled error in the reference root: {errors}")

    def free(self) -> None:
        lib.ref_free(self.r)


@case
async def py_success_no_values() -> Any:
    """Row 1: success() with no values, also from an error handler recovering."""
    ref = Ref()
    got: list[Any] = []
    ref.asi.add(lambda asi: asi.success())
    ref.asi.add(lambda asi, *args: got.append(("after-empty", len(args))))
    ref.asi.add(lambda asi: asi.error("MyError"), lambda asi, code: asi.success())
    ref.asi.add(lambda asi, *args: got.append(("recovered", len(args))))
    await ref.run()
    ref.free()
    return got


@case
async def py_stack_without_cleanup() -> Any:
    """Row 2: stack() without a clean-up, by size and by factory."""
    ref = Ref()
    got: list[Any] = []

    def use(asi: Any) -> None:
        mem = asi.stack(16)
        _ffi.ffi.buffer(mem, 16)[:] = b"x" * 16
        got.append(bytes(_ffi.ffi.buffer(mem, 16)).decode())
        got.append(asi.stack(lambda: "obj"))
        got.append(asi.stack(lambda: "obj2", got.append))

    ref.asi.add(use)
    await ref.run()
    ref.free()
    return got


@case
async def py_sched_handles() -> Any:
    """Row 5 seen from Python: a reference handle cancelled and tested through the table."""
    ref = Ref()
    got: list[Any] = []

    def use(asi: Any) -> None:
        h = asi.tool.deferred(150, lambda: got.append("cancelled-fired"))
        got.append(asi.tool.is_valid(h))
        asi.tool.cancel(h)
        got.append(asi.tool.is_valid(h))
        asi.tool.deferred(100, lambda: got.append("kept-fired"))

    ref.asi.add(use)
    await ref.run()
    delay = ffi.new("int64_t *")
    for _ in range(30):
        lib.ref_iterate(ref.r, delay)
        await anyio.sleep(0.01)
    ref.free()
    return got


@case
async def py_strings() -> Any:
    """Row 6 / item 3: N x 1 MiB strings Python -> reference -> C++ step -> Python."""
    seen: list[int] = []

    async def once(n: int) -> None:
        ref = Ref()

        def body(asi: Any, i: int) -> None:
            asi.add(lambda asi: asi.success(chr(97 + i % 26) * MIB))
            asi.add(lambda asi, s: asi.success(s))
            asi.add(lambda asi, s: seen.append(len(s)))

        ref.asi.repeat(n, body)
        await ref.run()
        ref.free()

    await once(5)
    gc.collect()
    before = rss_kib()
    await once(N_STRINGS)
    gc.collect()
    after = rss_kib()
    return {"n": N_STRINGS, "seen": sorted(set(seen)), "rss_before_kib": before,
            "rss_after_kib": after}


@case
async def py_values_to_cpp_step() -> Any:
    """Row 6: a Python value moved into a C++ step of the reference root and back."""
    ref = Ref()
    got: list[Any] = []
    ref.asi.add(lambda asi: asi.success("x" * 1000))
    lib.ref_add_cpp_echo(ref.r)
    ref.asi.add(lambda asi, s: got.append(len(s)))
    await ref.run()
    ref.free()
    return {"got": got, "log": cpp_log()}


@case
async def py_arity() -> Any:
    """Row 9: the reference pads to 4 values; our Python steps get what they declare."""
    ref = Ref()
    got: list[Any] = []
    ref.asi.add(lambda asi: asi.success(1, "two"))
    ref.asi.add(lambda asi, a, b: got.append([a, b]))
    ref.asi.add(lambda asi: asi.success(5))
    ref.asi.add(lambda asi: got.append("none"))
    await ref.run()
    ref.free()
    return got


@case
async def py_mutex_and_root_ids() -> Any:
    """Rows 10-11 seen from Python: the reference's Mutex and per-branch rootId."""
    ref = Ref()
    got: list[Any] = []
    sync = _ffi.ffi.cast("FutoInSync *", lib.ref_mutex())

    def branch(i: int) -> Any:
        def run(asi: Any) -> None:
            got.append(("id", asi.root_id()))
            asi.sync(sync, lambda asi: got.append(("in", i)))

        return run

    def par(asi: Any) -> None:
        p = asi.parallel()
        for i in range(3):
            p.add(branch(i))

    ref.asi.add(par)
    await ref.run()
    ref.free()
    ids = {v for k, v in got if k == "id"}
    return {"distinct_ids": len(ids), "entered": sorted(v for k, v in got if k == "in")}


def main() -> None:
    global lib
    path, name, backend = sys.argv[1:4]
    lib = ffi.dlopen(path)
    lib.cpp_reset()
    func = CASES[name]
    options: dict[str, Any] = {}
    if backend == "trio" and name.startswith("cpp_") and name not in ("cpp_e2e",):
        import trio.testing

        options = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    result = anyio.run(func, backend=backend, backend_options=options)
    lib.cpp_reset()
    gc.collect()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()

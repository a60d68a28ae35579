"""Finished timers hold nothing: a timer cancelled before its deadline (a step that set a timeout
and ended, a cancelled ``deferred()``, a cancelled root) lets its callback and arguments go at
once, and the driver's timer heap does not keep an entry per cancelled timer.

The per-root figures come from ``benchmarks/timer_mem.py`` (tracemalloc, not timing): at most
100 bytes per finished timed root (about 1,100 before timers let go, about 3 after).
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.lowlevel import checkpoint

from futoin_anyio import AsyncSteps, AsyncTool

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # ``pytest`` run without ``python -m``
    sys.path.insert(0, str(REPO))

from benchmarks import timer_mem  # noqa: E402
from benchmarks.timer_mem import SCENARIOS  # noqa: E402

pytestmark = pytest.mark.anyio

#: The target of issue 15: bytes held per finished timed root.
MAX_BYTES_PER_ROOT = 100


class _Steps(AsyncSteps):
    """AsyncSteps that can be weakly referenced (its steps are of the root's class too)."""

    __slots__ = ("__weakref__",)


class _Callback:
    """A callback that can be weakly referenced."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


@pytest.mark.parametrize(("scenario", "n"), [("execute", 20_000), ("promise", 20_000),
                                             ("deferred", 20_000), ("cancel", 10_000)])
def test_bytes_held_per_finished_timer(anyio_backend: str, scenario: str, n: int) -> None:
    per_root = anyio.run(SCENARIOS[scenario], n, backend=anyio_backend)
    assert per_root <= MAX_BYTES_PER_ROOT, f"{scenario}: {per_root:.1f} B per finished timer"


def test_command_line_prints_a_row_per_scenario_and_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m benchmarks.timer_mem``, small: the table CI would show, figures in bound."""
    assert timer_mem.main(["-n", "1000", "--only", "execute,deferred"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["| scenario | backend | n | bytes held per finished timer |",
                         "| --- | --- | --- | --- |"]
    rows = [line.strip("| ").split(" | ") for line in lines[2:]]
    assert [row[:3] for row in rows] == [
        ["execute", "asyncio", "1000"], ["execute", "trio", "1000"],
        ["deferred", "asyncio", "1000"], ["deferred", "trio", "1000"],
    ]
    assert all(float(row[3]) <= MAX_BYTES_PER_ROOT for row in rows), lines


@pytest.mark.parametrize(("argv", "message"), [
    (["--only", "execute,nope"], "--only execute,nope: choose among execute, promise"),
    (["--backend", "curio"], "--backend curio: choose among asyncio, trio"),
    (["-n", "0"], "-n must be >= 1, not 0"),
])
def test_command_line_rejects_bad_input(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        timer_mem.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr()
    assert message in err.err and err.out == ""


async def test_step_that_ended_is_not_kept_by_its_timeout() -> None:
    """A step that set a 60 s timeout and succeeded is freed at once, with its root, while
    another timer lives (before: the timer heap kept it until its deadline)."""
    seen: list[weakref.ref[Any]] = []

    def timed(asi: Any) -> None:
        asi.set_timeout(60_000)
        seen.append(weakref.ref(asi))
        asi.success()

    async with AsyncTool() as tool:
        keeper = tool.deferred(30_000, lambda: None)
        for _ in range(10):
            root = _Steps(tool=tool)
            root.add(timed)
            root.execute()
            seen.append(weakref.ref(root))
        del root
        while tool.statistics().roots:
            await checkpoint()
        gc.collect()
        assert len(seen) == 20
        assert [ref() for ref in seen] == [None] * 20
        assert tool.statistics().scheduled == 1  # the keeper alone
        keeper.cancel()


async def test_cancelled_root_lets_its_timer_go() -> None:
    """``root.cancel()`` of a root waiting under a timeout frees the step the timer held."""
    steps: list[weakref.ref[Any]] = []

    def wait_timed(asi: Any) -> None:
        asi.set_timeout(60_000)
        steps.append(weakref.ref(asi))

    async with AsyncTool() as tool:
        keeper = tool.deferred(30_000, lambda: None)
        root = _Steps(tool=tool)
        root.add(wait_timed)
        root.execute()
        while not steps:
            await checkpoint()
        assert steps[0]() is not None  # waiting: the timer holds it
        assert tool.statistics().scheduled == 2
        root.cancel()
        del root
        gc.collect()
        assert steps[0]() is None
        assert tool.statistics().scheduled == 1
        keeper.cancel()


async def test_cancelled_deferred_lets_its_callback_go() -> None:
    """A cancelled ``deferred()`` handle, still held by the user, no longer holds its callback;
    neither does one that ran."""
    async with AsyncTool() as tool:
        callback = _Callback()
        ref = weakref.ref(callback)
        handle = tool.deferred(60_000, callback)
        assert "scheduled" in repr(handle)
        del callback
        gc.collect()
        assert ref() is not None  # scheduled: held
        handle.cancel()
        gc.collect()
        assert ref() is None
        assert not handle.is_valid()
        assert repr(handle) == "<Handle done>"

        ran = _Callback()
        ran_ref = weakref.ref(ran)
        fired = tool.deferred(0, ran)
        del ran
        while fired.is_valid():
            await checkpoint()
        gc.collect()
        assert ran_ref() is None  # it ran (the count was 1) and was let go
        assert tool.statistics().scheduled == 0


async def test_timer_heap_does_not_grow_with_cancelled_entries() -> None:
    """10^4 cancelled ``deferred()`` handles leave a heap the size of the live timers, without
    the driver ever reaching their deadlines; the live timers still fire in order."""
    fired: list[int] = []
    all_fired = anyio.Event()

    def make(i: int) -> Any:
        def fire() -> None:
            fired.append(i)
            if len(fired) == 5:
                all_fired.set()
        return fire

    async with AsyncTool() as tool:
        for i in range(5):
            tool.deferred(float(i), make(i))
        for _ in range(10_000):
            tool.deferred(60_000, _Callback()).cancel()
        # White box: the heap of the tool's driver (entries of live and cancelled timers).
        assert len(tool._timers) <= 2 * 5 + 64 + 1
        assert tool.statistics().scheduled == 5
        with anyio.fail_after(5):
            await all_fired.wait()
    assert fired == [0, 1, 2, 3, 4]


async def test_cancel_from_a_thread_lets_go_and_counts_once() -> None:
    """Handles cancelled from a worker thread while the loop runs others: every callback is
    let go, the scheduled count ends at zero and the block exits."""
    total = 2_000
    ran = 0

    def count() -> None:
        nonlocal ran
        ran += 1

    with anyio.fail_after(20):
        async with AsyncTool() as tool:
            handles = [tool.immediate(count) for _ in range(total)]
            timers = [tool.deferred(60_000, _Callback()) for _ in range(200)]
            refs = [weakref.ref(h._func) for h in timers]  # white box: what a handle holds

            def cancel_all() -> None:
                for handle in handles + timers:
                    handle.cancel()

            worker = threading.Thread(target=cancel_all)
            worker.start()
            while worker.is_alive():
                await checkpoint()
            worker.join()
            for _ in range(3):
                await checkpoint()
            gc.collect()
            assert [ref() for ref in refs] == [None] * len(refs)
            assert tool.statistics().scheduled == 0
    assert 0 <= ran <= total

"""Bad input: every misuse named in docs/semantics.rst and the issues, and what it raises.

The table :data:`MISUSES` is the single source: the parametrised test runs each entry on both
backends and checks the exception type, the FutoIn code (for ``FutoInError``) and a fragment of
the message; ``docs/bad_input.rst`` is generated from the same table and a test checks it is up to
date. Regenerate it with ``python tests/test_bad_input.py``.

Where a misuse happens decides where it surfaces. A call made *inside a step* raises in that step
like any other error: left uncaught it reaches the error handlers, as code ``InternalError`` for
a ``FutoInError`` and for a ``TypeError``/``ValueError`` alike. The test catches it at the call to
check it precisely.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from inspect import isawaitable
from pathlib import Path
from typing import Any

import pytest

from futoin_anyio import (
    AsyncSteps,
    AsyncTool,
    Errors,
    FutoInError,
    Limiter,
    Mutex,
    ParallelSteps,
    Throttle,
)

pytestmark = pytest.mark.anyio

RST = Path(__file__).resolve().parent.parent / "docs" / "bad_input.rst"

#: Where a misuse is tried; the text goes to the docs.
WHERE = {
    "build": "on a root being built (not executed yet)",
    "step": "inside an executing step, on its own ``asi``",
    "async": "inside an ``async def`` step",
    "stale": "on the ``asi`` of a step that has completed",
    "root": "on the root, from inside one of its steps",
    "executed": "on a root that has finished",
    "tool": "inside ``async with AsyncTool() as tool``",
    "outside": "anywhere (no running AsyncTool needed)",
}


def _step(asi: AsyncSteps, *args: Any) -> None:
    """A do-nothing step."""


def _onerror(asi: AsyncSteps, code: str) -> None:
    """A do-nothing error handler."""


@dataclass(frozen=True)
class Misuse:
    group: str
    what: str
    where: str
    call: str  # the call, as the docs show it
    run: Callable[[Any], object]  # takes the object ``where`` gives; may return an awaitable
    exc: type[BaseException]
    code: str | None  # FutoInError code, or None
    fragment: str  # part of str(exception)


def _add_then_success(asi: AsyncSteps) -> None:
    asi.add(_step)
    asi.success()


def _execute_twice(tool: AsyncTool) -> None:
    root = AsyncSteps().add(_step)
    root.execute()
    root.execute()


def _promise_after_execute(tool: AsyncTool) -> Awaitable[Any]:
    root = AsyncSteps().add(_step)
    root.execute()
    return root.promise()


def _execute_no_tool(_: object) -> None:
    AsyncSteps().add(_step).execute()


def _promise_after_cancel(root: AsyncSteps) -> Awaitable[Any]:
    root.add(_step)
    root.cancel()
    return root.promise()


def _enter_twice(tool: AsyncTool) -> Awaitable[Any]:
    return tool.__aenter__()


def _deferred_not_running(_: object) -> None:
    AsyncTool().deferred(10, lambda: None)


def _execute_after_exit(tool: AsyncTool) -> Awaitable[None]:
    async def run() -> None:
        async with AsyncTool() as other:
            pass
        AsyncSteps(tool=other).add(_step).execute()

    return run()


def _copy_executed(root: AsyncSteps) -> None:
    AsyncSteps().copy_from(root)


#: Wrong on purpose; typed ``Any`` so that mypy lets the misuse through.
BAD: Any = 42
BAD_STR: Any = "1"
IE = Errors.InternalError
FE = FutoInError

MISUSES: tuple[Misuse, ...] = (
    # -- steps and handlers
    Misuse("Steps", "non-callable step", "build", "asi.add(42)",
           lambda a: a.add(42), FE, IE, "the step must be callable, got int"),
    Misuse("Steps", "non-callable step", "step", "asi.add(None)",
           lambda a: a.add(None), FE, IE, "the step must be callable, got NoneType"),
    Misuse("Steps", "non-callable error handler", "build", 'asi.add(step, "oops")',
           lambda a: a.add(_step, "oops"), FE, IE, "onerror must be callable, got str"),
    Misuse("Steps", "non-callable parallel branch", "build", "asi.parallel().add(1)",
           lambda a: a.parallel().add(1), FE, IE, "the step must be callable, got int"),
    Misuse("Steps", "non-callable cancel handler", "step", "asi.set_cancel(1)",
           lambda a: a.set_cancel(1), FE, IE, "the handler must be callable"),
    Misuse("Steps", "non-callable loop body", "build", "asi.loop(1)",
           lambda a: a.loop(1), FE, IE, "the body must be callable"),
    Misuse("Steps", "an object without ``sync()``", "build", "asi.sync(object(), step)",
           lambda a: a.sync(object(), _step), FE, IE, "does not implement ISync"),
    Misuse("Steps", "non-callable critical section", "build", "Mutex().sync(asi, 42)",
           lambda a: Mutex().sync(a, BAD), FE, IE, "the step must be callable"),
    Misuse("Steps", "not an awaitable", "build", "asi.await_(42)",
           lambda a: a.await_(42), FE, IE, "expected an awaitable, got int"),
    # -- completing a step
    Misuse("Completion", "``success()`` after ``add()`` in the same step", "step",
           "asi.add(step); asi.success()", _add_then_success, FE, IE,
           "success() after sub-steps were added"),
    Misuse("Completion", "``success()`` on a root being built", "build", "asi.success()",
           lambda a: a.success(), FE, IE, "can only be called inside an executing step"),
    Misuse("Completion", "``success()`` in an ``async def`` step", "async", "asi.success(1)",
           lambda a: a.success(1), FE, IE, "return the result instead"),
    Misuse("Completion", "``error()`` with a code that is not a ``str``", "step", "asi.error(42)",
           lambda a: a.error(42), TypeError, None, "the code must be a str, got int"),
    # -- a step object out of service
    Misuse("Out of service", "``success()`` on a completed step", "stale", "asi.success()",
           lambda a: a.success(), FE, IE, "out of service"),
    Misuse("Out of service", "``error()`` on a completed step", "stale", 'asi.error("E")',
           lambda a: a.error("E"), FE, IE, "out of service"),
    Misuse("Out of service", "``add()`` on a completed step", "stale", "asi.add(step)",
           lambda a: a.add(_step), FE, IE, "out of service"),
    Misuse("Out of service", "``set_timeout()`` on a completed step", "stale",
           "asi.set_timeout(10)", lambda a: a.set_timeout(10), FE, IE, "out of service"),
    Misuse("Out of service", "``break_loop()`` on a completed step", "stale", "asi.break_loop()",
           lambda a: a.break_loop(), FE, IE, "out of service"),
    Misuse("Out of service", "``add()`` on the executing root", "root", "root.add(step)",
           lambda a: a.add(_step), FE, IE, "the root is executing"),
    # -- timeouts
    Misuse("Timeouts", "negative timeout", "step", "asi.set_timeout(-1)",
           lambda a: a.set_timeout(-1), ValueError, None, "must be >= 0 milliseconds"),
    Misuse("Timeouts", "NaN timeout", "step", 'asi.set_timeout(float("nan"))',
           lambda a: a.set_timeout(math.nan), ValueError, None, "must be >= 0 milliseconds"),
    Misuse("Timeouts", "non-numeric timeout", "step", 'asi.set_timeout("10")',
           lambda a: a.set_timeout("10"), TypeError, None,
           "must be a number of milliseconds, got str"),
    Misuse("Timeouts", "``bool`` timeout", "step", "asi.set_timeout(True)",
           lambda a: a.set_timeout(True), TypeError, None,
           "must be a number of milliseconds, got bool"),
    # -- loops
    Misuse("Loops", "``repeat`` with a negative count", "build", "asi.repeat(-1, step)",
           lambda a: a.repeat(-1, _step), ValueError, None, "count must be >= 0, got -1"),
    Misuse("Loops", "``repeat`` with a count that is not an ``int``", "build",
           "asi.repeat(2.5, step)", lambda a: a.repeat(2.5, _step), TypeError, None,
           "count must be an int, got float"),
    Misuse("Loops", "``for_each`` on a non-collection", "build", "asi.for_each(42, step)",
           lambda a: a.for_each(42, _step), TypeError, None,
           "expected a mapping or a list, got int"),
    Misuse("Loops", "``for_each`` on a string", "build", 'asi.for_each("abc", step)',
           lambda a: a.for_each("abc", _step), TypeError, None,
           "expected a mapping or a list, got str"),
    Misuse("Loops", "a loop label that is not a ``str``", "build", "asi.loop(step, 7)",
           lambda a: a.loop(_step, 7), TypeError, None, "label must be a str, got int"),
    # -- running a root
    Misuse("Running", "``execute()`` twice", "tool", "root.execute(); root.execute()",
           _execute_twice, FE, IE, "this root was already started"),
    Misuse("Running", "``promise()`` after ``execute()``", "tool",
           "root.execute(); await root.promise()", _promise_after_execute, FE, IE,
           "this root was already started"),
    Misuse("Running", "``execute()`` with no running AsyncTool", "outside", "root.execute()",
           _execute_no_tool, FE, IE, "execute() needs a running AsyncTool"),
    Misuse("Running", "``execute()`` on an AsyncTool that has exited", "tool",
           "AsyncSteps(tool=exited).execute()", _execute_after_exit, FE, IE,
           "the AsyncTool has already exited"),
    Misuse("Running", "``execute()`` with a non-callable ``unhandled_error``", "tool",
           "root.execute(42)", lambda t: AsyncSteps().execute(BAD), TypeError, None,
           "unhandled_error must be callable"),
    Misuse("Running", "``promise()`` on a root cancelled before it started", "build",
           "root.cancel(); await root.promise()", _promise_after_cancel, FE, IE,
           "the root was cancelled before it started"),
    Misuse("Running", "``execute()`` on a step", "step", "asi.execute()",
           lambda a: a.execute(), FE, IE, "can only be called on a root"),
    Misuse("Running", "``cancel()`` on a step", "step", "asi.cancel()",
           lambda a: a.cancel(), FE, IE, "can only be called on a root"),
    Misuse("Running", "``clone()`` of a root that has run", "executed", "root.clone()",
           lambda r: r.clone(), FE, IE, "only a root that has not been executed"),
    Misuse("Running", "``copy_from()`` a root that has run", "executed",
           "AsyncSteps().copy_from(root)", _copy_executed, FE, IE,
           "the model must be a root that has not been executed"),
    Misuse("Running", "``copy_from()`` something else", "build", "asi.copy_from(42)",
           lambda a: a.copy_from(42), TypeError, None, "copy_from() needs an AsyncSteps"),
    Misuse("Running", "``stack()`` with a negative size", "step", "asi.stack(-1)",
           lambda a: a.stack(-1), ValueError, None, "size must be >= 0"),
    Misuse("Running", "``stack()`` with neither a size nor a factory", "step", 'asi.stack("x")',
           lambda a: a.stack("x"), TypeError, None, "needs a size or a factory"),
    # -- constructors and the AsyncTool
    Misuse("Objects", "a state that is not a mapping", "outside", "AsyncSteps(state=42)",
           lambda _: AsyncSteps(state=BAD), TypeError, None, "state must be a mapping"),
    Misuse("Objects", "a tool that is not an AsyncTool", "outside", "AsyncSteps(tool=42)",
           lambda _: AsyncSteps(tool=BAD), TypeError, None, "tool must be an AsyncTool"),
    Misuse("Objects", "a root name that is not a ``str``", "outside", "AsyncSteps(name=42)",
           lambda _: AsyncSteps(name=BAD), TypeError, None, "name must be a str, got int"),
    Misuse("Objects", "a parallel results key that is not a ``str``", "build",
           "asi.parallel(results=42)", lambda a: a.parallel(results=BAD), TypeError, None,
           "results must be a str"),
    Misuse("Objects", "a cancel reason that is not a ``str``", "build", "root.cancel(42)",
           lambda a: a.cancel(BAD), TypeError, None, "reason must be a str, got int"),
    Misuse("Objects", "creating a ParallelSteps directly", "outside", "ParallelSteps()",
           lambda _: ParallelSteps(), TypeError, None, "created by AsyncSteps.parallel()"),
    Misuse("Objects", "``immediate()`` with a non-callable", "tool", "tool.immediate(42)",
           lambda t: t.immediate(42), TypeError, None, "needs a callable, got int"),
    Misuse("Objects", "``deferred()`` with a negative delay", "tool",
           "tool.deferred(-5, func)", lambda t: t.deferred(-5, print), ValueError, None,
           "must be >= 0 milliseconds"),
    Misuse("Objects", "``deferred()`` on an AsyncTool that is not running", "outside",
           "AsyncTool().deferred(10, func)", _deferred_not_running, FE, IE,
           "the AsyncTool is not running"),
    Misuse("Objects", "entering an AsyncTool twice", "tool", "async with tool: ...",
           _enter_twice, RuntimeError, None, "can be entered only once"),
    # -- sync primitives
    Misuse("Sync primitives", "a Mutex for no one", "outside", "Mutex(0)",
           lambda _: Mutex(0), ValueError, None, "max must be >= 1, got 0"),
    Misuse("Sync primitives", "a count that is not an ``int``", "outside", 'Mutex("1")',
           lambda _: Mutex(BAD_STR), TypeError, None, "max must be an int, got str"),
    Misuse("Sync primitives", "a negative queue limit", "outside", "Limiter(max_queue=-1)",
           lambda _: Limiter(max_queue=-1), ValueError, None, "max_queue must be >= 0"),
    Misuse("Sync primitives", "a period that is not > 0", "outside", "Throttle(1, 0)",
           lambda _: Throttle(1, 0), ValueError, None, "period_ms must be a finite number > 0"),
    Misuse("Sync primitives", "a name that is not a ``str``", "outside", "Limiter(name=42)",
           lambda _: Limiter(name=BAD), TypeError, None, "name must be a str, got int"),
    Misuse("Sync primitives", "an infinite period", "outside", 'Limiter(period_ms=float("inf"))',
           lambda _: Limiter(period_ms=math.inf), ValueError, None,
           "period_ms must be a finite number > 0"),
)


async def _call(run: Callable[[Any], object], target: Any) -> BaseException | None:
    try:
        result = run(target)
        if isawaitable(result):
            await result
    except Exception as exc:
        return exc
    return None


async def capture(m: Misuse) -> BaseException | None:
    """Try the misuse where it says, and return what it raised."""
    caught: list[BaseException | None] = []

    def in_step(asi: AsyncSteps, target: Any) -> None:
        try:
            result = m.run(target)
            assert not isawaitable(result)
        except Exception as exc:
            caught.append(exc)
        else:
            caught.append(None)

    if m.where in ("outside", "build"):
        return await _call(m.run, AsyncSteps() if m.where == "build" else None)
    if m.where == "tool":
        async with AsyncTool() as tool:
            return await _call(m.run, tool)
    root = AsyncSteps()
    if m.where == "executed":
        root.add(_step)
        await root.promise()
        return await _call(m.run, root)
    if m.where == "step":
        root.add(lambda asi: in_step(asi, asi))
    elif m.where == "root":
        root.add(lambda asi: in_step(asi, root))
    elif m.where == "stale":
        kept: list[AsyncSteps] = []
        root.add(lambda asi: kept.append(asi))
        root.add(lambda asi: in_step(asi, kept[0]))
    else:
        assert m.where == "async"

        async def step(asi: AsyncSteps) -> None:
            in_step(asi, asi)

        root.add(step)
    await root.promise()
    assert len(caught) == 1
    return caught[0]


@pytest.mark.parametrize("misuse", MISUSES, ids=lambda m: f"{m.where}:{m.call}")
async def test_misuse_raises(misuse: Misuse) -> None:
    exc = await capture(misuse)
    assert exc is not None, f"{misuse.call} raised nothing"
    assert type(exc) is misuse.exc, repr(exc)
    if misuse.code is not None:
        assert isinstance(exc, FutoInError) and exc.code == misuse.code
    assert misuse.fragment in str(exc), str(exc)


async def test_misuse_in_a_step_reaches_handlers_as_internal_error() -> None:
    """Uncaught, a misuse inside a step is an error like any other: code InternalError."""
    seen: list[tuple[str, Any]] = []
    for bad in (lambda a: a.set_timeout(-1), lambda a: a.add(42), lambda a: a.error(42)):
        root = AsyncSteps()
        root.add(bad, lambda asi, code: seen.append((code, asi.state.error_info)))
        with pytest.raises(FutoInError) as info:
            await root.promise()
        assert info.value.code == Errors.InternalError
    assert [code for code, _ in seen] == [Errors.InternalError] * 3
    assert "ValueError" in seen[0][1] and "TypeError" in seen[2][1]


def render_rst() -> str:
    """``docs/bad_input.rst``, generated from :data:`MISUSES`."""
    out = [
        ".. This file is generated by tests/test_bad_input.py (python tests/test_bad_input.py);",
        "   a test checks that it matches the table there. Do not edit by hand.",
        "",
        "Bad input",
        "=========",
        "",
        "What each misuse raises. ``FutoInError`` rows give the error code; every row gives a",
        "part of the message. A misuse inside a step raises in that step like any other error:",
        "left uncaught, it reaches the step's error handlers, as ``InternalError`` (the message",
        "is then in ``state.error_info``).",
        "",
    ]
    groups: dict[str, list[Misuse]] = {}
    for m in MISUSES:
        groups.setdefault(m.group, []).append(m)
    for group, rows in groups.items():
        out += [group, "-" * len(group), "", ".. list-table::", "   :header-rows: 1",
                "   :widths: 30 30 20 30", "",
                "   * - Misuse", "     - Call", "     - Raises", "     - Message contains"]
        for m in rows:
            raises = f"``{m.exc.__name__}``"
            if m.code is not None:
                raises += f" ``{m.code}``"
            out += [f"   * - {m.what}, {WHERE[m.where]}", f"     - ``{m.call}``",
                    f"     - {raises}", f"     - ``{m.fragment}``"]
        out.append("")
    return "\n".join(out)


def test_docs_page_matches_table() -> None:
    assert RST.read_text(encoding="utf-8") == render_rst(), (
        "docs/bad_input.rst is stale: run `python tests/test_bad_input.py`")


def test_table_covers_every_where() -> None:
    assert {m.where for m in MISUSES} == set(WHERE)
    assert len({(m.where, m.call) for m in MISUSES}) == len(MISUSES)


if __name__ == "__main__":
    RST.write_text(render_rst(), encoding="utf-8")
    sys.stdout.write(f"wrote {RST}\n")

"""The flow dump: a snapshot of every live root of the running event loop, for people and tools.

A root that hangs has no task of its own to look at: a plain step waiting in
``wait_external()`` or in a Limiter queue is a frame on a list, not a coroutine. This module
shows them all::

    from futoin_anyio import dump

    print(dump.format_text(dump.snapshot()))   # in the event loop's thread
    dump.install_signal_handler()              # then: kill -USR1 <pid>, or
                                               # python -m futoin_anyio.dump <pid>

:func:`snapshot` returns a JSON-ready ``dict`` (the format is documented on the "Seeing
inside" page); :func:`format_text` renders it as a tree. Per root: its name (the one given, or
the qualname of its first step), how it runs (``promise()`` or an ``AsyncTool``), its state, its
age, the nearest ``set_timeout()`` deadline, and the path of its active frames — each step's
qualname with file and line, loops with their label and iteration, parallel branches as children,
``async def`` steps with the line each coroutine of the chain waits at (``cr_frame`` /
``cr_await``), and what a waiting step waits on: ``wait_external()``, a Mutex, Throttle or
Limiter (its name, the queue position, since when, and who holds it), a timer.

The live roots are found through a weak registry of AsyncTools (each ``async with AsyncTool()``
block, and the private tool of each ``promise()``: a weak reference made when it starts, gone
with it), each of which lists its own roots; it keeps nothing alive. What the dump alone needs —
a root's first step (its name) and start (its age), when a flow joined a sync queue — is noted
only once :func:`record_times` was called (:func:`install_signal_handler` calls it); before that,
a root is named after its outermost active step and ages are ``None``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from threading import get_ident
from types import FrameType
from typing import Any

from . import _instrument
from ._flow import _Flow, _flow_deadline
from ._frame import _STATUS_NAMES, _WAIT_ONLY, CANCELLING, COMPILED, CORO, ROOT, WAIT
from ._limiter import _Section as _LimiterSection
from ._loops import _FOR_EACH, _REPEAT, _Loop
from ._mutex import _Entry
from ._parallel import ParallelSteps, _SyncStep
from ._reasons import timeout_info
from ._steps import AsyncSteps, _AwaitStep, _SuccessStep
from ._throttle import _Section as _ThrottleSection
from ._throttle import _Waiter
from ._tool import AsyncTool, _first_runs, _live
from ._waitqueue import HELD, QUEUED

__all__ = ("dump_path", "format_text", "install_signal_handler", "main", "record_times",
           "snapshot", "write")

#: The version of the snapshot's format (its ``"format"`` key).
FORMAT = 1

#: The clock of the times the engine notes for the dump (a root's start, a queue wait).
_monotonic = time.monotonic


def record_times(on: bool = True) -> None:
    """From now on, note each root's first step and start, and when each flow joins a sync
    queue, so that snapshots show names and ages (``age_s``, ``for_s``, ``since``; ``None`` for
    what began before, and a root started before is named after its outermost active step). It
    costs a few attribute stores and a clock read per root and per queued entry;
    :func:`install_signal_handler` turns it on."""
    _instrument.record_times(on)


# -- finding the live roots --------------------------------------------------------------------


def _drivers() -> list[AsyncTool]:
    """The AsyncTools bound to this thread's running event loop and not over, oldest first:
    the public ones from the weak registry of live tools, and the private one of every
    ``promise()`` found in a frame of that function, on this thread's stack (a root still in its
    first run: the one a signal interrupted, or the one whose step takes the snapshot) or in the
    await chain of a task of the loop (a root that waits). A ``promise()`` pays nothing for it."""
    me = get_ident()
    found: dict[int, AsyncTool] = {}

    def take(tool: object) -> None:
        if type(tool) is AsyncTool and tool._thread == me and not tool._exited:
            found.setdefault(id(tool), tool)

    for ref in list(_live):
        take(ref())
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _PROMISE:
            take(frame.f_locals.get("driver"))
        frame = frame.f_back
    for coro in _task_coroutines():
        for driver in _waiting_promises(coro):
            take(driver)
    # The compiled build's promise() has no Python frame on the stack: its drivers in their
    # first run are listed in _first_runs.
    for tool in list(_first_runs):
        take(tool)
    return sorted(found.values(), key=_started)


def _waiting_promises(coro: Any) -> list[object]:
    """The drivers of the ``promise()`` calls in the await chain of a task's coroutine.

    The pure build's ``promise()`` frame holds its driver. The compiled build's coroutine has
    a frame with no locals: its driver is a referent of the closure the coroutine holds (two
    ``gc.get_referents()`` calls on objects of this chain: no scan of the collector's objects).
    """
    drivers: list[object] = []
    for obj in _chain(coro):
        if getattr(obj, "cr_code", None) is _PROMISE:
            frame = obj.cr_frame
            driver = None if frame is None else frame.f_locals.get("driver")
            if driver is None:
                driver = next((tool for held in gc.get_referents(obj)
                               if not hasattr(held, "cr_await")
                               for tool in gc.get_referents(held) if type(tool) is AsyncTool),
                              None)
            drivers.append(driver)
    return drivers


def _task_coroutines() -> list[Any]:
    """The coroutine of every task of the event loop running in this thread."""
    loop = asyncio._get_running_loop()
    if loop is not None:
        return [task.get_coro() for task in asyncio.all_tasks(loop)]
    trio = sys.modules.get("trio")
    if trio is None:
        return []
    try:
        root = trio.lowlevel.current_root_task()
    except RuntimeError:  # no trio run in this thread
        return []
    coros: list[Any] = []
    tasks = [] if root is None else [root]
    while tasks:
        task = tasks.pop()
        coros.append(task.coro)
        for nursery in task.child_nurseries:
            tasks.extend(nursery.child_tasks)
    return coros


#: The type of a ``repeat()``'s iterator (``iter(range(count))``).
_RANGE_ITERATOR = type(iter(range(1)))

#: The code of ``AsyncSteps.promise()``: a frame of it on the stack holds its driver.
_PROMISE = AsyncSteps.promise.__code__


def _started(tool: AsyncTool) -> float:
    main = tool._main
    return getattr(main, "since", math.inf) if main is not None else -math.inf


def _now(driver: AsyncTool) -> float | None:
    """The event loop's clock (the one deadlines use); works in a signal handler too."""
    try:
        if driver._library == "asyncio":
            return float(driver._threadsafe.time())
        return float(sys.modules["trio"].current_time())
    except Exception:  # pragma: no cover - no loop running in this thread any more
        return None


def snapshot() -> dict[str, Any]:
    """A snapshot of every live root of the event loop running in this thread (JSON-ready).

    Call it in the event loop's thread: from a step, a task, or a signal handler installed
    with :func:`install_signal_handler`. It only reads: the roots go on unchanged. Outside a
    running event loop it finds no roots.
    """
    roots: list[dict[str, Any]] = []
    backend = None
    now: float | None = None
    for driver in _drivers():
        backend = driver._library
        now = _now(driver)
        tool = "AsyncTool" if driver._public else "promise()"
        main = driver._main
        if main is not None and not main.finished:
            roots.append(_root(main.root, main, "promise()", driver, now))
        for root in list(driver._roots):
            flow = root._flow
            if flow is None or not flow.finished:
                roots.append(_root(root, flow, f"execute() in {tool} {_short_id(driver)}",
                                   driver, now))
    return {"format": FORMAT, "pid": os.getpid(), "backend": backend, "clock": now,
            "wall_time": time.time(), "engine": "compiled" if COMPILED else "pure",
            "roots": roots}


# -- one root ----------------------------------------------------------------------------------


def _short_id(obj: object) -> str:
    return f"0x{id(obj):x}"


def _root_name(root: AsyncSteps) -> str:
    """The name the root was given (``AsyncSteps(name=...)``), else the qualname of its first
    step (the same name instruments are given). The engine keeps a started root's first step
    only while the dump records (:func:`record_times`) or instruments are registered; a root
    started before that is named after its outermost active step."""
    if type(root._func) is str:
        return root._func
    flow = root._flow
    first = getattr(flow, "first", None)
    if first is None:
        if flow is not None:
            if len(flow.stack) > 1:
                return _describe(flow.stack[1]._func)[0]
            return "(no step)"
        queue = root._queue
        if not queue:
            return "(no step)"
        first = queue[0]  # not started yet
    return _describe(first[0] if type(first) is tuple else first)[0]


def _root_label(flow: _Flow) -> str:
    root = flow.root
    return f"{_root_name(root)}#{_short_id(root)}"


def _root(root: AsyncSteps, flow: _Flow | None, how: str, driver: AsyncTool,
          now: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": _root_name(root), "id": _short_id(root), "runs": how}
    since: float | None = getattr(flow, "since", None)
    # Its age: since it started (noted only while times are recorded: else None).
    out["age_s"] = None if since is None else _monotonic() - since
    if flow is None:
        out["state"] = "queued (not started)"
        out["frames"] = []
        return out
    if root._status is CANCELLING:
        out["state"] = "cancelling (its coroutines end first)"
    elif root._status is ROOT:
        out["state"] = _STATUS_NAMES[flow.stack[-1]._status] if len(flow.stack) > 1 else "running"
    else:
        out["state"] = _STATUS_NAMES[root._status]
    deadline = _flow_deadline(flow)
    if deadline != math.inf:
        out["deadline"] = _deadline(flow, deadline, now)
    out["frames"] = _frames(flow, driver, now)
    return out


def _deadline(flow: _Flow, deadline: float, now: float | None) -> dict[str, Any]:
    info: dict[str, Any] = {"at": deadline, "in_s": None if now is None else deadline - now}
    for frame in flow.stack:
        ext = frame._ext
        if ext is not None and ext.timer is not None and ext.deadline == deadline:
            args = ext.timer._args
            info["timeout"] = timeout_info(frame, args[1] if len(args) > 1 else math.nan)
            break
    return info


#: The frames of a section's own plumbing (a Limiter's section, a Throttle's entry): the dump
#: shows the user's steps, and the ``sync(...)`` frame already names the primitive.
_PLUMBING = (_LimiterSection, _ThrottleSection)


def _frames(flow: _Flow, driver: AsyncTool, now: float | None) -> list[dict[str, Any]]:
    return [_frame(frame, driver, now) for frame in flow.stack[1:]
            if type(frame._func) not in _PLUMBING]


def _frame(frame: AsyncSteps, driver: AsyncTool, now: float | None) -> dict[str, Any]:
    name, where, kind = _describe(frame._func)
    status = frame._status
    out: dict[str, Any] = {"step": name, "where": where, "status": _STATUS_NAMES[status]}
    if kind is not None:
        out["kind"] = kind
    ext = frame._ext
    if ext is None:
        return out
    if ext is not _WAIT_ONLY:
        loop = ext.loop
        if loop is not None:
            out["loop"] = {"label": loop.label, "iteration": _iteration(frame, loop.it)}
        if ext.timer is not None:
            args = ext.timer._args
            out["timeout"] = {
                "limit": timeout_info(frame, args[1] if len(args) > 1 else math.nan),
                "in_s": None if now is None else ext.deadline - now}
        if ext.on_exit is _Entry.leave:
            entry = ext.exit_arg
            if entry.state is HELD:
                out["holds"] = entry.mutex._label
        else:
            redis = _redis_entry(ext.on_exit, ext.exit_arg)
            if redis is not None:
                out["kind"] = f"sync({redis.prim._agent.what})"
                if redis.state is HELD:
                    out["holds"] = redis.prim._agent.what
        coro = ext.coro
        if status is CORO and coro is not None:
            out["coroutine"] = {
                "runs": "inline, in the task of promise()" if driver._inline is frame
                else "as a task",
                "awaiting": _await_chain(coro)}
        par = ext.par
        if par is not None:
            out["branches"] = [_branch(i, branch, driver, now)
                               for i, branch in enumerate(par.flows)]
    if status is WAIT:
        out["waits"] = _waits(frame, ext, now)
    return out


def _branch(index: int, flow: _Flow, driver: AsyncTool, now: float | None) -> dict[str, Any]:
    if not flow.stack:
        state = "completed" if flow.result_code is None else f"failed: {flow.result_code}"
        return {"branch": index, "state": state, "frames": []}
    state = "halted (its coroutines end)" if flow.finished else "running"
    return {"branch": index, "state": state, "frames": _frames(flow, driver, now)}


def _waits(frame: AsyncSteps, ext: Any, now: float | None) -> dict[str, Any]:
    """What a waiting step waits on."""
    if ext.on_exit is _Entry.leave and ext.exit_arg.state is QUEUED:
        entry = ext.exit_arg
        mutex = entry.mutex
        return _queued(mutex._label, list(mutex._queue), entry, getattr(entry, "since", None),
                       now, [_holder(key) for key in mutex._owners])
    redis = _redis_entry(ext.on_exit, ext.exit_arg)
    if redis is not None and redis.state is QUEUED:
        # The queue is on the Redis server: this process sees only its own entry.
        return {"on": f"{redis.prim._agent.what} (queued on the Redis server)", "since": None,
                "for_s": None, "behind": []}
    waiter = getattr(frame._func, "__self__", None)
    if type(waiter) is _Waiter and waiter.state is QUEUED:
        throttle = waiter.throttle
        out = _queued(throttle._label, list(throttle._queue), waiter,
                      getattr(waiter, "since", None), now, [])
        end = throttle._period_end
        out["next_period_in_s"] = None if end is None or now is None else end - now
        return out
    if ext is not _WAIT_ONLY and ext.par is not None:
        return {"on": "its parallel branches"}
    if ext is _WAIT_ONLY or ext.timer is None:
        return {"on": "wait_external()"}
    return {"on": "its set_timeout() timer (no other wake-up)"}


def _queued(what: str, queue: list[Any], entry: Any, since: float | None, now: float | None,
            holders: list[str]) -> dict[str, Any]:
    position = queue.index(entry) if entry in queue else None
    # ``since`` is time.monotonic(), noted only while times are recorded (record_times()).
    waited = None if since is None else _monotonic() - since
    return {"on": what, "queue_position": position, "queue_length": len(queue),
            "since": None if waited is None else time.time() - waited, "for_s": waited,
            "behind": holders}


def _redis_entry(hook: object, arg: object) -> Any:
    """The entry of a ``futoin_anyio.redis`` primitive a frame is in, if any (told by its exit
    hook: that module is optional, and not imported here)."""
    if getattr(hook, "__module__", None) == "futoin_anyio.redis._primitives" and \
            getattr(hook, "__qualname__", None) == "_Entry.leave":
        return arg
    return None


def _holder(key: object) -> str:
    """Who holds a section: a flow (its root and innermost step) or a plain task."""
    if isinstance(key, _Flow):
        if key.stack:
            step = _describe(key.stack[-1]._func)[0] if len(key.stack) > 1 else "(root)"
            branch = " (a parallel branch)" if key.par is not None else ""
            return f"root {_root_label(key)}{branch}, at step {step}"
        return f"a flow of root {_root_label(key)}"
    return f"task {key!r}"


def _iteration(frame: AsyncSteps, it: Any) -> int | None:
    """The current iteration of a ``repeat()`` or ``for_each()`` over a sequence (from the
    iterator's state, without consuming it); ``None`` where it cannot be told."""
    func = frame._func
    if type(func) is not _Loop or func.kind not in (_REPEAT, _FOR_EACH):
        return None
    try:
        reduced = it.__reduce__()
        if type(it) is _RANGE_ITERATOR:  # repeat(): iter(range(count))
            if reduced[2] is None:  # CPython >= 3.12: (iter, (the range left,), None)
                return int(reduced[1][0].start) - 1
            return int(reduced[2]) - 1
        if type(it) is enumerate:  # for_each() over a sequence: (enumerate, (it, next index))
            return int(reduced[1][1]) - 1
    except Exception:  # pragma: no cover - an iterator of another shape
        return None
    return None


def _chain(coro: Any) -> Iterator[Any]:
    """The objects of an await chain, outermost first: coroutines and generators (compiled
    ones too, which may have no frame), on through the wrapper an ``await`` of a coroutine of
    the other kind makes (its one referent), down to what the innermost one awaits."""
    obj = coro
    for _ in range(256):
        if obj is None:
            return
        yield obj
        if hasattr(obj, "cr_await") or hasattr(obj, "gi_yieldfrom"):
            obj = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
        elif type(obj).__name__ == "coroutine_wrapper":  # an await's wrapper: its coroutine
            inner = gc.get_referents(obj)
            obj = inner[0] if len(inner) == 1 else None
        else:
            return


def _awaited(coro: Any) -> tuple[list[tuple[Any, FrameType]], Any]:
    """The coroutines (or generators) of an await chain with their frames, outermost first, and
    what the innermost one awaits that has no frame (a future, a trap; ``None`` if nothing)."""
    links: list[tuple[Any, FrameType]] = []
    for obj in _chain(coro):
        frame = (getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
                 or getattr(obj, "ag_frame", None))
        if frame is None:
            return links, obj
        links.append((obj, frame))
    return links, None


def _await_chain(coro: Any) -> list[str]:
    """Where each coroutine of the chain waits: ``qualname at file:line``, outermost first."""
    links, last = _awaited(coro)
    out: list[str] = []
    for obj, frame in links:
        code = frame.f_code
        # A coroutine or generator has its own __qualname__ (code objects only from 3.11).
        qualname = getattr(obj, "__qualname__", None) or getattr(code, "co_qualname",
                                                                 code.co_name)
        out.append(f"{qualname} at {code.co_filename}:{frame.f_lineno}")
    if links and last is not None:
        out.append(f"<{type(last).__qualname__}>")
    return out


def _describe(func: object) -> tuple[str, str | None, str | None]:
    """A step's ``(name, file:line, kind)``: the user's callable behind the engine's wrappers."""
    kind: str | None = None
    if type(func) is _Entry:  # Mutex / Limiter sync()
        kind = f"sync({func.mutex._label})"
        func = func.func
        inner = getattr(func, "func", None)  # a Limiter's section: the Throttle's sync of func
        if inner is not None and not hasattr(func, "__code__"):
            func = inner
    elif _redis_entry(getattr(type(func), "leave", None), func) is not None:
        kind = f"sync({func.prim._agent.what})"  # type: ignore[attr-defined]
        func = func.func  # type: ignore[attr-defined]
    elif type(func) is _Loop:
        kind = ("loop", "repeat", "for_each")[func.kind]
        func = func.func
    elif type(func) is _SyncStep:
        kind = "sync"
        func = func.func
    elif type(func) is _SuccessStep:
        return "success_step()", None, None
    elif type(func) is _AwaitStep:
        aw = func.aw
        code = getattr(aw, "cr_code", None)
        if code is not None:
            return (f"await_({getattr(code, 'co_qualname', code.co_name)})",
                    f"{code.co_filename}:{code.co_firstlineno}", None)
        return f"await_({type(aw).__qualname__})", None, None
    owner = getattr(func, "__self__", None)
    if isinstance(owner, ParallelSteps):
        return "parallel()", None, None
    if type(owner) is _Waiter:
        return f"wait for the rate of {owner.throttle._label}", None, None
    while type(func) is partial:
        func = func.func
    if owner is not None and hasattr(func, "__func__"):
        func = func.__func__
    code = getattr(func, "__code__", None)
    if code is None:
        call = type(func).__dict__.get("__call__")  # a callable object of a class of its own
        code = getattr(call, "__code__", None)
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    where = None if code is None else f"{code.co_filename}:{code.co_firstlineno}"
    return str(name), where, kind


# -- text ----------------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f} s"


def format_text(snap: dict[str, Any]) -> str:
    """Render a :func:`snapshot` as a tree for people."""
    roots = snap.get("roots", [])
    lines = [f"futoin_anyio flow dump: {len(roots)} live root(s), pid {snap.get('pid')}, "
             f"backend {snap.get('backend') or '-'}, clock {snap.get('clock')}, "
             f"{snap.get('engine', 'pure')} engine"]
    for root in roots:
        lines.append(f"root {root['name']}#{root['id']}  [{root['state']}]  {root['runs']}, "
                     f"age {_seconds(root.get('age_s'))}")
        deadline = root.get("deadline")
        if deadline is not None:
            lines.append(f"  nearest deadline in {_seconds(deadline.get('in_s'))}: "
                         f"{deadline.get('timeout', '')}")
        _text_frames(root["frames"], lines, "  ")
    return "\n".join(lines) + "\n"


def _text_frames(frames: list[dict[str, Any]], lines: list[str], indent: str) -> None:
    for frame in frames:
        head = frame["step"]
        if frame.get("kind"):
            head = f"{frame['kind']}: {head}"
        where = f"  ({frame['where']})" if frame.get("where") else ""
        lines.append(f"{indent}- {head}{where}  [{frame['status']}]")
        sub = indent + "    "
        loop = frame.get("loop")
        if loop is not None:
            lines.append(f"{sub}loop label={loop['label']!r} iteration={loop['iteration']}")
        if frame.get("holds"):
            lines.append(f"{sub}holds {frame['holds']}")
        timeout = frame.get("timeout")
        if timeout is not None:
            lines.append(f"{sub}{timeout['limit']}, due in {_seconds(timeout['in_s'])}")
        waits = frame.get("waits")
        if waits is not None:
            text = f"{sub}waits on {waits['on']}"
            if "queue_position" in waits:
                text += (f": queue position {waits['queue_position']} of "
                         f"{waits['queue_length']}, for {_seconds(waits['for_s'])}")
            lines.append(text)
            for holder in waits.get("behind", []):
                lines.append(f"{sub}  behind {holder}")
            if waits.get("next_period_in_s") is not None:
                lines.append(f"{sub}  next period in {_seconds(waits['next_period_in_s'])}")
        coroutine = frame.get("coroutine")
        if coroutine is not None:
            lines.append(f"{sub}coroutine runs {coroutine['runs']}")
            lines.extend(f"{sub}  awaits in {line}" for line in coroutine["awaiting"])
        for branch in frame.get("branches", []):
            lines.append(f"{sub}branch {branch['branch']} [{branch['state']}]")
            _text_frames(branch["frames"], lines, sub + "  ")


# -- on a signal, and from another process -------------------------------------------------------


def dump_path(pid: int | None = None) -> str:
    """Where :func:`install_signal_handler` writes the JSON snapshot of process ``pid``."""
    return os.path.join(tempfile.gettempdir(),
                        f"futoin_anyio-dump-{os.getpid() if pid is None else pid}.json")


def write(path: str | None = None) -> str:
    """Take a :func:`snapshot` and write it as JSON to ``path`` (default :func:`dump_path`),
    atomically (a reader never sees half a file). Returns the path."""
    target = dump_path() if path is None else path
    data = json.dumps(snapshot(), indent=1, default=repr)
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(data)
    os.replace(tmp, target)
    return target


def install_signal_handler(signum: int | None = None, path: str | None = None,
                           echo: Callable[[str], object] | None = None) -> str:
    """On signal ``signum`` (default ``SIGUSR1``), write the snapshot to ``path`` (default
    :func:`dump_path`) and, with ``echo``, pass the text tree to it (e.g. ``print``).

    Call it in the main thread (Python's rule for signal handlers), where the event loop runs.
    The handler runs between two bytecodes of the loop's thread, so it sees the roots even when
    a step is stuck in a busy loop; it only reads them. Returns the path. Read the dump from
    another shell with ``python -m futoin_anyio.dump <pid>``.
    """
    if signum is None:
        signum = getattr(signal, "SIGUSR1", None)
        if signum is None:  # pragma: no cover - Windows
            raise RuntimeError("this platform has no SIGUSR1: pass signum=")
    target = dump_path() if path is None else path
    record_times()

    def handler(signum: int, frame: object) -> None:
        write(target)
        if echo is not None:
            with open(target, encoding="utf-8") as data:
                echo(format_text(json.load(data)))

    signal.signal(signum, handler)
    return target


def _catches(pid: int, signum: int) -> bool | None:
    """Does process ``pid`` catch ``signum``? From Linux's ``/proc/PID/status`` (``SigCgt``);
    ``None`` where that cannot be told."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        return None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m futoin_anyio.dump PID``: signal a running process and print its dump."""
    parser = argparse.ArgumentParser(
        prog="python -m futoin_anyio.dump",
        description="Print the flow dump of a process that called "
                    "futoin_anyio.dump.install_signal_handler().")
    parser.add_argument("pid", type=int, help="the process to dump")
    parser.add_argument("--json", action="store_true", help="print the JSON form")
    parser.add_argument("--signal", default="SIGUSR1", help="the signal it listens to")
    parser.add_argument("--path", help="where it writes the dump (default: its dump_path())")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for it")
    parser.add_argument("--force", action="store_true",
                        help="signal it even if it does not seem to catch the signal")
    args = parser.parse_args(argv)
    path = args.path or dump_path(args.pid)
    before = os.stat(path).st_mtime_ns if os.path.exists(path) else None
    signum = getattr(signal, args.signal, None)
    if not isinstance(signum, int):
        parser.error(f"unknown signal {args.signal}")
    if not args.force and _catches(args.pid, signum) is False:
        # The default action of SIGUSR1 ends the process: never send it blindly.
        print(f"process {args.pid} does not catch {args.signal}: it would end it. Call "
              "futoin_anyio.dump.install_signal_handler() in it (or pass --force).",
              file=sys.stderr)
        return 2
    os.kill(args.pid, signum)
    deadline = time.monotonic() + args.timeout
    while True:
        if os.path.exists(path) and os.stat(path).st_mtime_ns != before:
            break
        if time.monotonic() > deadline:
            print(f"no dump at {path} after {args.timeout} s: did process {args.pid} call "
                  "futoin_anyio.dump.install_signal_handler()?", file=sys.stderr)
            return 1
        time.sleep(0.02)
    with open(path, encoding="utf-8") as data:
        snap = json.load(data)
    sys.stdout.write(json.dumps(snap, indent=1) + "\n" if args.json else format_text(snap))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

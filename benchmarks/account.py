"""What a request costs: counts per request of the gateway's front, futoin against plain.

From the repository root::

    python -m benchmarks.account                     # 2,000 requests, both backends and paths
    python -m benchmarks.account -n 500 --backends trio --paths ok

Runs ``n`` requests of the ``ok`` path (the others are below) of ``benchmarks.gateway``'s front
in this process, one after the other in one task, through the front's own ``process_plain`` /
``process_futoin`` (admission, deadline, two backend calls in parallel, result). No sockets:
each backend call is in memory, one checkpoint (``trio.lowlevel.checkpoint()``, AnyIO's on
asyncio) and the answer, so the counts are those of the request logic and the event loop, not
of I/O or JSON. After a warm-up of 50 requests, each count is taken in a pass of its own over
``n`` requests, with the cyclic collector disabled:

* **scopes**: cancel scopes entered: calls of ``trio.CancelScope.__enter__`` on trio (AnyIO's
  trio scopes and trio's nurseries enter one too), of AnyIO's asyncio ``CancelScope.__enter__``
  (``type(anyio.CancelScope())``) on asyncio; seen by a ``sys.setprofile`` hook;
* **tasks**: tasks spawned: a ``trio.abc.Instrument``'s ``task_spawned`` on trio, a counting
  task factory of the asyncio loop on asyncio;
* **calls**: Python frames entered, ``sys.setprofile`` ``call`` events (a call of a Python
  function, and each resumption of a coroutine or generator); the event loop's own included;
* **objects**: objects created (every type, ``int`` and ``bytes`` included), counted in C by a
  ``PyRefTracer`` (Python 3.13+; compiled with cffi, so it needs a C compiler and setuptools,
  else ``n/a``);
* **cyclic**: objects left for the cyclic collector: what ``gc.collect()`` finds unreachable
  after the pass.

The ``retried`` path counts the same for requests whose backend ``b`` answers the retry code to
its first call (the front calls it again: the plain side in the same task, the futoin side
through the branch's error handler, which adds the step anew). The ``rejected`` path counts
requests the admission refuses at once (the front's limiter and admission let one request in
per 10^6 s: the warm-up's first; every counted request is refused).

``--time ROUNDS`` also times each side: per backend and path, ``ROUNDS`` alternating rounds
(the sides' order rotating), each a fresh event loop that runs a warm-up and then ``n``
requests, read with ``time.process_time()`` with the cyclic collector on; the median of the
rounds, in µs per request. The same request code as the gateway's front without its sockets and
JSON, so far less spread from run to run than ``benchmarks.gateway`` (a benchmark: nothing
checks a figure).

Everything is divided by ``n``. The counts are deterministic for a given Python, AnyIO and trio
(objects and calls may differ by a fraction of one per request between runs).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python benchmarks/account.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from benchmarks._gateway_front import IMPLS, LIMIT, Admission, Conn, Front
from benchmarks._gateway_load import RETRY_CODE, expected_value, value_a, value_b
from futoin_anyio import Limiter

BACKENDS = ("asyncio", "trio")
PATHS = ("ok", "retried", "rejected")
COUNTS = ("scopes", "tasks", "calls", "objects", "cyclic")
WARMUP = 50

_C_SOURCE = r"""
#include <Python.h>

static unsigned long long created;

static int count_created(PyObject *obj, PyRefTracerEvent event, void *data)
{
    (void)obj;
    (void)data;
    if (event == PyRefTracer_CREATE)
        created++;
    return 0;
}

static void tracer_start(void)
{
    PyGILState_STATE g = PyGILState_Ensure();
    created = 0;
    PyRefTracer_SetTracer(count_created, NULL);
    PyGILState_Release(g);
}

static unsigned long long tracer_stop(void)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyRefTracer_SetTracer(NULL, NULL);
    PyGILState_Release(g);
    return created;
}
"""
_CDEF = "static void tracer_start(void);\nstatic unsigned long long tracer_stop(void);\n"
_tracer: list[Any] = []


def object_counter() -> tuple[Any, str]:
    """The compiled object counter (``lib.tracer_start``/``tracer_stop``), or None and why not."""
    if _tracer:
        return _tracer[0], ""
    if sys.version_info < (3, 13):
        return None, "PyRefTracer needs Python 3.13+"
    try:
        from cffi import FFI

        from futoin_anyio.binary import require_build_tools

        require_build_tools()
        ffi = FFI()
        ffi.cdef(_CDEF)
        name = "_futoin_bench_objects"
        ffi.set_source(name, _C_SOURCE, py_limited_api=False,
                       define_macros=[("_CFFI_NO_LIMITED_API", "1")])  # PyRefTracer: full API
        path = ffi.compile(tmpdir=tempfile.mkdtemp(prefix="futoin-bench-objects-"))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # no compiler, no setuptools, ...
        return None, f"{type(e).__name__}: {e}"
    _tracer.append(module.lib)
    return module.lib, ""


class _Memory:
    """A backend link in memory: one checkpoint, then the answer (with ``retry``, the retry
    code to a first attempt)."""

    __slots__ = ("checkpoint", "name", "retry")

    def __init__(self, name: str, checkpoint: Callable[[], Any], retry: bool = False) -> None:
        self.name, self.checkpoint, self.retry = name, checkpoint, retry

    async def call(self, req: dict[str, Any], attempt: int) -> tuple[int, str | None]:
        await self.checkpoint()
        if self.retry and attempt == 1:
            return 0, RETRY_CODE
        rid = req["id"]
        return (value_a(rid) if self.name == "a" else value_b(rid, attempt)), None


def front_in_memory(impl: str, backend: str,
                    path: str = "ok") -> tuple[Callable[[int], Awaitable[None]], Any]:
    """The gateway front's request code of ``impl`` on ``backend``, its backends in memory:
    ``(requests, scope_class)``, where ``await requests(count)`` runs ``count`` more requests
    of ``path`` one after the other and checks each outcome, and ``scope_class`` is the cancel
    scope class whose entries count as scopes. Called in the event loop."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    front = Front(impl, backend)
    if path == "rejected":  # one entry per 10^6 s: the warm-up's first, then only refusals
        front.limiter = Limiter(concurrent=LIMIT, max_queue=0, rate=1, period_ms=10**9,
                                burst=0)
        front.admission = Admission(LIMIT, 1, 10**6, front.clock)
    if backend == "trio":
        import trio

        checkpoint: Callable[[], Any] = trio.lowlevel.checkpoint
        scope_class: Any = trio.CancelScope
    else:
        checkpoint = anyio.lowlevel.checkpoint
        scope_class = type(anyio.CancelScope())
    conn = Conn(send=None)  # type: ignore[arg-type]  # the account sends no reply
    conn.a, conn.b = _Memory("a", checkpoint), _Memory("b", checkpoint, path == "retried")
    process = front.process
    next_id = [0]

    async def requests(count: int) -> None:
        for _ in range(count):
            next_id[0] += 1
            rid = next_id[0]
            outcome, value = await process(conn, {"id": rid, "kind": "ok"})
            if path != "rejected":
                if outcome != path or value != expected_value(rid, path):
                    raise AssertionError(f"request {rid}: {outcome} {value}")
            elif outcome != "rejected" and rid > 1:
                raise AssertionError(f"request {rid}: {outcome}, not rejected")

    return requests, scope_class


async def run_requests(impl: str, backend: str, n: int, path: str = "ok") -> None:
    """A warm-up, then ``n`` requests of ``path`` through the front of ``impl`` (for
    ``benchmarks.instructions``, which counts a process running this)."""
    requests, _ = front_in_memory(impl, backend, path)
    await requests(WARMUP + n)


async def _account(impl: str, backend: str, n: int, path: str = "ok") -> dict[str, Any]:
    requests, scope_class = front_in_memory(impl, backend, path)
    await requests(WARMUP)
    gc.collect()
    gc.disable()
    try:
        out: dict[str, Any] = {"impl": impl, "backend": backend, "path": path, "n": n}
        # scopes and calls
        enter = scope_class.__enter__.__code__
        tally = {"calls": 0, "scopes": 0}

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                tally["calls"] += 1
                if frame.f_code is enter:
                    tally["scopes"] += 1

        sys.setprofile(profile)
        try:
            await requests(n)
        finally:
            sys.setprofile(None)
        out["calls"], out["scopes"] = tally["calls"] / n, tally["scopes"] / n
        # tasks
        out["tasks"] = await _count_tasks(backend, requests, n) / n
        # objects created
        lib, why = object_counter()
        if lib is None:
            out["objects"], out["objects_na"] = None, why
        else:
            lib.tracer_start()
            try:
                await requests(n)
            finally:
                created = lib.tracer_stop()
            out["objects"] = created / n
        # left for the cyclic collector
        gc.collect()
        await requests(n)
        out["cyclic"] = gc.collect() / n
        return out
    finally:
        gc.enable()


async def _count_tasks(backend: str, requests: Callable[[int], Any], n: int) -> int:
    spawned = [0]
    if backend == "trio":
        import trio

        class Spawned(trio.abc.Instrument):
            def task_spawned(self, task: trio.lowlevel.Task) -> None:
                spawned[0] += 1

        instrument = Spawned()
        trio.lowlevel.add_instrument(instrument)
        try:
            await requests(n)
        finally:
            trio.lowlevel.remove_instrument(instrument)
        return spawned[0]
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        spawned[0] += 1
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        await requests(n)
    finally:
        loop.set_task_factory(previous)
    return spawned[0]


async def _time(impl: str, backend: str, n: int, path: str) -> float:
    requests, _ = front_in_memory(impl, backend, path)
    await requests(WARMUP)
    start = time.process_time()
    await requests(n)
    return (time.process_time() - start) / n * 1e6


def timing(backend: str, n: int, rounds: int, path: str = "ok") -> dict[str, Any]:
    """CPU µs per request of each side: the median of ``rounds`` alternating rounds of ``n``."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    figures: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for round_ in range(rounds):
        order = IMPLS if round_ % 2 == 0 else IMPLS[::-1]
        for impl in order:
            figures[impl].append(anyio.run(_time, impl, backend, n, path, backend=backend))
    return {"backend": backend, "path": path, "n": n, "rounds": rounds,
            **{impl: statistics.median(values) for impl, values in figures.items()}}


def render_times(rows: list[dict[str, Any]]) -> str:
    """One line per backend and path: plain and futoin µs per request, and their ratio."""
    out = ["| backend | path | plain µs/request | futoin µs/request | futoin / plain |",
           "| --- | --- | ---: | ---: | ---: |"]
    for row in rows:
        plain, ours = row["plain"], row["futoin"]
        out.append(f"| {row['backend']} | {row['path']} | {plain:,.1f} | {ours:,.1f} | "
                   f"{ours / plain:.2f} |")
    return "\n".join(out)


def account(impl: str, backend: str, n: int, path: str = "ok") -> dict[str, Any]:
    """The counts per request of ``n`` requests of ``impl`` on ``backend`` taking ``path``."""
    result: dict[str, Any] = anyio.run(_account, impl, backend, n, path, backend=backend)
    return result


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def render(rows: list[dict[str, Any]]) -> str:
    """One line per backend, path and count: plain, futoin, futoin - plain."""
    out = ["| backend | path | per request | plain | futoin | futoin - plain |",
           "| --- | --- | --- | ---: | ---: | ---: |"]
    for backend, path in dict.fromkeys((r["backend"], r["path"]) for r in rows):
        sides = {r["impl"]: r for r in rows if r["backend"] == backend and r["path"] == path}
        plain, ours = sides["plain"], sides["futoin"]
        for count in COUNTS:
            p, f = plain[count], ours[count]
            diff = "n/a" if p is None or f is None else f"{f - p:+,.1f}"
            out.append(f"| {backend} | {path} | {count} | {_fmt(p)} | {_fmt(f)} | {diff} |")
    missing = {r["objects_na"] for r in rows if r.get("objects_na")}
    if missing:
        out += ["", "objects: n/a: " + "; ".join(sorted(missing))]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.account",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="requests per count and side")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="a comma-separated list of: " + ", ".join(PATHS))
    parser.add_argument("--json", type=Path,
                        help="write the counts here (with --time: the counts and the times)")
    parser.add_argument("--time", type=int, metavar="ROUNDS", default=0,
                        help="also time each side: CPU per request, median of ROUNDS rounds")
    args = parser.parse_args(argv)
    if args.time < 0:
        parser.error(f"--time must be >= 0 rounds, got {args.time}")
    backends, paths = args.backends.split(","), args.paths.split(",")
    rows = [account(impl, backend, args.n, path)
            for backend in backends for path in paths for impl in IMPLS]
    print(f"Per request of the gateway's front, in process, {args.n} requests per count "
          f"(Python {sys.version.split()[0]}, anyio {_version('anyio')}, "
          f"trio {_version('trio')})")
    print()
    print(render(rows))
    times = []
    if args.time:
        times = [timing(backend, args.n, args.time, path)
                 for backend in backends for path in paths]
        print()
        print(f"CPU per request (time.process_time(), the collector on), median of {args.time} "
              f"alternating rounds of {args.n} requests:")
        print()
        print(render_times(times))
    if args.json:
        payload: Any = rows if not times else {"counts": rows, "times": times}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


def _version(name: str) -> str:
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())

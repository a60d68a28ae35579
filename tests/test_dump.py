"""The flow dump: a service under load with a flow stuck in a Limiter queue (issue 26, part C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from backend_support import first_branch_inline

from futoin_anyio import AsyncSteps, AsyncTool, Limiter, Mutex, Throttle, dump
from futoin_anyio.testing import BACKENDS, backend

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


@pytest.fixture(autouse=True)
def _times() -> Iterator[None]:
    """Ages and queue waits are timed only once the dump asked for it."""
    dump.record_times()
    yield
    dump.record_times(False)


def _walk(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for frame in frames:
        out.append(frame)
        for branch in frame.get("branches", []):
            out.extend(_walk(branch["frames"]))
    return out


async def test_a_flow_stuck_in_a_limiter_queue() -> None:
    limiter = Limiter(concurrent=1, max_queue=10, name="db")
    holders: list[AsyncSteps] = []

    def query(asi: AsyncSteps) -> None:
        holders.append(asi)
        asi.wait_external()  # the back end never answers: the place stays taken

    def handle_request(asi: AsyncSteps, n: int) -> None:
        asi.set_timeout(60_000)
        asi.sync(limiter, query)

    async def fetch(asi: AsyncSteps) -> None:
        await anyio.sleep(3600)

    def fan_out(asi: AsyncSteps) -> None:
        asi.parallel().add(fetch).add(lambda asi: asi.wait_external())

    queued_at = time.monotonic()
    async with AsyncTool() as tool:
        roots = []
        for n in range(3):  # the load: the first holds the place, two wait behind it
            root = AsyncSteps(tool=tool)
            root.add(lambda asi, n=n: handle_request(asi, n))
            root.execute()
            roots.append(root)
            await anyio.sleep(0.01)
        side = AsyncSteps()
        side.add(fan_out)

        async with anyio.create_task_group() as tg:
            tg.start_soon(side.promise)
            await anyio.sleep(0.1)
            snap = dump.snapshot()
            text = dump.format_text(snap)
            tg.cancel_scope.cancel()
        json.dumps(snap)  # JSON-ready

        by_name = [r for r in snap["roots"] if r["name"].endswith("<lambda>")]
        assert len(by_name) == 3, text
        # The second root: which step, since when, behind whom.
        stuck = next(r for r in by_name if r["id"] == f"0x{id(roots[1]):x}")
        assert stuck["state"] == "waiting"
        assert "execute() in AsyncTool" in stuck["runs"]
        frames = stuck["frames"]
        assert frames[0]["step"].endswith("<lambda>")
        entry = frames[1]
        assert entry["kind"] == "sync(Limiter 'db')"
        assert entry["step"].endswith("query")
        assert entry["where"].startswith(__file__)
        waits = entry["waits"]
        assert waits["on"] == "Limiter 'db'"
        assert (waits["queue_position"], waits["queue_length"]) == (0, 2)
        # Real time (trio's clock is virtual here): since it joined the queue, not longer.
        assert 0 <= waits["for_s"] <= time.monotonic() - queued_at
        assert abs(time.time() - waits["for_s"] - waits["since"]) < 1
        assert len(waits["behind"]) == 1
        assert waits["behind"][0].startswith(f"root test_a_flow_stuck_in_a_limiter_queue."
                                             f"<locals>.<lambda>#0x{id(roots[0]):x}")
        assert waits["behind"][0].endswith("at step test_a_flow_stuck_in_a_limiter_queue."
                                           "<locals>.query")
        assert stuck["deadline"]["timeout"].startswith("set_timeout(60000 ms) of step ")
        assert 0 < stuck["deadline"]["in_s"] <= 60
        # The holder: inside the section, waiting for its back end.
        holder = next(r for r in by_name if r["id"] == f"0x{id(roots[0]):x}")
        assert holder["frames"][1]["holds"] == "Limiter 'db'"
        assert holder["frames"][2]["waits"] == {"on": "wait_external()"}
        # The promise() root: a parallel step, a coroutine branch with its await line.
        side_root = next(r for r in snap["roots"] if r["runs"] == "promise()")
        assert side_root["name"].endswith("fan_out")
        branches = side_root["frames"][1]["branches"]
        assert [b["state"] for b in branches] == ["running", "running"]
        coroutine = branches[0]["frames"][0]["coroutine"]
        # The first coroutine branch to start runs in the task of promise() (where it can).
        assert coroutine["runs"] == ("inline, in the task of promise()"
                                     if first_branch_inline() else "as a task")
        assert coroutine["awaiting"][0].startswith(
            "test_a_flow_stuck_in_a_limiter_queue.<locals>.fetch at " + __file__)
        assert "waits on Limiter 'db': queue position 0 of 2" in text
        assert "behind root " in text
        for root in roots:
            root.cancel()


async def test_inline_coroutine_loop_and_throttle() -> None:
    throttle = Throttle(1, period_ms=1000, name="api")

    async def slow(asi: AsyncSteps, i: int) -> None:
        await anyio.sleep(3600)

    def body(asi: AsyncSteps, i: int) -> None:
        asi.add(slow)

    def step(asi: AsyncSteps) -> None:
        asi.repeat(5, lambda asi, i: asi.add(lambda asi: slow(asi, i)) if i == 2 else None,
                   label="rows")

    seen: list[dict[str, Any]] = []

    async def throttled(asi: AsyncSteps) -> None:
        await anyio.sleep(1)

    async with anyio.create_task_group() as tg:
        root = AsyncSteps()
        root.add(step)
        tg.start_soon(root.promise)
        for _ in range(2):  # the second waits for the next period of the Throttle
            other = AsyncSteps()
            other.add(lambda asi: asi.sync(throttle, throttled))
            tg.start_soon(other.promise)
        await anyio.sleep(0.5)
        snap = dump.snapshot()
        seen.extend(snap["roots"])
        tg.cancel_scope.cancel()
    looped = next(r for r in seen if r["name"].endswith("step"))
    frames = looped["frames"]
    assert frames[1]["kind"] == "repeat"
    assert frames[1]["loop"] == {"label": "rows", "iteration": 2}
    coroutine = frames[-1]["coroutine"]
    assert coroutine["runs"] == "inline, in the task of promise()"
    assert "slow at " in coroutine["awaiting"][0]
    throttled_waits = [f["waits"] for r in seen for f in _walk(r["frames"]) if "waits" in f]
    assert any(w["on"] == "Throttle 'api'" and w["queue_position"] == 0
               for w in throttled_waits), throttled_waits


def test_no_roots_outside_an_event_loop() -> None:
    assert dump.snapshot()["roots"] == []
    assert "0 live root(s)" in dump.format_text(dump.snapshot())


def test_primitive_names_are_checked() -> None:
    with pytest.raises(TypeError, match="name must be a str"):
        Limiter(name=1)  # type: ignore[arg-type]
    assert Limiter(name="db") is not None
    assert Mutex(name="m").name == "m"
    assert Throttle(1, name="t").name == "t"


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
@pytest.mark.parametrize("which", BACKENDS)
def test_dump_a_running_demo_from_another_process(which: str, tmp_path: Path) -> None:
    """The demo installs the handler; ``python -m futoin_anyio.dump PID`` reads its dump."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    demo = subprocess.Popen(
        [sys.executable, "-m", "examples.service.dump_demo", "--backend", which],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert demo.stdout is not None
        assert demo.stdout.readline().strip() == "ready"
        out = subprocess.run(
            [sys.executable, "-m", "futoin_anyio.dump", str(demo.pid)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        assert "waits on Limiter 'db': queue position 0 of 1" in out.stdout, out.stdout
        assert "behind root " in out.stdout
        as_json = subprocess.run(
            [sys.executable, "-m", "futoin_anyio.dump", "--json", str(demo.pid)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert json.loads(as_json.stdout)["backend"] == which
    finally:
        demo.kill()
        demo.wait()
        if demo.stdout is not None:
            demo.stdout.close()


async def test_a_named_root_and_its_age() -> None:
    root = AsyncSteps(name="GET /orders")
    root.add(lambda asi: asi.wait_external())
    async with anyio.create_task_group() as tg:
        tg.start_soon(root.promise)
        await anyio.sleep(0.05)
        snap = dump.snapshot()
        tg.cancel_scope.cancel()
    (found,) = snap["roots"]
    assert found["name"] == "GET /orders"
    assert found["runs"] == "promise()"
    assert found["age_s"] is not None and found["age_s"] >= 0
    assert found["frames"][0]["waits"] == {"on": "wait_external()"}
    model = AsyncSteps(name="model")
    assert model.clone()._func == "model"  # a clone keeps the name


def test_root_name_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="name must be a str"):
        AsyncSteps(name=3)  # type: ignore[arg-type]


# coredis leaves request streams for the collector to close (as in tests/test_redis_limits.py).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_flow_queued_on_a_redis_limiter(redis_server: Any) -> None:
    coredis = pytest.importorskip("coredis")
    import uuid

    from futoin_anyio.redis import RedisLimiter

    async with coredis.Redis(host="127.0.0.1", port=redis_server.port) as client:
        limiter = RedisLimiter(client, f"dump-{uuid.uuid4().hex}", max_queue=5)

        def query(asi: AsyncSteps) -> None:
            asi.wait_external()

        def entries_of(snap: dict[str, Any]) -> list[dict[str, Any]]:
            return [f for r in snap["roots"] for f in r["frames"] if "kind" in f]

        def settled(entries: list[dict[str, Any]]) -> bool:
            return any(e.get("holds") for e in entries) and any(
                e.get("waits", {}).get("on", "").endswith("(queued on the Redis server)")
                for e in entries)

        async with anyio.create_task_group() as tg:
            for _ in range(2):
                root = AsyncSteps()
                root.add(lambda asi: asi.sync(limiter, query))
                tg.start_soon(root.promise)
            # Redis answers in real time (trio's clock here is virtual): poll until it has.
            for _ in range(1000):
                snap = dump.snapshot()
                if settled(entries_of(snap)):
                    break
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    entries = entries_of(snap)
    assert len(entries) == 2
    assert all(e["kind"].startswith("sync(RedisLimiter 'dump-") for e in entries), entries
    assert any(e.get("holds") for e in entries), entries
    assert any(e.get("waits", {}).get("on", "").endswith("(queued on the Redis server)")
               for e in entries), entries


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_the_command_never_signals_a_process_that_would_die_of_it() -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as victim:
        try:
            out = subprocess.run(
                [sys.executable, "-m", "futoin_anyio.dump", str(victim.pid)], cwd=ROOT,
                capture_output=True, text=True, timeout=60, check=False)
            assert out.returncode == 2
            assert "does not catch SIGUSR1" in out.stderr
            assert victim.poll() is None  # still alive
        finally:
            victim.kill()


async def test_no_times_unless_asked() -> None:
    dump.record_times(False)
    limiter = Limiter(concurrent=1, max_queue=5, name="db")
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            root = AsyncSteps()
            root.add(lambda asi: asi.sync(limiter, lambda asi: asi.wait_external()))
            tg.start_soon(root.promise)
        await anyio.sleep(0.01)
        snap = dump.snapshot()
        tg.cancel_scope.cancel()
    assert [r["age_s"] for r in snap["roots"]] == [None, None]
    waits = [f["waits"] for r in snap["roots"] for f in r["frames"] if "waits" in f
             and f["waits"]["on"] == "Limiter 'db'"]
    assert waits[0]["for_s"] is None and waits[0]["since"] is None
    assert "for ?" in dump.format_text(snap)


class _FakeClock:
    """The clock the engine notes a root's start with, and the dump reads ages against."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_roots_are_named_after_their_first_step_and_aged_from_their_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The name is the first step's even once it has completed (not the outermost active
    step's), and the age counts from the start, a long first burst included (not from the
    first wait). Roots of promise() and of an AsyncTool alike."""
    from futoin_anyio import _traced

    clock = _FakeClock()
    monkeypatch.setattr(_traced, "monotonic", clock)
    monkeypatch.setattr(dump, "_monotonic", clock)

    def authenticate(asi: AsyncSteps) -> None:
        clock.now += 5.0  # a long first step: 5 s before the root first waits

    def fetch(asi: AsyncSteps) -> None:
        asi.wait_external()

    def build() -> AsyncSteps:
        return AsyncSteps().add(authenticate).add(fetch)

    async with AsyncTool(), anyio.create_task_group() as tg:
        tg.start_soon(build().promise)
        await anyio.sleep(0.01)
        executed = build()
        executed.execute()
        await anyio.sleep(0.01)
        clock.now += 2.0
        snap = dump.snapshot()
        executed.cancel()
        tg.cancel_scope.cancel()
    roots = sorted(snap["roots"], key=lambda r: r["runs"])
    assert [r["runs"].split()[0] for r in roots] == ["execute()", "promise()"]
    for root in roots:
        assert root["name"].endswith(".authenticate"), root
        assert root["frames"][0]["step"].endswith(".fetch")  # the outermost active step
        assert root["age_s"] == pytest.approx(2.0 + 5.0 + (5.0 if "promise" in root["runs"]
                                                           else 0.0))


async def test_the_registry_of_live_tools_holds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live roots come from the weak registry of AsyncTool blocks and, for promise() roots, from
    the await chains of the loop's tasks, never from a scan of the collector's objects; a
    promise() adds nothing to the registry, waiting or not (in both builds), and its tool is
    freed by reference counting alone."""
    import gc
    import weakref

    from futoin_anyio._tool import _live

    def no_scan(*args: Any) -> list[Any]:
        raise AssertionError("the dump scanned the collector's objects")

    monkeypatch.setattr(gc, "get_objects", no_scan)
    tools: list[weakref.ref[AsyncTool]] = []

    def keep_tool(asi: AsyncSteps) -> None:
        tools.append(weakref.ref(asi.tool))

    before = set(_live)  # the collector may free earlier tests' tools meanwhile: compare entries
    await AsyncSteps().add(keep_tool).promise()
    assert tools[0]() is None  # freed by reference counting alone
    assert not set(_live) - before  # and it never had a registry entry
    blocked = AsyncSteps(name="blocked").add(lambda asi: asi.wait_external())
    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked.promise)
        await anyio.sleep(0.01)
        assert [r["name"] for r in dump.snapshot()["roots"]] == ["blocked"]
        # Found in its task's await chain (the compiled build's promise() has no frame there:
        # through the closure of its coroutine), unlisted.
        assert not set(_live) - before
        tg.cancel_scope.cancel()
    assert dump.snapshot()["roots"] == []


async def test_nested_promise_roots_are_found_through_the_await_chain() -> None:
    """A promise() awaited inside an async step of another promise() root, itself awaited in
    a task: both roots are found, the inner one deeper in the same await chain."""
    release = anyio.Event()

    async def inner_wait(asi: AsyncSteps) -> None:
        await release.wait()

    async def outer_step(asi: AsyncSteps) -> None:
        await AsyncSteps(name="inner").add(inner_wait).promise()

    async with anyio.create_task_group() as tg:
        tg.start_soon(AsyncSteps(name="outer").add(outer_step).promise)
        await anyio.sleep(0.01)
        names = sorted(r["name"] for r in dump.snapshot()["roots"])
        release.set()
    assert names == ["inner", "outer"]
    assert dump.snapshot()["roots"] == []


async def test_a_root_in_its_first_run_is_found_on_the_stack() -> None:
    """A promise() root in its first run (a step stuck in a busy loop that a signal
    interrupts, or a step taking the snapshot) is found on the stack of its thread."""
    from futoin_anyio._tool import _live

    snaps: list[dict[str, Any]] = []
    before = set(_live)  # the collector may free earlier tests' tools meanwhile: compare entries

    def look(asi: AsyncSteps) -> None:
        snaps.append(dump.snapshot())

    await AsyncSteps(name="instant").add(look).promise()
    assert not set(_live) - before  # never listed: it never waited
    (found,) = snaps[0]["roots"]
    assert found["name"] == "instant" and found["runs"] == "promise()"
    assert found["frames"][0]["step"].endswith(".look")


async def test_a_root_started_before_times_were_asked_is_named_after_its_active_step() -> None:
    dump.record_times(False)

    def first(asi: AsyncSteps) -> None:
        pass

    def second(asi: AsyncSteps) -> None:
        asi.wait_external()

    root = AsyncSteps().add(first).add(second)
    async with anyio.create_task_group() as tg:
        tg.start_soon(root.promise)
        await anyio.sleep(0.01)
        dump.record_times()
        (found,) = dump.snapshot()["roots"]
        tg.cancel_scope.cancel()
    assert found["name"].endswith(".second") and found["age_s"] is None

"""Instruments and OpenTelemetry spans (issue 26, part D)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from futoin_anyio import (
    AsyncSteps,
    AsyncTool,
    Errors,
    FutoInError,
    Instrument,
    Limiter,
    add_instrument,
    remove_instrument,
)
from futoin_anyio._frame import SWITCHES
from futoin_anyio.testing import BACKENDS, backend

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


class Recorder(Instrument):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def root_started(self, root: AsyncSteps, name: str, awaited: bool) -> None:
        self.events.append(("started", name.rpartition(".")[2], awaited))

    def root_ended(self, root: AsyncSteps, outcome: str | None) -> None:
        self.events.append(("ended", outcome))

    def step_failed(self, root: AsyncSteps, step: str, code: str, info: Any) -> None:
        self.events.append(("failed", step.rpartition(".")[2], code))

    def cancelled(self, root: AsyncSteps, reason: str) -> None:
        self.events.append(("cancelled", reason))

    def timed_out(self, root: AsyncSteps, info: str) -> None:
        self.events.append(("timeout", info.rpartition(".")[2]))

    def sync_waiting(self, root: AsyncSteps, what: str) -> None:
        self.events.append(("wait", what))

    def sync_entered(self, root: AsyncSteps, what: str) -> None:
        self.events.append(("enter", what))

    def sync_left(self, root: AsyncSteps, what: str) -> None:
        self.events.append(("leave", what))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    add_instrument(rec)
    yield rec
    remove_instrument(rec)
    assert not SWITCHES.active


async def test_nothing_is_called_without_instruments() -> None:
    assert not SWITCHES.active
    root = AsyncSteps()
    root.add(lambda asi: asi.success(1))
    assert await root.promise() == 1


async def test_root_error_timeout_and_sync(recorder: Recorder) -> None:
    limiter = Limiter(concurrent=1, max_queue=5, name="db")

    def first(asi: AsyncSteps) -> None:
        asi.sync(limiter, lambda asi: None)

    def timed(asi: AsyncSteps) -> None:
        asi.set_timeout(10)
        asi.wait_external()

    root = AsyncSteps()
    root.add(first)
    root.add(timed, lambda asi, code: asi.success())
    root.add(lambda asi: asi.error(Errors.NotFound if hasattr(Errors, "NotFound") else "NotFound"))
    with pytest.raises(FutoInError):
        await root.promise()
    assert recorder.events == [
        ("started", "first", True),
        ("enter", "Limiter 'db'"),
        ("leave", "Limiter 'db'"),
        ("timeout", "timed"),
        ("failed", "timed", Errors.Timeout),
        ("failed", "<lambda>", "NotFound"),
        ("ended", "NotFound"),
    ]


async def test_queue_wait_sibling_cancel_and_execute(recorder: Recorder) -> None:
    limiter = Limiter(concurrent=1, max_queue=5, name="db")

    async def slow(asi: AsyncSteps) -> None:
        await anyio.sleep(1)

    async def fails(asi: AsyncSteps) -> None:
        await anyio.sleep(0.5)
        asi.error("NotFound")

    async with AsyncTool() as tool:
        for _ in range(2):
            root = AsyncSteps(tool=tool)
            root.add(lambda asi: asi.sync(limiter, slow))
            root.execute()
        failing = AsyncSteps(tool=tool)
        failing.add(lambda asi: asi.parallel().add(slow).add(fails))
        failing.execute(lambda code: None)
    events = recorder.events
    assert events.count(("started", "<lambda>", False)) == 3
    assert ("wait", "Limiter 'db'") in events
    assert events.count(("enter", "Limiter 'db'")) == 2
    assert events.count(("leave", "Limiter 'db'")) == 2
    assert ("cancelled", "sibling branch failed with NotFound") in events
    assert events.count(("ended", None)) == 2
    assert ("ended", "NotFound") in events


async def test_rate_refusal_never_holds_the_place(recorder: Recorder) -> None:
    # The rate refuses the second entry while a place is free: it is refused before it holds
    # the place, so instruments see no enter/leave pair for it, and the place stays free.
    limiter = Limiter(concurrent=2, max_queue=0, rate=1, period_ms=1000, burst=0, name="db")
    for expected in (None, Errors.DefenseRejected):
        root = AsyncSteps()
        root.sync(limiter, lambda asi: None)
        if expected is None:
            await root.promise()
        else:
            with pytest.raises(FutoInError, match="DefenseRejected"):
                await root.promise()
        assert limiter.statistics().held == 0
    assert [(e[0], e[-1]) for e in recorder.events if e[0] != "started"] == [
        ("enter", "Limiter 'db'"),
        ("leave", "Limiter 'db'"),
        ("ended", None),
        ("failed", Errors.DefenseRejected),
        ("ended", Errors.DefenseRejected),
    ]
    assert limiter.statistics().rejected == 1


async def test_cancel_and_outer_cancellation(recorder: Recorder) -> None:
    await _cancel_while_waiting("client went away")
    with anyio.CancelScope() as scope:
        other = AsyncSteps()
        other.add(lambda asi: asi.wait_external())
        async with anyio.create_task_group() as tg:
            tg.start_soon(other.promise)
            await anyio.sleep(0.01)
            scope.cancel()
    assert recorder.events[:3] == [("started", "<lambda>", True),
                                   ("cancelled", "client went away"),
                                   ("ended", Errors.Cancelled)]
    assert recorder.events[3][0] == "started"
    assert recorder.events[4][0] == "cancelled"
    assert recorder.events[4][1].startswith("promise() is left by ")
    assert recorder.events[5] == ("ended", Errors.Cancelled)


async def test_per_tool_instruments_and_a_failing_instrument(
        caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder()

    class Broken(Instrument):
        def root_started(self, root: AsyncSteps, name: str, awaited: bool) -> None:
            raise RuntimeError("broken")

    broken = Broken()
    async with AsyncTool() as tool:
        add_instrument(rec, tool=tool)
        add_instrument(broken, tool=tool)
        assert SWITCHES.active
        root = AsyncSteps(tool=tool)
        root.add(lambda asi: None)
        root.execute()
        plain = AsyncSteps()  # a promise() root: not this tool's
        plain.add(lambda asi: None)
        await plain.promise()
    assert rec.events == [("started", "<lambda>", False), ("ended", None)]
    assert "instrument" in caplog.text and "broken" in caplog.text
    remove_instrument(rec, tool=tool)
    assert not SWITCHES.active


async def test_run_hooks_bracket_each_turn_of_an_executed_root(
        caplog: pytest.LogCaptureFixture) -> None:
    """before_root_run / after_root_run pair up around each turn of an executed root (its
    steps, its branches), never for a promise() root; one that raises is removed."""
    turns: list[str] = []

    class Turns(Instrument):
        def before_root_run(self, root: AsyncSteps) -> None:
            turns.append("(")

        def after_root_run(self, root: AsyncSteps) -> None:
            turns.append(")")

    class Broken(Instrument):
        calls = 0

        def before_root_run(self, root: AsyncSteps) -> None:
            Broken.calls += 1
            raise RuntimeError("broken tracer")

    def step(asi: AsyncSteps) -> None:
        turns.append("step")

    def waits(asi: AsyncSteps) -> None:
        asi.wait_external()
        asi.tool.immediate(asi.success)

    turns_instrument, broken = Turns(), Broken()
    add_instrument(turns_instrument)
    add_instrument(broken)
    try:
        async with AsyncTool():
            root = AsyncSteps().add(step).add(waits).add(
                lambda asi: asi.parallel().add(step).add(step))
            root.execute()
        await AsyncSteps().add(lambda asi: turns.append("promise")).promise()
    finally:
        remove_instrument(turns_instrument)
        remove_instrument(broken)
    assert Broken.calls == 1 and "broken tracer" in caplog.text
    assert "step" in turns and turns[-1] == "promise"
    depth = 0
    for mark in turns[:-1]:  # balanced, and every step inside a bracket
        depth += {"(": 1, ")": -1}.get(mark, 0)
        assert depth >= (1 if mark == "step" else 0)
    assert depth == 0
    assert turns.count("(") >= 3  # the root's first run, after its wait, the branches


def test_bad_registration() -> None:
    with pytest.raises(TypeError, match=r"instance of futoin_anyio\.Instrument"):
        add_instrument(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tool must be an AsyncTool"):
        add_instrument(Instrument(), tool=object())
    assert not SWITCHES.active


# -- OpenTelemetry -------------------------------------------------------------------------------


@pytest.fixture
def otel() -> Iterator[tuple[Any, Any, Any]]:
    """``(opentelemetry.trace, an in-memory exporter, a tracer)`` with our instrument on the
    exporter's provider, registered for the test."""
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra's test needs opentelemetry-sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from futoin_anyio.otel import OpenTelemetryInstrument

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument = OpenTelemetryInstrument(tracer_provider=provider)
    add_instrument(instrument)
    try:
        yield trace, exporter, provider.get_tracer("test")
    finally:
        remove_instrument(instrument)


async def test_opentelemetry_spans(otel: Any) -> None:
    trace, exporter, tracer = otel
    attempts: list[int] = []

    async def query(asi: AsyncSteps) -> None:
        with tracer.start_as_current_span("db.query"):  # the user's own I/O span
            await anyio.sleep(0.01)
        attempts.append(1)
        if len(attempts) == 1:
            asi.error("CommError")

    def retry(asi: AsyncSteps, code: str) -> None:
        if code == "CommError" and len(attempts) == 1:
            asi.add(query)  # one retry

    async def lookup(asi: AsyncSteps) -> None:
        await anyio.sleep(0.05)
        asi.error("NotFound")

    def handle_request(asi: AsyncSteps) -> None:
        asi.add(query, retry)
        asi.add(lambda asi: asi.parallel().add(lookup).add(query))

    with tracer.start_as_current_span("request"):
        root = AsyncSteps()
        root.add(handle_request)
        with pytest.raises(FutoInError, match="NotFound"):
            await root.promise()
        assert trace.get_current_span().get_span_context().span_id == (
            exporter.get_finished_spans()[-1].parent.span_id)

        await _cancel_while_waiting("client went away")

    spans = {span.name: span for span in exporter.get_finished_spans()}
    request = spans["request"]
    root_span = spans["test_opentelemetry_spans.<locals>.handle_request"]
    assert root_span.parent is not None
    assert root_span.parent.span_id == request.context.span_id
    queries = [s for s in exporter.get_finished_spans() if s.name == "db.query"]
    assert len(queries) == 3  # the first attempt, the retry, the branch
    assert all(q.parent is not None and q.parent.span_id == root_span.context.span_id
               for q in queries)
    assert root_span.status.status_code is trace.StatusCode.ERROR
    assert root_span.attributes is not None
    assert root_span.attributes["futoin.outcome"] == "NotFound"
    events = [(e.name, dict(e.attributes or {})) for e in root_span.events]
    assert events[0][0] == "futoin.error"
    assert events[0][1]["futoin.code"] == "CommError"
    assert ("futoin.cancel", {"futoin.reason": "sibling branch failed with NotFound"}) \
        in events
    assert [e for e in events if e[0] == "futoin.error"][-1][1]["futoin.code"] == "NotFound"
    cancel_span = next(s for s in exporter.get_finished_spans()
                       if s.name.endswith("<lambda>"))
    assert [(e.name, dict(e.attributes or {})) for e in cancel_span.events] == [
        ("futoin.cancel", {"futoin.reason": "client went away"})]
    assert cancel_span.attributes is not None
    assert cancel_span.attributes["futoin.outcome"] == Errors.Cancelled
    # Nothing is left current once the roots are over.
    assert not trace.get_current_span().get_span_context().is_valid


async def _swallow(root: AsyncSteps) -> None:
    with contextlib.suppress(FutoInError):
        await root.promise()


async def _cancel_while_waiting(reason: str) -> None:
    """A root awaited in a task, waiting for an external event, cancelled with ``reason``."""
    root = AsyncSteps()
    root.add(lambda asi: asi.wait_external())
    async with anyio.create_task_group() as tg:
        tg.start_soon(_swallow, root)
        await anyio.sleep(0.01)
        root.cancel(reason)


async def test_opentelemetry_span_is_current_in_the_steps_of_executed_roots(
        otel: Any) -> None:
    """A root started with ``execute()`` runs in its AsyncTool's task, yet the spans its steps
    open are children of its own span: in plain steps, in ``async def`` steps (tasks of the
    tool), in parallel branches and in an error handler run by a timer; two roots of one tool,
    each started under its own request span, never see each other's."""
    trace, exporter, tracer = otel
    def cache(asi: AsyncSteps) -> None:
        with tracer.start_as_current_span(f"cache {asi.state.request}"):
            pass

    async def query(asi: AsyncSteps) -> None:
        with tracer.start_as_current_span(f"query {asi.state.request}"):
            await anyio.sleep(0.01)

    def fork(asi: AsyncSteps) -> None:
        asi.parallel().add(query).add(cache)

    def slow(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.wait_external()

    def fallback(asi: AsyncSteps, code: str) -> None:
        assert code == Errors.Timeout
        with tracer.start_as_current_span(f"fallback {asi.state.request}"):
            pass
        asi.success()

    async with AsyncTool():
        for request in ("a", "b"):
            with tracer.start_as_current_span(f"request {request}"):
                root = AsyncSteps({"request": request}, name=f"GET /{request}")
                root.add(cache).add(query).add(fork).add(slow, fallback)
                root.execute()
        # Nothing of the roots is current in the task of the tool's block.
        assert not trace.get_current_span().get_span_context().is_valid
    assert not trace.get_current_span().get_span_context().is_valid

    spans = exporter.get_finished_spans()
    by_name = {span.name: span for span in spans}
    for request in ("a", "b"):
        root_span = by_name[f"GET /{request}"]
        assert root_span.parent is not None
        assert root_span.parent.span_id == by_name[f"request {request}"].context.span_id
        mine = [s for s in spans if s.name.endswith(f" {request}")
                and not s.name.startswith("request")]
        # cache (twice: a step and a branch), query (twice), fallback
        assert sorted(s.name.split()[0] for s in mine) == [
            "cache", "cache", "fallback", "query", "query"]
        for span in mine:
            assert span.parent is not None, span.name
            assert span.parent.span_id == root_span.context.span_id, span.name
        assert [e.name for e in root_span.events] == ["futoin.timeout", "futoin.error"]

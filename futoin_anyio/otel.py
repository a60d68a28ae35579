"""OpenTelemetry tracing of AsyncSteps roots (the extra ``futoin_anyio[otel]``).

::

    from futoin_anyio import add_instrument
    from futoin_anyio.otel import OpenTelemetryInstrument

    add_instrument(OpenTelemetryInstrument())      # every root: one span

Each root gets a span named after its first step, a child of the span current where the root
was started (``await root.promise()``, or ``root.execute()``). While a ``promise()`` root runs,
its span is the current one in the awaiting task, so spans your steps open (an HTTP client's, a
database driver's) nest inside it; its coroutine steps that run as tasks (parallel branches)
start with it current too. A root executed in an :class:`~futoin_anyio.AsyncTool` runs in the
tool's task: its span has the right parent, and :meth:`OpenTelemetryInstrument.span_of` gives it
to steps that want to open children of it.

Events on the span: ``futoin.error`` (a step failed: ``futoin.step``, ``futoin.code``,
``futoin.info``), ``futoin.timeout``, ``futoin.cancel`` (``futoin.reason``) and
``futoin.sync.wait`` / ``futoin.sync.enter`` / ``futoin.sync.leave`` (``futoin.sync``: the
primitive, e.g. ``Limiter 'db'``). A root that fails ends with status ``ERROR`` and its code as
the description; ``futoin.outcome`` is ``"success"`` or the code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from ._instrument import Instrument

if TYPE_CHECKING:
    from ._steps import AsyncSteps

__all__ = ("OpenTelemetryInstrument",)


class OpenTelemetryInstrument(Instrument):
    """An :class:`~futoin_anyio.Instrument` that makes one span per root.

    :param tracer_provider: the provider to take the tracer from (default: the global one).
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("futoin_anyio", tracer_provider=tracer_provider)
        # id(root) -> (its span, the context token of an awaited root's span)
        self._spans: dict[int, tuple[Span, object | None]] = {}

    def span_of(self, root: AsyncSteps) -> Span | None:
        """The span of a running root (``None`` once it ended, or if it was never seen)."""
        found = self._spans.get(id(root))
        return None if found is None else found[0]

    def root_started(self, root: AsyncSteps, name: str, awaited: bool) -> None:
        span = self._tracer.start_span(name)
        token = otel_context.attach(trace.set_span_in_context(span)) if awaited else None
        self._spans[id(root)] = (span, token)

    def root_ended(self, root: AsyncSteps, outcome: str | None) -> None:
        found = self._spans.pop(id(root), None)
        if found is None:
            return
        span, token = found
        span.set_attribute("futoin.outcome", "success" if outcome is None else outcome)
        if outcome is not None:
            span.set_status(Status(StatusCode.ERROR, outcome))
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]
        span.end()

    def _event(self, root: AsyncSteps, name: str, attributes: dict[str, Any]) -> None:
        found = self._spans.get(id(root))
        if found is not None:
            found[0].add_event(name, attributes)

    def step_failed(self, root: AsyncSteps, step: str, code: str, info: Any) -> None:
        self._event(root, "futoin.error", {"futoin.step": step, "futoin.code": code,
                                            "futoin.info": "" if info is None else str(info)})

    def cancelled(self, root: AsyncSteps, reason: str) -> None:
        self._event(root, "futoin.cancel", {"futoin.reason": reason})

    def timed_out(self, root: AsyncSteps, info: str) -> None:
        self._event(root, "futoin.timeout", {"futoin.info": info})

    def sync_waiting(self, root: AsyncSteps, what: str) -> None:
        self._event(root, "futoin.sync.wait", {"futoin.sync": what})

    def sync_entered(self, root: AsyncSteps, what: str) -> None:
        self._event(root, "futoin.sync.enter", {"futoin.sync": what})

    def sync_left(self, root: AsyncSteps, what: str) -> None:
        self._event(root, "futoin.sync.leave", {"futoin.sync": what})

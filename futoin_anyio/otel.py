"""OpenTelemetry tracing of AsyncSteps roots (the extra ``futoin_anyio[otel]``).

::

    from futoin_anyio import add_instrument
    from futoin_anyio.otel import OpenTelemetryInstrument

    add_instrument(OpenTelemetryInstrument())      # every root: one span

Each root gets a span named after it (its first step, unless given a name), a child of the span
current where the root was started (``await root.promise()``, or ``root.execute()``). While the
root's steps run, its span is the current one, so spans your steps open (an HTTP client's, a
database driver's) nest inside it: a ``promise()`` root runs in the awaiting task, where its span
is current until it ends; a root executed in an :class:`~futoin_anyio.AsyncTool` runs in the
tool's task, in turns with the tool's other roots, and its span (with the rest of the context
``execute()`` was called in: baggage...) is made current around each of its turns
(:meth:`~futoin_anyio.Instrument.before_root_run`). The tasks of ``async def`` steps (parallel
branches, executed roots) copy the context when they start, so its span is current in them too.

Events on the span: ``futoin.error`` (a step failed: ``futoin.step``, ``futoin.code``,
``futoin.info``), ``futoin.timeout``, ``futoin.cancel`` (``futoin.reason``) and
``futoin.sync.wait`` / ``futoin.sync.enter`` / ``futoin.sync.leave`` (``futoin.sync``: the
primitive, e.g. ``Limiter 'db'``). A root that fails ends with status ``ERROR`` and its code as
the description; ``futoin.outcome`` is ``"success"`` or the code.
"""

from __future__ import annotations

import threading
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
        # id(root) -> (its span, the context token of an awaited root's span, or the context an
        # executed root's turns run in)
        self._spans: dict[int, tuple[Span, Any, otel_context.Context | None]] = {}
        # The tokens of the turns under way, per thread (a turn never spans a task switch).
        self._turns = threading.local()

    def span_of(self, root: AsyncSteps) -> Span | None:
        """The span of a running root (``None`` once it ended, or if it was never seen)."""
        found = self._spans.get(id(root))
        return None if found is None else found[0]

    def root_started(self, root: AsyncSteps, name: str, awaited: bool) -> None:
        span = self._tracer.start_span(name)
        context = trace.set_span_in_context(span)  # over the caller's current context
        if awaited:  # current in the awaiting task until the root ends
            self._spans[id(root)] = (span, otel_context.attach(context), None)
        else:  # current around each turn of its steps in the tool's task
            self._spans[id(root)] = (span, None, context)

    def before_root_run(self, root: AsyncSteps) -> None:
        found = self._spans.get(id(root))
        token = None if found is None or found[2] is None else otel_context.attach(found[2])
        turns: list[Any] | None = getattr(self._turns, "tokens", None)
        if turns is None:
            turns = self._turns.tokens = []
        turns.append(token)

    def after_root_run(self, root: AsyncSteps) -> None:
        turns: list[Any] | None = getattr(self._turns, "tokens", None)
        if turns:
            token = turns.pop()
            if token is not None:
                otel_context.detach(token)

    def root_ended(self, root: AsyncSteps, outcome: str | None) -> None:
        found = self._spans.pop(id(root), None)
        if found is None:
            return
        span, token, _ = found
        span.set_attribute("futoin.outcome", "success" if outcome is None else outcome)
        if outcome is not None:
            span.set_status(Status(StatusCode.ERROR, outcome))
        if token is not None:
            otel_context.detach(token)
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

"""OpenTelemetry traces (the optional extra ``[otel]``): a producer span around each
enqueue and a consumer span around each run, linked through the W3C ``traceparent``
stored on the row, so that one trace spans request -> enqueue -> run.

The only module that imports ``opentelemetry``. Without it every function here is a
no-op that costs one flag check.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

from .. import __version__
from ..exceptions import Snooze
from ..values.error_text import describe
from ..values.validation import MAX_TRACEPARENT_LENGTH

if TYPE_CHECKING:
    from opentelemetry import trace
    from opentelemetry.trace import SpanContext
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# Set by _load(), which imports opentelemetry when a span is first asked for (or one of
# these is read): a process that never enqueues nor runs a job does not pay for it.
ENABLED: bool  # whether the [otel] extra is installed
_tracer: trace.Tracer
# The row's column holds a W3C traceparent, whatever propagators the site configured.
_propagator: TraceContextTextMapPropagator
_LAZY = ("ENABLED", "_tracer", "_propagator")


def _load() -> None:
    global ENABLED, _tracer, _propagator
    try:
        from opentelemetry import trace
        from opentelemetry.trace import (  # noqa: F401  (all of them, or none is used)
            Link,
            NonRecordingSpan,
            SpanContext,
            SpanKind,
            Status,
            StatusCode,
        )
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # the [otel] extra is not installed
        ENABLED = False
    else:
        _tracer = trace.get_tracer("django_cronqueue", __version__)
        _propagator = TraceContextTextMapPropagator()
        ENABLED = True


def __getattr__(name: str) -> Any:
    if name not in _LAZY or "ENABLED" in globals():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load()
    return globals()[name]


def enabled() -> bool:
    """``ENABLED``, importing opentelemetry first if nothing has yet."""
    try:
        return ENABLED
    except NameError:  # not loaded yet
        _load()
        return ENABLED


MESSAGING_SYSTEM = "django_cronqueue"


class TracedJob(Protocol):
    """What a consumer span reads of a claimed job (``claiming.ClaimedJob``)."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def traceparent(self) -> str: ...


class ProducerSpan:
    """The span of one enqueue: the ``traceparent`` its rows store ("" when there is no
    span to continue), and where the ids they got are reported."""

    def __init__(self, span: trace.Span | None = None) -> None:
        self._span = span
        self.traceparent = "" if span is None else traceparent_of(span)

    def set_message_ids(self, ids: Iterable[int | None]) -> None:
        """Record the id of the enqueued job (``messaging.message.id``); a batch's ids
        are not recorded, as the conventions have no attribute for many."""
        if self._span is None or not self._span.is_recording():
            return
        known = [str(pk) for pk in ids if pk is not None]
        if len(known) == 1:
            self._span.set_attribute("messaging.message.id", known[0])


_NO_PRODUCER_SPAN = nullcontext(ProducerSpan())
_NO_CONSUMER_SPAN: nullcontext[None] = nullcontext()


def producer_span(name: str, queue: str, count: int = 1) -> AbstractContextManager[ProducerSpan]:
    """A PRODUCER span ``send <queue>`` around an enqueue of ``count`` jobs of ``name``
    (either may be "" when the jobs of a workflow differ in it)."""
    if not enabled():
        return _NO_PRODUCER_SPAN
    return _producer_span(name, queue, count)


def consumer_span(job: TracedJob) -> AbstractContextManager[None]:
    """A CONSUMER span ``process <queue>`` around one run of ``job``: a child of the
    span that enqueued it (its stored ``traceparent``) and linked to it. An exception
    that escapes (other than ``Snooze``) is recorded and sets the status to ERROR."""
    if not enabled() or (not job.traceparent and not _tracing_configured()):
        # No span to continue and no tracer to record one: the span would be a no-op.
        return _NO_CONSUMER_SPAN
    return _consumer_span(job)


class _Provider:
    configured = False  # a tracer provider, once set, cannot be replaced: asked until then


def _tracing_configured() -> bool:
    """True once the site has set a tracer provider (the API's default is a proxy that
    records nothing until one is set)."""
    if not _Provider.configured:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        _Provider.configured = not isinstance(
            provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        )
    return _Provider.configured


def traceparent_of(span: trace.Span) -> str:
    """The W3C traceparent of ``span``, "" when its context is not valid."""
    from opentelemetry import trace

    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    value = carrier.get("traceparent", "")
    return value if len(value) <= MAX_TRACEPARENT_LENGTH else ""


def stored_span_context(traceparent: str) -> SpanContext | None:
    """The span context a row's ``traceparent`` names, or None (empty or malformed)."""
    if not traceparent:
        return None
    from opentelemetry import trace

    context = _propagator.extract({"traceparent": traceparent})
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


@contextmanager
def _producer_span(name: str, queue: str, count: int) -> Iterator[ProducerSpan]:
    from opentelemetry.trace import SpanKind

    attributes = _attributes("send", name, queue)
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with _tracer.start_as_current_span(
        _span_name("send", queue), kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield ProducerSpan(span)


@contextmanager
def _consumer_span(job: TracedJob) -> Iterator[None]:
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, Status, StatusCode

    attributes = _attributes("process", job.name, job.queue)
    attributes["messaging.message.id"] = str(job.id)
    attributes["cronqueue.job.attempt"] = job.attempts
    producer = stored_span_context(job.traceparent)
    # No stored span (a cron occurrence, a row from before tracing): the current span,
    # if any, is the parent.
    parent = None if producer is None else trace.set_span_in_context(NonRecordingSpan(producer))
    with _tracer.start_as_current_span(
        _span_name("process", job.queue),
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=None if producer is None else [Link(producer)],
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except Snooze:  # the handler asked to run later: not a failure
            raise
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, describe(exc)))
            raise


def _span_name(operation: str, queue: str) -> str:
    return f"{operation} {queue}" if queue else operation


def _attributes(operation: str, name: str, queue: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if queue:
        attributes["messaging.destination.name"] = queue
    if name:
        attributes["cronqueue.job.name"] = name
    return attributes

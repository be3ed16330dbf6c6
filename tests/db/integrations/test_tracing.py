"""OpenTelemetry traces (SPEC section 12): a producer span around each enqueue, a
consumer span around each run, linked through the traceparent stored on the row, so one
trace spans request -> enqueue -> run; nothing happens without OpenTelemetry."""

import importlib.util
import sys
from pathlib import Path

import pytest
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from django_cronqueue import jobs
from django_cronqueue.integrations import tracing
from django_cronqueue.models import CronSchedule, Job, JobStatus
from tests.factories import JobFactory
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db

record = test_jobs.record

# OpenTelemetry lets a process set its global tracer provider once: this module adds its
# exporter to the SDK provider once, whichever module set it.
EXPORTER = InMemorySpanExporter()
_exporter_added = False


@pytest.fixture(scope="module", autouse=True)
def _sdk_provider():
    global _exporter_added
    if not _exporter_added:
        if not isinstance(trace.get_tracer_provider(), TracerProvider):
            trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider), provider
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _exporter_added = True


@pytest.fixture(autouse=True)
def spans():
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def finished(kind=None):
    return [span for span in EXPORTER.get_finished_spans() if kind is None or span.kind == kind]


def only(kind):
    [span] = finished(kind)
    return span


def traceparent_of(span):
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def drain():
    for _ in range(20):
        if not jobs.tick().claimed:
            return
    raise AssertionError("still claiming after 20 ticks")


# --- request -> enqueue -> run ---------------------------------------------------------


def test_a_request_and_the_job_it_enqueued_make_one_trace(client):
    response = client.get("/order/", {"key": "order-7"})
    assert response.status_code == 200
    job = Job.objects.get(pk=response.json()["job"])

    jobs.tick()

    server = only(SpanKind.SERVER)
    producer = only(SpanKind.PRODUCER)
    consumer = only(SpanKind.CONSUMER)
    trace_id = server.context.trace_id
    assert producer.context.trace_id == consumer.context.trace_id == trace_id
    assert producer.parent.span_id == server.context.span_id
    assert consumer.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
    assert job.traceparent == traceparent_of(producer)
    assert SideEffect.objects.filter(key="order-7").exists()


def test_the_spans_follow_the_messaging_conventions():
    job = record.enqueue(key="a")
    jobs.tick()

    producer = only(SpanKind.PRODUCER)
    consumer = only(SpanKind.CONSUMER)
    assert producer.name == "send default"
    assert dict(producer.attributes) == {
        "messaging.system": "django_cronqueue",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "default",
        "cronqueue.job.name": "testapp.record",
        "messaging.message.id": str(job.pk),
    }
    assert consumer.name == "process default"
    assert dict(consumer.attributes) == {
        "messaging.system": "django_cronqueue",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "cronqueue.job.name": "testapp.record",
        "messaging.message.id": str(job.pk),
        "cronqueue.job.attempt": 1,
    }
    assert consumer.status.status_code == StatusCode.UNSET


def test_a_failing_handler_ends_its_span_in_error():
    job = test_jobs.fails_with_value_error.enqueue(message="no stock")
    jobs.tick()

    consumer = only(SpanKind.CONSUMER)
    assert consumer.status.status_code == StatusCode.ERROR
    assert consumer.status.description == "ValueError: no stock"
    [event] = consumer.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "no stock"
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED


def test_a_snooze_is_not_an_error():
    test_jobs.snoozes.enqueue(seconds=60)
    jobs.tick()

    consumer = only(SpanKind.CONSUMER)
    assert consumer.status.status_code == StatusCode.UNSET
    assert consumer.events == ()


def test_each_attempt_is_a_consumer_span_of_the_one_trace():
    test_jobs.always_fails.enqueue()  # retries=2, no backoff
    drain()

    producer = only(SpanKind.PRODUCER)
    consumers = finished(SpanKind.CONSUMER)
    assert [span.attributes["cronqueue.job.attempt"] for span in consumers] == [1, 2, 3]
    assert {span.parent.span_id for span in consumers} == {producer.context.span_id}
    assert {span.context.trace_id for span in consumers} == {producer.context.trace_id}


def test_eager_mode_runs_the_job_inside_the_same_trace():
    tracer = trace.get_tracer("tests")
    with override_settings(CRONQUEUE={"EAGER": True}), tracer.start_as_current_span("request"):
        job = record.enqueue(key="eager")

    assert job.status == JobStatus.SUCCEEDED
    producer = only(SpanKind.PRODUCER)
    consumer = only(SpanKind.CONSUMER)
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id


# --- every enqueue path ----------------------------------------------------------------


def test_enqueue_many_stores_the_traceparent_of_one_producer_span_on_every_row():
    created = jobs.enqueue_many(record, [{"key": "a"}, {"key": "b"}, {"key": "c"}])

    producer = only(SpanKind.PRODUCER)
    assert producer.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in producer.attributes
    rows = Job.objects.filter(name="testapp.record")
    assert len(created) == rows.count() == 3
    assert set(rows.values_list("traceparent", flat=True)) == {traceparent_of(producer)}

    drain()
    consumers = finished(SpanKind.CONSUMER)
    assert len(consumers) == 3
    assert {span.parent.span_id for span in consumers} == {producer.context.span_id}


def test_a_chain_stores_the_traceparent_of_one_producer_span_on_every_job():
    chain = jobs.chain(record.s(key="fetch"), record.s(key="parse"), record.s(key="store"))
    saved = chain.enqueue()

    producer = only(SpanKind.PRODUCER)
    assert producer.name == "send default"
    assert producer.attributes["messaging.batch.message_count"] == 3
    assert {Job.objects.get(pk=job.pk).traceparent for job in saved} == {traceparent_of(producer)}


def test_a_group_stores_the_traceparent_on_its_members_and_callbacks():
    members = [record.s(key="m1"), test_jobs.noop.s()]
    batch = jobs.group(members).then(test_jobs.collect_batch.s(key="then")).enqueue()

    producer = only(SpanKind.PRODUCER)
    assert producer.attributes["messaging.batch.message_count"] == 3
    assert "cronqueue.job.name" not in producer.attributes  # the jobs differ
    rows = Job.objects.filter(pk__in=[*batch.member_ids, batch.then_job_id])
    assert rows.count() == 3
    assert set(rows.values_list("traceparent", flat=True)) == {traceparent_of(producer)}


def test_a_job_enqueued_after_others_stores_the_traceparent():
    first = record.enqueue(key="first")
    EXPORTER.clear()
    waiting = record.using(after=[first]).enqueue(key="second")

    producer = only(SpanKind.PRODUCER)
    waiting.refresh_from_db()
    assert waiting.traceparent == traceparent_of(producer)


def test_a_dynamic_schedules_manual_run_stores_the_traceparent():
    schedule = CronSchedule.objects.create_dynamic(
        name="tests.nightly", job=record, expression="0 3 * * *", payload={"key": "nightly"}
    )
    EXPORTER.clear()
    run = schedule.run_now()

    producer = only(SpanKind.PRODUCER)
    run.refresh_from_db()
    assert run.traceparent == traceparent_of(producer)


def test_a_cron_occurrence_has_no_producer_span_and_runs_in_a_new_trace():
    row = JobFactory(traceparent="")  # as the scheduler writes an occurrence
    jobs.tick()

    assert finished(SpanKind.PRODUCER) == []
    consumer = only(SpanKind.CONSUMER)
    assert consumer.parent is None
    assert consumer.links == ()
    assert consumer.attributes["messaging.message.id"] == str(row.pk)


# --- what must not break ---------------------------------------------------------------


@pytest.mark.parametrize(
    "stored",
    ["garbage", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", "00-abc-def-01", "x" * 128],
)
def test_a_bad_stored_traceparent_starts_a_new_trace(stored):
    row = JobFactory(traceparent=stored)
    jobs.tick()

    consumer = only(SpanKind.CONSUMER)
    assert consumer.parent is None
    assert consumer.links == ()
    row.refresh_from_db()
    assert row.status == JobStatus.SUCCEEDED


def test_without_an_sdk_the_traceparent_is_empty_or_the_incoming_one(monkeypatch):
    # The API without an SDK: its tracer makes no span and hands on the current one.
    monkeypatch.setattr(tracing, "_tracer", trace.NoOpTracer())
    job = record.enqueue(key="no-sdk")
    assert job.traceparent == ""

    incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    context = TraceContextTextMapPropagator().extract({"traceparent": incoming})
    with trace.use_span(trace.get_current_span(context)):
        passed_on = record.enqueue(key="passed-on")
    assert passed_on.traceparent == incoming

    drain()
    assert finished() == []
    assert SideEffect.objects.filter(key__in=["no-sdk", "passed-on"]).count() == 2


def test_without_opentelemetry_nothing_is_traced(monkeypatch):
    monkeypatch.setattr(tracing, "ENABLED", False)
    job = record.enqueue(key="off")
    jobs.enqueue_many(record, [{"key": "off-1"}, {"key": "off-2"}])
    drain()

    assert finished() == []
    assert set(Job.objects.values_list("traceparent", flat=True)) == {""}
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_the_module_loads_and_does_nothing_when_opentelemetry_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails
    path = Path(tracing.__file__)
    spec = importlib.util.spec_from_file_location(
        "django_cronqueue.integrations.tracing_without_otel", path
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert module.ENABLED is False
    with module.producer_span("testapp.record", "default") as producer:
        producer.set_message_ids([1])
    assert producer.traceparent == ""
    with pytest.raises(ValueError, match="raised inside"), module.consumer_span(JobFactory()):
        raise ValueError("raised inside")

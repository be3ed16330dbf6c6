"""Sensitive arguments never in clear outside the handler (SPEC section 16): a known
secret goes through enqueue, a run that succeeds, one that fails and one that returns it,
and is then looked for on every surface: the rows, the admin, logs and runjobs' output,
error texts, signal receivers, traces, metrics, ``cronqueue_status``. The handlers prove
they got it in clear by recording its digest."""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from urllib.parse import quote_plus

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_cronqueue import jobs, signals
from django_cronqueue.exceptions import InvalidPayload
from django_cronqueue.models import CronSchedule, Job
from tests.processes import wait_until
from tests.sensitive_keys import KEY_A, KEY_C, SECRET, registered, unregistered_handles
from tests.testapp.models import SideEffect
from tests.testapp.sensitive_jobs import charge, charge_async, declined, digest, everything
from tests.urls import METRICS_TOKEN

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

HANDLES = unregistered_handles()
EMAIL = "someone-SECRET-mail@example.com"
SECRETS = (SECRET, EMAIL)
KEYS = {"ENCRYPTION_KEYS": [KEY_A]}
WORKER = {**KEYS, "DISCOVER": ["jobs", "sensitive_jobs"], "POLL_INTERVAL": 0.2, "LEASE": 5}

# OpenTelemetry lets a process set its tracer provider once: the exporter joins it.
EXPORTER = InMemorySpanExporter()
_exporter_added = False


@pytest.fixture(autouse=True)
def sensitive_defined():
    with registered(HANDLES), override_settings(CRONQUEUE={**KEYS, "POLL_INTERVAL": 0.2}):
        yield


@pytest.fixture
def spans():
    global _exporter_added
    if not _exporter_added:
        if not isinstance(trace.get_tracer_provider(), TracerProvider):
            trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider), provider
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _exporter_added = True
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


@pytest.fixture
def received():
    """What every signal's receivers get, as text."""
    seen: list[str] = []

    def receiver(sender, **kwargs):
        job = kwargs.get("job")
        seen.append(repr({**kwargs, "job": None, "payload": getattr(job, "payload", None)}))

    every = [getattr(signals, name) for name in dir(signals) if name.startswith("job_")]
    for signal in every:
        signal.connect(receiver, dispatch_uid="sensitive-surfaces")
    yield seen
    for signal in every:
        signal.disconnect(dispatch_uid="sensitive-surfaces")


def assert_clear_of_secrets(surface: str, text: str) -> None:
    assert text, f"{surface}: nothing to look at"
    for secret in SECRETS:
        at = text.find(secret)
        assert at < 0, f"{surface} shows a secret: ...{text[max(at - 300, 0) : at + 100]}..."


def rows_text() -> str:
    return json.dumps(list(Job.objects.values()), default=str) + json.dumps(
        list(CronSchedule.objects.values()), default=str
    )


def enqueue_all() -> dict[str, Job]:
    return {
        "charge": charge.enqueue(order_id=7, card_token=SECRET, email=EMAIL),
        "everything": everything.enqueue(email=EMAIL),
        "declined": declined.enqueue(card_token=SECRET),
        "async": charge_async.enqueue(card_token=SECRET),
    }


def assert_the_handlers_saw_clear_values() -> None:
    keys = set(SideEffect.objects.values_list("key", flat=True))
    assert {digest(SECRET + EMAIL), digest(EMAIL), digest(SECRET)} <= keys


# --- in this process: every surface but a worker's own output ---------------------------


@dataclass
class Ran:
    """The jobs run by one tick, with what each surface captured meanwhile."""

    made: dict[str, Job]
    schedule: CronSchedule
    logs: str
    received: list[str]
    spans: InMemorySpanExporter


@pytest.fixture
def ran(spans, received, caplog) -> Ran:
    schedule = CronSchedule.objects.create_dynamic(
        name="sensitive.daily",
        job="sensitive.charge",
        payload={"order_id": 1, "card_token": SECRET, "email": EMAIL},
        expression="0 3 * * *",
    )
    with caplog.at_level(logging.DEBUG):
        made = enqueue_all()
        jobs.tick()
    assert_the_handlers_saw_clear_values()
    statuses = {key: Job.objects.get(pk=job.pk).status for key, job in made.items()}
    assert statuses == {
        "charge": "succeeded",
        "everything": "succeeded",
        "declined": "pending",  # its retry waits, with its values
        "async": "succeeded",
    }
    return Ran(made, schedule, caplog.text, received, spans)


def test_the_rows_hold_no_secret(ran):
    assert_clear_of_secrets("the rows", rows_text())


def test_the_logs_hold_no_secret(ran):
    assert_clear_of_secrets("the logs", ran.logs)


def test_signal_receivers_get_no_secret(ran):
    assert_clear_of_secrets("signal receivers", "\n".join(ran.received))


def test_traces_hold_no_secret(ran):
    assert_clear_of_secrets("traces", spans_text(ran.spans))


def test_the_last_error_holds_no_secret(ran):
    row = Job.objects.get(pk=ran.made["declined"].pk)
    assert_clear_of_secrets("the last error", row.last_error + row.traceback)


def test_the_admin_shows_no_secret(ran):
    assert_clear_of_secrets("the admin", admin_pages(ran.made, ran.schedule))


def test_metrics_show_no_secret(ran):
    assert_clear_of_secrets("metrics", metrics_text())


def test_cronqueue_status_shows_no_secret(ran):
    assert_clear_of_secrets("cronqueue_status", status_text())


def test_cronqueue_schedules_shows_no_secret(ran):
    assert_clear_of_secrets("cronqueue_schedules", schedules_text())


def test_refused_values_are_named_by_their_key_not_shown():
    with pytest.raises(InvalidPayload) as caught:
        charge.enqueue(order_id=1, card_token={SECRET: {1, 2}}, email=EMAIL)
    assert "'card_token'" in str(caught.value)
    assert_clear_of_secrets("InvalidPayload", str(caught.value))
    with pytest.raises(TypeError) as caught_type:
        charge.enqueue(order_id=1, card_token=float("nan"), email=EMAIL, extra=SECRET)
    assert_clear_of_secrets("TypeError", str(caught_type.value))


def spans_text(exporter: InMemorySpanExporter) -> str:
    found = exporter.get_finished_spans()
    assert found
    return json.dumps(
        [
            {
                "name": span.name,
                "attributes": dict(span.attributes or {}),
                "events": [[e.name, dict(e.attributes or {})] for e in span.events],
                "status": str(span.status.description),
            }
            for span in found
        ],
        default=str,
    )


def admin_pages(made: dict[str, Job], schedule: CronSchedule) -> str:
    client = Client()
    client.force_login(User.objects.create_superuser("boss", "b@example.com", "pw"))
    changelist = reverse("admin:django_cronqueue_job_changelist")
    pages = [changelist]
    pages += [reverse("admin:django_cronqueue_job_change", args=[job.pk]) for job in made.values()]
    pages += [
        reverse("admin:django_cronqueue_cronschedule_changelist"),
        reverse("admin:django_cronqueue_cronschedule_change", args=[schedule.pk]),
    ]
    texts = []
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        texts.append(response.content.decode())
    for secret in SECRETS:  # a search for a secret finds nothing (the box echoes the words)
        found = client.get(changelist, {"q": secret}).content.decode()
        assert "0 results" in found
        echoes = (f'value="{secret}"', f"q={quote_plus(secret)}", f"q={secret}")
        for echo in echoes:
            found = found.replace(echo, "")
        texts.append(found)
    change = reverse("admin:django_cronqueue_job_change", args=[made["charge"].pk])
    assert "[erased]" in client.get(change).content.decode()
    pending = reverse("admin:django_cronqueue_job_change", args=[made["declined"].pk])
    assert "[encrypted]" in client.get(pending).content.decode()
    return "\n".join(texts)


def metrics_text() -> str:
    response = Client().get(reverse("metrics-token"), HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200
    return response.content.decode()


def status_text() -> str:
    text, as_json = io.StringIO(), io.StringIO()
    call_command("cronqueue_status", stdout=text)
    call_command("cronqueue_status", "--json", stdout=as_json)
    return text.getvalue() + as_json.getvalue()


def schedules_text() -> str:
    out = io.StringIO()
    call_command("cronqueue_schedules", "--json", stdout=out)
    return out.getvalue()


# --- a real worker in each pool ---------------------------------------------------------


@pytest.mark.parametrize("pool", ["threads", "processes", "asyncio"])
def test_a_worker_in_each_pool_runs_them_without_showing_a_secret(runjobs, tmp_path, pool):
    signal_log = tmp_path / "signals.jsonl"
    made = enqueue_all()
    worker = runjobs.start(
        "--pool",
        pool,
        settings=WORKER,
        env={"CRONQUEUE_TEST_LOG_LEVEL": "DEBUG", "CRONQUEUE_TEST_SIGNAL_LOG": str(signal_log)},
    )
    ended = ["charge", "everything", "async"]
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=[made[k].pk for k in ended], status="succeeded").count()
            == len(ended)
            and Job.objects.filter(pk=made["declined"].pk, attempts=1, status="pending").exists()
        ),
        timeout=60,
    )
    assert runjobs.stop(worker) == 0, runjobs.log(worker)
    assert_the_handlers_saw_clear_values()
    charged = Job.objects.get(pk=made["charge"].pk)
    assert charged.payload["card_token"] == {"$encrypted": None}
    assert Job.objects.get(pk=made["declined"].pk).decrypted_payload() == {"card_token": SECRET}
    assert_clear_of_secrets("the rows", rows_text())
    assert_clear_of_secrets("runjobs' output", runjobs.log(worker))
    assert "DEBUG" in runjobs.log(worker)  # the debug lines were written, and looked at
    assert_clear_of_secrets("the worker's signal receivers", signal_log.read_text())


def test_a_worker_without_the_key_fails_the_job_at_once_naming_it(runjobs):
    job = declined.enqueue(card_token=SECRET)  # retries=1: not used for this error
    worker = runjobs.start("--pool", "processes", settings={**WORKER, "ENCRYPTION_KEYS": [KEY_C]})
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="failed").exists(), timeout=60)
    assert runjobs.stop(worker) == 0, runjobs.log(worker)
    row = Job.objects.get(pk=job.pk)
    assert row.attempts == 1
    assert row.last_error.startswith(f"DecryptionError: Job sensitive.declined #{job.pk}")
    assert "'card_token'" in row.last_error
    assert not SideEffect.objects.exists()  # the handler never ran
    assert row.decrypted_payload() == {"card_token": SECRET}  # kept for a retry
    assert_clear_of_secrets("the error", row.last_error + row.traceback)
    assert_clear_of_secrets("runjobs' output", runjobs.log(worker))

"""Bad input: oversized payloads, unicode everywhere, text no database can store.

Covered elsewhere, not repeated: every system check id (tests/unit/test_checks.py),
bad definitions (tests/unit/definitions/test_registry.py), non-JSON and unbindable payloads, the
configurable size limit and dedupe keys that differ only in case or trailing space
(tests/db/enqueueing/test_enqueue.py), rows whose name no code defines being flagged in the admin
(tests/admin/test_job_admin.py::test_jobs_no_code_defines_are_flagged) and never
claimed (tests/db/worker/test_tick.py, and tests/reliability/test_security.py with a real
worker).
"""

from __future__ import annotations

import json
import unicodedata

import pytest

from django_cronqueue import jobs
from django_cronqueue.conf import get_settings
from django_cronqueue.models import Job
from tests.refusals import refusing
from tests.reliability import jobs as rel

from .conftest import marks, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TEXT = (
    "emoji 🚀👩‍👩‍👧‍👦🏳️‍🌈 · RTL שלום עולם مرحبا بالعالم · combining "
    + unicodedata.normalize("NFD", "é")
    + " · astral 𠜎𝄞 · zero-width \u200b\u200d · BOM \ufeff · separators \u2028\u2029 · ‮override‬"
)
NESTED = {"ключ": ["値", {"🔑": "ℵ", "נתון": [1, 2.5, None, True]}], "": "empty key"}
QUEUE = "очередь-🚀"
DEDUPE = "ключ-🔑-שלום"


def test_unicode_round_trips_through_a_real_worker(runjobs):
    """Names, queues, payloads, dedupe keys, results and errors, on every database."""
    ok = jobs.enqueue(
        rel.UNICODE_NAME, {"text": TEXT, "nested": NESTED}, queue=QUEUE, dedupe_key=DEDUPE
    )
    again = jobs.enqueue(rel.UNICODE_NAME, {"text": "other", "nested": {}}, dedupe_key=DEDUPE)
    assert again.pk == ok.pk  # same name and key: the same job
    # Keys equal under a lenient collation are distinct keys.
    nfc = jobs.enqueue(rel.UNICODE_NAME, {"text": "x", "nested": {}}, dedupe_key="é")
    nfd = jobs.enqueue(
        rel.UNICODE_NAME,
        {"text": "x", "nested": {}},
        dedupe_key=unicodedata.normalize("NFD", "é"),
    )
    pizza = jobs.enqueue(rel.UNICODE_NAME, {"text": "🍕", "nested": {}}, dedupe_key="🍕")
    burger = jobs.enqueue(rel.UNICODE_NAME, {"text": "🍔", "nested": {}}, dedupe_key="🍔")
    assert len({nfc.pk, nfd.pk, pizza.pk, burger.pk}) == 4
    failing = jobs.enqueue(
        rel.UNICODE_NAME, {"text": TEXT, "nested": NESTED, "fail": True}, queue=QUEUE
    )

    worker = runjobs.start("--burst", "--queue", QUEUE, "--queue", "default")
    assert worker.wait(60) == 0, runjobs.log(worker)

    row = Job.objects.get(pk=ok.pk)
    assert (row.name, row.queue, row.dedupe_key, row.status) == (
        rel.UNICODE_NAME,
        QUEUE,
        DEDUPE,
        "succeeded",
    )
    assert row.payload == {"text": TEXT, "nested": NESTED}
    assert row.result == {"text": TEXT, "nested": NESTED}
    assert Job.objects.filter(dedupe_key=DEDUPE).count() == 1
    row = Job.objects.get(pk=failing.pk)
    assert row.status == "failed"
    assert row.last_error == f"ValueError: échec ✗ {TEXT}"
    assert f"ValueError: échec ✗ {TEXT}" in row.traceback
    assert {key for key, _, _ in marks("unicode")} == {TEXT[:40], "x", "🍕", "🍔"}
    assert Job.objects.filter(status="succeeded").count() == 5
    log = runjobs.log(worker)
    assert f"Job {rel.UNICODE_NAME} #{failing.pk} raised ValueError" in log


def test_payload_size_limit_counts_utf8_bytes_and_a_payload_under_it_runs(runjobs):
    limit = get_settings().MAX_PAYLOAD_BYTES
    assert limit == 1_000_000  # the default
    overhead = len(json.dumps({"key": ""}))
    fits = "€" * ((limit - overhead) // 3)  # three bytes each in UTF-8
    assert len(json.dumps({"key": fits}, ensure_ascii=False).encode()) <= limit
    too_big = fits + "€"
    with pytest.raises(jobs.InvalidPayload) as excinfo:
        jobs.enqueue(rel.tracked, {"key": too_big})
    message = str(excinfo.value)
    assert "'rel.tracked'" in message and "MAX_PAYLOAD_BYTES" in message
    assert f"over the limit of {limit}" in message
    with pytest.raises(jobs.InvalidPayload):
        jobs.enqueue_many(rel.tracked, [{"key": "small"}, {"key": too_big}])
    assert not Job.objects.exists()

    job = jobs.enqueue(rel.tracked, {"key": fits})
    worker = runjobs.start("--burst")
    assert worker.wait(60) == 0, runjobs.log(worker)
    row = Job.objects.get(pk=job.pk)
    assert row.status == "succeeded"
    assert row.payload == {"key": fits}


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("dedupe_key", "key \ud800", "lone surrogate"),
        ("dedupe_key", "key \x00", "NUL"),
        ("queue", "queue \ud800", "lone surrogate"),
        ("queue", "queue \x00", "NUL"),
    ],
)
def test_text_no_database_can_store_is_refused_at_enqueue(option, value, problem):
    with pytest.raises(ValueError, match=problem) as excinfo:
        jobs.enqueue(rel.tracked, {"key": "k"}, **{option: value})
    assert "'rel.tracked'" in str(excinfo.value) and option in str(excinfo.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("text", "levels", "said"),
    [
        # Nested past MariaDB's limit: dropped by django-cronqueue's check.
        ("deep", 40, "(result is None): return value 'result[0]"),
        # Refused by the database itself (a constraint no check knew of).
        ("refuse-me", 0, "the database refused its return value, which was dropped"),
    ],
    ids=["too-deep", "refused-by-the-database"],
)
def test_a_handler_whose_result_cannot_be_stored_runs_once_and_succeeds(
    runjobs, text, levels, said
):
    """Its success is recorded without the result: the refused write is neither
    retried as if the database were down nor left for the lease to expire."""
    job = jobs.enqueue(rel.unstorable_result, {"key": text, "text": text, "levels": levels})
    with refusing("result", "refuse-me"):
        worker = runjobs.start(settings={"LEASE": 1})
        row = wait_until(
            lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
            timeout=120,
        )
        assert runjobs.stop(worker) == 0
    assert (row.status, row.attempts, row.result) == ("succeeded", 1, None)
    assert [key for key, _, _ in marks("start")] == [text]
    log = runjobs.log(worker)
    assert f"Job rel.unstorable_result #{job.pk} succeeded, but " in log
    assert said in log
    assert "database unavailable" not in log

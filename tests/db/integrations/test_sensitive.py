"""Sensitive arguments (SPEC section 16) on the database: every enqueue path stores them
encrypted, the handler gets them in clear, success and cancel erase them, a failure keeps
them for its retry, a value no key decrypts fails its job at once."""

import json

import pytest
from django.core import checks
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.integrations import encryption
from django_cronqueue.models import CronSchedule, Job
from django_cronqueue.testing import capture_jobs, run_until_idle
from tests.sensitive_keys import KEY_A, KEY_B, SECRET, registered, unregistered_handles
from tests.testapp.models import SideEffect
from tests.testapp.sensitive_jobs import charge, declined, digest, everything

pytestmark = pytest.mark.django_db(transaction=True)

HANDLES = unregistered_handles()

EMAIL = "someone-SECRET@example.com"


@pytest.fixture(autouse=True)
def sensitive_defined():
    """The sensitive jobs registered, and a key to encrypt them with."""
    with registered(HANDLES), override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_A]}):
        yield


def stored_text(job_id):
    """The row's payload and result as the database holds them."""
    payload, result = Job.objects.values_list("payload", "result").get(pk=job_id)
    return json.dumps([payload, result])


def assert_encrypted(job):
    row = Job.objects.get(pk=job.pk)
    assert encryption.is_encrypted(row.payload["card_token"])
    assert encryption.is_encrypted(row.payload["email"])
    assert row.payload["order_id"] == 7
    assert SECRET not in stored_text(job.pk) and EMAIL not in stored_text(job.pk)
    assert row.decrypted_payload() == {"order_id": 7, "card_token": SECRET, "email": EMAIL}


ARGS = {"order_id": 7, "card_token": SECRET, "email": EMAIL}


# --- every enqueue path encrypts ----------------------------------------------------


def test_enqueue_stores_the_named_arguments_encrypted():
    assert_encrypted(jobs.enqueue("sensitive.charge", ARGS))


def test_the_shortcut_and_using_encrypt():
    assert_encrypted(charge.enqueue(**ARGS))
    assert_encrypted(charge.using(priority=3).enqueue(**ARGS))


def test_enqueue_many_encrypts_every_payload():
    created = jobs.enqueue_many(charge, [ARGS, ARGS])
    for job in created:
        assert_encrypted(job)


def test_enqueue_on_commit_encrypts():
    with transaction.atomic():
        jobs.enqueue_on_commit(charge, ARGS)
    assert_encrypted(Job.objects.get(name="sensitive.charge"))


def test_a_chain_stores_its_signatures_encrypted():
    jobs.chain(charge.s(**ARGS), charge.s(**ARGS)).enqueue()
    for job in Job.objects.filter(name="sensitive.charge"):
        assert_encrypted(job)


def test_a_dynamic_schedule_keeps_its_payload_encrypted_and_so_do_its_jobs():
    schedule = CronSchedule.objects.create_dynamic(
        name="sensitive.every-minute", job="sensitive.charge", payload=ARGS, expression="* * * * *"
    )
    schedule.refresh_from_db()
    assert SECRET not in json.dumps(schedule.payload)
    assert encryption.is_encrypted(schedule.payload["card_token"])
    assert_encrypted(schedule.run_now())
    # An edit that leaves the stored values as they are does not encrypt them twice.
    schedule.edit(payload={**schedule.payload, "order_id": 7})
    assert_encrypted(schedule.run_now())


def test_the_testing_helpers_see_clear_values():
    with capture_jobs() as captured:
        charge.enqueue(**ARGS)
    assert captured.enqueued(charge, card_token=SECRET)
    captured.assert_enqueued(charge, {"email": EMAIL}, count=1)
    run_until_idle()  # erased once it ran: found by its other arguments, not by those
    captured.assert_enqueued(charge, {"order_id": 7}, count=1)
    captured.assert_not_enqueued(charge, {"email": EMAIL})


# --- the run, and what is left of it ------------------------------------------------


def test_the_handler_gets_clear_values_and_success_erases_them():
    job = charge.enqueue(**ARGS)
    run_until_idle()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "succeeded"
    assert SideEffect.objects.filter(key=digest(SECRET + EMAIL)).exists()
    assert row.payload == {
        "order_id": 7,
        "card_token": {"$encrypted": None},
        "email": {"$encrypted": None},
    }
    assert row.result == 7  # a result of named sensitive arguments is not sensitive


def test_a_wholly_sensitive_job_keeps_no_result():
    job = everything.enqueue(email=EMAIL)
    run_until_idle()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "succeeded"
    assert row.result == {"$encrypted": None}
    assert row.payload == {"email": {"$encrypted": None}}
    assert EMAIL not in stored_text(job.pk)


def test_a_failure_keeps_the_values_for_its_retry():
    job = declined.enqueue(card_token=SECRET)
    run_until_idle()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "pending" and row.attempts == 1
    assert row.decrypted_payload() == {"card_token": SECRET}
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now())
    run_until_idle()
    row.refresh_from_db()
    assert row.status == "failed"
    assert row.decrypted_payload() == {"card_token": SECRET}
    assert SECRET not in row.last_error + row.traceback
    assert SideEffect.objects.filter(key=digest(SECRET)).count() == 2


def test_a_cancelled_job_is_erased():
    job = charge.enqueue(**ARGS)
    assert job.cancel(reason="not needed")
    row = Job.objects.get(pk=job.pk)
    assert row.status == "cancelled"
    assert not encryption.holds_encrypted(row.payload)
    assert row.payload["order_id"] == 7


def test_a_downstream_job_cancelled_by_its_upstream_is_erased():
    jobs.chain(declined.s(card_token="x"), charge.s(**ARGS)).enqueue()
    first = Job.objects.get(name="sensitive.declined")
    Job.objects.filter(pk=first.pk).update(max_attempts=1)
    run_until_idle()
    downstream = Job.objects.get(name="sensitive.charge")
    assert downstream.status == "cancelled"
    assert not encryption.holds_encrypted(downstream.payload)


def test_a_value_no_key_decrypts_fails_at_once_naming_the_job_and_key():
    with override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_B]}):
        job = declined.enqueue(card_token=SECRET)
    run_until_idle()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "failed" and row.attempts == 1  # retries=1, not used
    assert row.last_error.startswith("DecryptionError")
    assert f"sensitive.declined #{job.pk}" in row.last_error
    assert "'card_token'" in row.last_error
    assert SECRET not in row.last_error + row.traceback
    assert not SideEffect.objects.exists()
    with override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_A, KEY_B]}):
        assert row.decrypted_payload() == {"card_token": SECRET}


# --- system checks ------------------------------------------------------------------


def check_ids():
    return sorted(message.id for message in checks.run_checks())


def test_sensitive_jobs_without_keys_are_an_error():
    with override_settings(CRONQUEUE={}):
        messages = [m for m in checks.run_checks() if m.id == "django_cronqueue.E050"]
    assert len(messages) == 1
    assert "'sensitive.charge'" in messages[0].msg


def test_an_invalid_key_is_named_by_its_position_never_printed():
    bad = "not-a-key-SECRET"
    with override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_A, bad]}):
        messages = [m for m in checks.run_checks() if m.id == "django_cronqueue.E051"]
    assert len(messages) == 1
    assert "['ENCRYPTION_KEYS'][1]" in messages[0].msg
    assert bad not in messages[0].msg + (messages[0].hint or "")


def test_a_single_string_for_the_keys_is_an_error_without_printing_it():
    with override_settings(CRONQUEUE={"ENCRYPTION_KEYS": KEY_A}):
        messages = [m for m in checks.run_checks() if m.id == "django_cronqueue.E051"]
    assert len(messages) == 1 and KEY_A not in messages[0].msg


def test_valid_keys_pass():
    assert not [i for i in check_ids() if i in {"django_cronqueue.E050", "django_cronqueue.E051"}]


# --- the worker's batched successes, eager mode ---------------------------------------


def test_a_quick_success_is_batched_and_written_with_its_values_erased():
    from django_cronqueue.claiming import claim_due
    from django_cronqueue.running.execution import Call, Recorder

    job = charge.enqueue(**ARGS)
    [claimed] = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    recorder = Recorder(timezone.now)
    recorder.MAX_WAIT = 3600.0
    recorder.add(Call(claimed, registry.get(claimed.name), duration=0.0))
    assert [call.job.id for call in recorder.pending] == [job.pk]  # waits for the batch
    recorder.flush()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "succeeded"
    assert not encryption.holds_encrypted(row.payload)


def test_eager_mode_runs_the_handler_with_clear_values():
    with override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_A], "EAGER": True}):
        job = charge.enqueue(**ARGS)
    assert SideEffect.objects.filter(key=digest(SECRET + EMAIL)).exists()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "succeeded" and not encryption.holds_encrypted(row.payload)


def test_a_running_job_cancelled_by_request_is_erased():
    from django_cronqueue.claiming import claim_due
    from django_cronqueue.exceptions import JobCancelled
    from django_cronqueue.running.execution import Call, record

    job = charge.enqueue(**ARGS)
    [claimed] = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    assert jobs.cancel(job.pk, reason="stop")  # asked of its handler
    error = JobCancelled(f"Job {job.name} #{job.pk}: cancelled")
    record(Call(claimed, registry.get(claimed.name), error=error), timezone.now())
    row = Job.objects.get(pk=job.pk)
    assert row.status == "cancelled"
    assert not encryption.holds_encrypted(row.payload) and row.payload["order_id"] == 7


def test_a_dedupe_or_fair_key_equal_to_a_sensitive_value_is_refused():
    with pytest.raises(ValueError, match="dedupe_key= is the value") as caught:
        charge.using(dedupe_key=SECRET).enqueue(**ARGS)
    text = str(caught.value)
    assert "dedupe_key=" in text and "'card_token'" in text and SECRET not in text
    with pytest.raises(ValueError, match="fair_key= is the value of the sensitive argument"):
        charge.using(fair_key=EMAIL).enqueue(**ARGS)
    assert not Job.objects.exists()
    charge.using(dedupe_key="order-7").enqueue(**ARGS)  # one of its own is fine

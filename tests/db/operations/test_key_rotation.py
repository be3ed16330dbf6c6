"""``cronqueue_rotate_keys`` (SPEC section 16): every stored sensitive value encrypted
again under the first key, in batches, never overwriting a concurrent change, and the
rows no key decrypts reported."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from django_cronqueue.integrations import encryption
from django_cronqueue.models import CronSchedule, Job
from django_cronqueue.operations.key_rotation import rotate_keys
from django_cronqueue.testing import run_until_idle
from tests.db.row_locks import row_held_elsewhere
from tests.sensitive_keys import KEY_A, KEY_B, KEY_C, SECRET, registered, unregistered_handles
from tests.testapp.sensitive_jobs import charge, declined

pytestmark = pytest.mark.django_db(transaction=True)

HANDLES = unregistered_handles()

ARGS = {"order_id": 1, "card_token": SECRET, "email": "e@example.com"}


@pytest.fixture(autouse=True)
def sensitive_defined():
    with registered(HANDLES):
        yield


def keys(*values):
    return override_settings(CRONQUEUE={"ENCRYPTION_KEYS": list(values)})


def readable_with(key, job_id):
    with keys(key):
        try:
            return Job.objects.get(pk=job_id).decrypted_payload()["card_token"] == SECRET
        except Exception:
            return False


def test_rotation_moves_every_value_to_the_first_key_in_batches():
    with keys(KEY_B):
        old = [charge.enqueue(**ARGS).pk for _ in range(7)]
        schedule = CronSchedule.objects.create_dynamic(
            name="rotate.schedule", job="sensitive.charge", payload=ARGS, expression="0 3 * * *"
        )
    with keys(KEY_A, KEY_B):
        rotation = rotate_keys(batch_size=3)
    assert rotation.rotated == 8 and not rotation.undecryptable and not rotation.locked
    assert all(readable_with(KEY_A, pk) for pk in old)
    assert not any(readable_with(KEY_B, pk) for pk in old)
    schedule.refresh_from_db()
    with keys(KEY_A):
        assert encryption.decrypt_payload(schedule.payload, "s")["card_token"] == SECRET


def test_finished_and_plain_rows_are_left_alone():
    with keys(KEY_B):
        done = charge.enqueue(**ARGS)
        run_until_idle()
    before = Job.objects.get(pk=done.pk).payload
    with keys(KEY_A, KEY_B):
        assert rotate_keys().rotated == 0
    assert Job.objects.get(pk=done.pk).payload == before


def test_a_failed_row_is_rotated_for_its_retry():
    with keys(KEY_B):
        job = declined.enqueue(card_token=SECRET)
        Job.objects.filter(pk=job.pk).update(max_attempts=1)
        run_until_idle()
    assert Job.objects.get(pk=job.pk).status == "failed"
    with keys(KEY_A, KEY_B):
        assert rotate_keys().rotated == 1
    assert readable_with(KEY_A, job.pk)


def test_rows_no_key_decrypts_are_reported_and_kept():
    with keys(KEY_C):
        lost = charge.enqueue(**ARGS)
    with keys(KEY_B):
        kept = charge.enqueue(**ARGS)
    stored = Job.objects.get(pk=lost.pk).payload
    out = io.StringIO()
    with keys(KEY_A, KEY_B), pytest.raises(CommandError) as caught:
        call_command("cronqueue_rotate_keys", stdout=out)
    text = str(caught.value)
    assert f"job #{lost.pk} (sensitive.charge)" in text and f"#{kept.pk}" not in text
    assert SECRET not in text + out.getvalue()
    assert "Re-encrypted the sensitive values of 1 rows." in out.getvalue()
    assert Job.objects.get(pk=lost.pk).payload == stored
    assert readable_with(KEY_A, kept.pk)


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite locks the whole file")
def test_a_row_locked_by_a_worker_is_skipped_not_overwritten():
    with keys(KEY_B):
        held, free = charge.enqueue(**ARGS), charge.enqueue(**ARGS)
    with keys(KEY_A, KEY_B), row_held_elsewhere(held.pk):
        rotation = rotate_keys()
    assert rotation.rotated == 1
    assert rotation.locked == [f"job #{held.pk}"]
    assert readable_with(KEY_A, free.pk) and readable_with(KEY_B, held.pk)
    with keys(KEY_A, KEY_B):  # once the lock is gone, a second run takes it
        assert rotate_keys().rotated == 1
    assert readable_with(KEY_A, held.pk)


def test_the_command_reports_what_it_did():
    with keys(KEY_B):
        charge.enqueue(**ARGS)
    out = io.StringIO()
    with keys(KEY_A, KEY_B):
        call_command("cronqueue_rotate_keys", "--batch-size", "10", stdout=out)
    assert out.getvalue().strip() == "Re-encrypted the sensitive values of 1 rows."
    assert json.dumps(list(Job.objects.values_list("payload", flat=True))).count(SECRET) == 0


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite keeps one table")
def test_rows_in_history_are_rotated_and_a_success_moves_there_erased():
    from django.utils import timezone

    from django_cronqueue.history import archive
    from tests.db.history.test_moves import in_history

    with keys(KEY_B):
        done = charge.enqueue(**ARGS)
        failed = declined.enqueue(card_token=SECRET)
        Job.objects.filter(pk=failed.pk).update(max_attempts=1)
        run_until_idle()
    now = timezone.now()
    assert archive.archive(now) == 2
    assert in_history() == {done.pk: True, failed.pk: True}
    assert not encryption.holds_encrypted(Job.objects.get(pk=done.pk).payload)
    with keys(KEY_A, KEY_B):
        assert rotate_keys().rotated == 1
    assert readable_with(KEY_A, failed.pk)
    assert in_history()[failed.pk]  # rotated where it lies

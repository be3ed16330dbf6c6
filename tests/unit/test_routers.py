"""``CronQueueRouter``: the app's models go to ``CRONQUEUE["DATABASE"]``, its migrations
run there only, and no other app's tables go there unless it is ``default`` (the real
databases: tests/queue_db)."""

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from django_cronqueue.models import Batch, CronSchedule, Job
from django_cronqueue.routers import CronQueueRouter

router = CronQueueRouter()


@pytest.mark.parametrize("alias", ["default", "jobs"])
def test_the_queue_models_go_to_the_queue_database(alias):
    with override_settings(CRONQUEUE={"DATABASE": alias}):
        for model in (Job, CronSchedule, Batch):
            assert router.db_for_read(model) == alias
            assert router.db_for_write(model) == alias


def test_other_models_are_left_to_the_next_router():
    with override_settings(CRONQUEUE={"DATABASE": "jobs"}):
        assert router.db_for_read(User) is None
        assert router.db_for_write(User) is None
        assert router.allow_relation(User(), Job()) is None
    assert router.allow_relation(Job(), Batch()) is True


def test_the_queue_migrations_run_in_the_queue_database_only():
    with override_settings(CRONQUEUE={"DATABASE": "jobs"}):
        assert router.allow_migrate("jobs", "django_cronqueue", model_name="job") is True
        assert router.allow_migrate("default", "django_cronqueue", model_name="job") is False
        assert router.allow_migrate("jobs", "auth", model_name="user") is False
        assert router.allow_migrate("default", "auth", model_name="user") is None


def test_with_the_queue_in_default_other_apps_are_not_kept_out():
    with override_settings(CRONQUEUE={"DATABASE": "default"}):
        assert router.allow_migrate("default", "django_cronqueue") is True
        assert router.allow_migrate("default", "auth") is None
        assert router.allow_migrate("other", "django_cronqueue") is False
        assert router.allow_migrate("other", "auth") is None

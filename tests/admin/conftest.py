"""Fixtures for the admin tests: users with and without the change permissions."""

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.cron_helpers import schedule


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def staff_client(username: str, codenames: list[str]) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_cronqueue", codename__in=codenames
        )
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(db):
    """A staff user who may only look."""
    return staff_client("viewer", ["view_job", "view_cronschedule"])


@pytest.fixture
def operator_client(db):
    """A staff user with view and change permission, not a superuser."""
    return staff_client(
        "operator", ["view_job", "change_job", "view_cronschedule", "change_cronschedule"]
    )


@pytest.fixture
def nightly():
    """A registered cron schedule (its CronSchedule row is made by the test)."""
    with schedule("30 2 * * *", name="tests.nightly", tz="America/New_York") as definition:
        yield definition


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]

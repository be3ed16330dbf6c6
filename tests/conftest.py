import pytest

pytest_plugins = ["tests.factories"]


@pytest.fixture(autouse=True)
def _fresh_housekeeping():
    """Each test's in-process ticks start with a fresh prune clock, and the first one
    syncs the schedule rows."""
    from django.apps import apps

    from django_cronqueue.ticks import Housekeeping

    apps.get_app_config("django_cronqueue").housekeeping = Housekeeping()

import pytest

pytest_plugins = ["tests.factories"]


@pytest.fixture(autouse=True)
def _reset_worker_state():
    """Each test sees a fresh prune clock, and its first tick syncs the schedule rows."""
    from django_cronqueue import scheduler, worker

    worker._last_prune = None
    scheduler.forget_sync()

import pytest

pytest_plugins = ["tests.factories"]


@pytest.fixture(autouse=True)
def _reset_worker_state():
    """Each test sees a fresh prune clock."""
    from django_cronqueue import worker

    worker._last_prune = None

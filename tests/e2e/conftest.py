"""Real ``runjobs`` processes against the test database."""

import pytest

from tests.processes import ROOT, Runjobs, wait_until

__all__ = ["ROOT", "Runjobs", "wait_until"]


@pytest.fixture
def runjobs(tmp_path):
    runner = Runjobs(tmp_path)
    yield runner
    runner.stop_all()

"""Fixtures for the integration tests: real ``runjobs`` processes, as in tests/e2e."""

import pytest

from tests.e2e.conftest import ROOT, Runjobs, wait_until

__all__ = ["ROOT", "wait_until"]


@pytest.fixture
def runjobs(tmp_path):
    runner = Runjobs(tmp_path)
    yield runner
    runner.stop_all()

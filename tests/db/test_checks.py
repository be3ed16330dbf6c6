"""The system checks that need the real database (the rest are in tests/unit/test_checks.py)."""

import pytest
from django.db import connection

from django_cronqueue.checks import check_database_version


@pytest.mark.django_db
def test_the_real_test_database_is_supported():
    assert check_database_version(databases=[connection.alias]) == []

"""The system checks that need the real database (the rest are in tests/unit/test_checks.py)."""

import pytest
from django.core.checks import WARNING
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_cronqueue.checks import check_database_charset, check_database_version

on_mysql = pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB only")


@pytest.mark.django_db
def test_the_real_test_database_is_supported():
    assert check_database_version(databases=[connection.alias]) == []


@pytest.mark.django_db
def test_the_real_test_connection_passes_the_character_set_check():
    assert check_database_charset(databases=[connection.alias]) == []


@pytest.fixture
def utf8mb3_connection():
    """The test connection switched to utf8mb3 (as OPTIONS {"charset": "utf8mb3"} would
    make it), and back to utf8mb4 afterwards."""
    with connection.cursor() as cursor:
        cursor.execute("SET NAMES utf8mb3")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET NAMES utf8mb4")


@on_mysql
@pytest.mark.django_db
def test_w003_a_connection_that_is_not_utf8mb4(utf8mb3_connection):
    [message] = check_database_charset(databases=[connection.alias])
    assert (message.id, message.level) == ("django_cronqueue.W003", WARNING)
    assert "DATABASES['default']" in message.msg
    assert "character_set_client=utf8mb3, character_set_connection=utf8mb3" in message.msg
    assert """DATABASES['default']["OPTIONS"]["charset"] = "utf8mb4\"""" in message.hint


@pytest.mark.skipif(connection.vendor == "mysql", reason="vendors without character sets")
@pytest.mark.django_db
def test_other_databases_are_not_asked_for_a_character_set():
    with CaptureQueriesContext(connection) as queries:
        assert check_database_charset(databases=[connection.alias]) == []
    assert len(queries) == 0

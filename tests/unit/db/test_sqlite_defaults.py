"""The queue's SQLite connections get WAL, a busy timeout and IMMEDIATE transactions,
unless the site's OPTIONS set them."""

import pytest
from django.db import connections
from django.db.backends.sqlite3.base import DatabaseWrapper

from django_cronqueue.db.sqlite_defaults import BUSY_TIMEOUT


@pytest.fixture
def connect(tmp_path, django_db_blocker):
    opened = []

    def connect(options, alias="default", name=None):
        settings = {
            **connections["default"].settings_dict,
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name or str(tmp_path / f"{alias}-{len(opened)}.sqlite3"),
            "OPTIONS": options,
        }
        wrapper = DatabaseWrapper(settings, alias=alias)
        with django_db_blocker.unblock():  # a file of its own, not the test database
            wrapper.ensure_connection()
        opened.append(wrapper)
        return wrapper

    yield connect
    for wrapper in opened:
        wrapper.close()


def pragma(wrapper, name):
    return wrapper.connection.execute(f"PRAGMA {name}").fetchone()[0]


def test_django_defaults_get_wal_a_busy_timeout_and_immediate_transactions(connect):
    wrapper = connect({})
    assert wrapper.transaction_mode == "IMMEDIATE"
    assert pragma(wrapper, "busy_timeout") == BUSY_TIMEOUT * 1000
    assert pragma(wrapper, "journal_mode") == "wal"


def test_what_the_site_sets_is_kept(connect):
    wrapper = connect(
        {"timeout": 3, "transaction_mode": "DEFERRED", "init_command": "PRAGMA journal_mode=DELETE"}
    )
    assert wrapper.transaction_mode == "DEFERRED"
    assert pragma(wrapper, "busy_timeout") == 3000
    assert pragma(wrapper, "journal_mode") == "delete"


def test_other_aliases_are_left_alone(connect):
    wrapper = connect({}, alias="other")
    assert wrapper.transaction_mode is None
    assert pragma(wrapper, "journal_mode") == "delete"


def test_an_in_memory_database_keeps_its_journal(connect):
    wrapper = connect({}, name=":memory:")
    assert wrapper.transaction_mode == "IMMEDIATE"
    assert pragma(wrapper, "journal_mode") == "memory"

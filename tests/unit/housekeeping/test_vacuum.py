"""When the worker's housekeeping vacuums the job table (``vacuum.due``)."""

from __future__ import annotations

import datetime as dt

from django_cronqueue.housekeeping import vacuum
from django_cronqueue.observe.storage import StorageHealth

NOW = dt.datetime(2026, 12, 5, 4, 0, tzinfo=dt.timezone.utc)


def health(dead: int, vacuumed_ago: float | None) -> StorageHealth:
    last = None if vacuumed_ago is None else NOW - dt.timedelta(seconds=vacuumed_ago)
    return StorageHealth(dead_tuples=dead, oldest_transaction=None, last_vacuum=last, read_at=NOW)


def test_a_table_with_few_dead_rows_is_left_to_autovacuum():
    assert not vacuum.due(health(vacuum.DEAD_ROWS - 1, vacuumed_ago=3600))


def test_a_table_with_many_dead_rows_is_vacuumed_once_the_last_vacuum_is_old_enough():
    every = vacuum.EVERY.total_seconds()
    assert not vacuum.due(health(vacuum.DEAD_ROWS, vacuumed_ago=every - 1))
    assert vacuum.due(health(vacuum.DEAD_ROWS, vacuumed_ago=every))


def test_a_table_never_vacuumed_is_vacuumed_once_it_has_many_dead_rows():
    assert vacuum.due(health(vacuum.DEAD_ROWS, vacuumed_ago=None))


def test_without_the_database_s_clock_nothing_is_decided():
    unread = StorageHealth(dead_tuples=vacuum.DEAD_ROWS * 10, oldest_transaction=None)
    assert not vacuum.due(unread)

"""django_cronqueue.db.clock on each database: the database's clock is read by the server
(not by Python), it runs inside a transaction, and a host clock that is wrong is
measured as such."""

import datetime as dt
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_cronqueue.db.clock import database_now, measure

pytestmark = pytest.mark.django_db


def test_the_database_clock_is_an_aware_instant_near_this_hosts():
    # The test database runs on this machine, with this machine's clock.
    value = database_now(connection)

    assert value.utcoffset() == dt.timedelta(0)
    assert abs((value - timezone.now()).total_seconds()) < 2


def test_the_database_clock_moves_on_inside_a_transaction():
    # PostgreSQL's now() would stand still at the transaction's start.
    with transaction.atomic():
        first = database_now(connection)
        time.sleep(0.05)
        second = database_now(connection)

    assert second - first >= dt.timedelta(seconds=0.04)


def test_a_host_clock_in_step_with_the_database_has_no_offset_to_speak_of():
    reading = measure("default")

    assert abs(reading.offset) < 1
    assert reading.round_trip >= 0


@pytest.mark.parametrize("skew", [95.0, -40.0])
def test_a_host_clock_ahead_or_behind_is_measured(monkeypatch, skew):
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + dt.timedelta(seconds=skew))

    reading = measure("default")

    assert reading.offset == pytest.approx(skew, abs=1)

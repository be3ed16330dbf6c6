"""maintenance.PruneClock: when a tick prunes. Database-free; pruning itself is tested
in tests/db/housekeeping/test_maintenance.py."""

import datetime as dt

from django_cronqueue.housekeeping.maintenance import PRUNE_EVERY, PruneClock

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
SECOND = dt.timedelta(seconds=1)


def test_prune_every_is_an_hour():
    assert dt.timedelta(hours=1) == PRUNE_EVERY


def test_the_first_tick_prunes():
    assert PruneClock().due(T0) is True


def test_at_most_once_per_hour_of_tick_time():
    clock = PruneClock()
    assert clock.due(T0) is True
    assert clock.due(T0) is False
    assert clock.due(T0 + PRUNE_EVERY - SECOND) is False
    assert clock.due(T0 + PRUNE_EVERY) is True
    # The hour counts from the last prune, not from the first.
    assert clock.due(T0 + PRUNE_EVERY + dt.timedelta(minutes=59)) is False
    assert clock.due(T0 + 2 * PRUNE_EVERY) is True


def test_a_late_tick_prunes_once_and_restarts_the_hour_from_there():
    clock = PruneClock()
    clock.due(T0)
    late = T0 + dt.timedelta(hours=5, minutes=17)
    assert clock.due(late) is True
    assert clock.due(T0 + 6 * PRUNE_EVERY) is False
    assert clock.due(late + PRUNE_EVERY) is True


def test_a_now_before_the_last_prune_starts_over():
    clock = PruneClock()
    assert clock.due(T0) is True
    assert clock.due(T0 - SECOND) is True  # a test injected an earlier now
    assert clock.due(T0 - SECOND + dt.timedelta(minutes=30)) is False


def test_each_clock_keeps_its_own_time():
    first, second = PruneClock(), PruneClock()
    assert first.due(T0) is True
    assert second.due(T0 + SECOND) is True
    assert first.due(T0 + SECOND) is False


def test_a_chore_left_undone_is_due_again_at_the_next_pass():
    clock = PruneClock()
    assert clock.due(T0) is True
    clock.again()
    assert clock.due(T0 + SECOND) is True
    assert clock.due(T0 + 2 * SECOND) is False


def test_an_armed_chore_is_due_one_interval_after_the_instant_it_was_armed_at():
    clock = PruneClock()
    clock.arm(T0)
    assert clock.due(T0 + PRUNE_EVERY - SECOND) is False
    assert clock.due(T0 + PRUNE_EVERY) is True

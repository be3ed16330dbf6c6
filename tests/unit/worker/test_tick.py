"""ticks.ClaimTally: how much of the history backlog a worker's housekeeping moves per
pass, from its slots' claims, and when a pass stops for the drain. Database-free; the
moves are tested in tests/db/history/test_tables.py and tests/db/history/test_moves.py."""

import datetime as dt
import threading

from django_cronqueue.history.archive import ARCHIVE_BATCH, ARCHIVE_BATCHES, Budget
from django_cronqueue.worker.tick import YIELD_AFTER_HOLD, ClaimTally

NOW = dt.datetime(2026, 12, 4, 12, tzinfo=dt.timezone.utc)
PASS = dt.timedelta(seconds=10)


def behind(tally: ClaimTally, claims: int = 1) -> None:
    for _ in range(claims):
        tally.record(10, 10)


def test_every_claim_full_bounds_the_pass_to_the_claimed_jobs_and_one_batch():
    tally = ClaimTally()
    tally.record(10, 10)
    tally.record(4, 4)
    assert tally.archive_budget(NOW).rows == 14 + ARCHIVE_BATCH


def test_with_room_the_batches_beyond_the_claimed_jobs_grow_by_one_up_to_a_whole_pass():
    tally = ClaimTally()
    budgets = []
    for _ in range(ARCHIVE_BATCHES + 2):
        tally.record(10, 3)  # a short claim: the queue ran dry
        budgets.append(tally.archive_budget(NOW).rows - 3)
    grown = [*range(2, ARCHIVE_BATCHES + 1), ARCHIVE_BATCHES, ARCHIVE_BATCHES, ARCHIVE_BATCHES]
    assert budgets == [n * ARCHIVE_BATCH for n in grown]


def test_a_pass_behind_goes_back_to_one_batch():
    tally = ClaimTally()
    for _ in range(5):
        assert tally.archive_budget(NOW).rows > ARCHIVE_BATCH  # no claims: room
    behind(tally)
    assert tally.archive_budget(NOW).rows == 10 + ARCHIVE_BATCH
    assert tally.archive_budget(NOW).rows == 2 * ARCHIVE_BATCH


def test_one_short_claim_among_full_ones_is_room():
    tally = ClaimTally()
    behind(tally)
    tally.record(10, 0)
    behind(tally)
    assert tally.archive_budget(NOW).rows == 20 + 2 * ARCHIVE_BATCH


def test_claims_from_many_slots_all_count():
    tally = ClaimTally()
    threads = [threading.Thread(target=behind, args=(tally, 1_000)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.archive_budget(NOW).rows == 80_000 + ARCHIVE_BATCH


def test_a_restart_counts_afresh_from_one_batch():
    tally = ClaimTally()
    for _ in range(5):
        tally.archive_budget(NOW)
    behind(tally, 3)
    tally.restart(NOW)
    tally.record(10, 2)
    assert tally.archive_budget(NOW).rows == 2 + 2 * ARCHIVE_BATCH


def test_after_a_hold_a_pass_behind_moves_nothing():
    tally = ClaimTally()
    tally.restart(NOW)  # the last pass that found a transaction held
    behind(tally)
    assert tally.archive_budget(NOW + PASS).rows == 0


def test_after_a_hold_a_pass_with_room_owes_nothing_and_asks_before_each_batch():
    tally = ClaimTally()
    tally.restart(NOW)
    tally.record(10, 3)
    budget = tally.archive_budget(NOW + PASS)
    assert (budget.owed, budget.rows) == (0, 3 + 2 * ARCHIVE_BATCH)
    assert budget.behind == tally.fell_behind


def test_once_the_yield_after_a_hold_is_over_a_pass_behind_owes_its_claims_again():
    tally = ClaimTally()
    tally.restart(NOW)
    behind(tally)
    budget = tally.archive_budget(NOW + YIELD_AFTER_HOLD)
    assert (budget.owed, budget.rows) == (10, 10 + ARCHIVE_BATCH)


def test_the_budget_owes_the_claimed_jobs():
    tally = ClaimTally()
    tally.record(10, 4)
    budget = tally.archive_budget(NOW)
    assert (budget.owed, budget.rows) == (4, 4 + 2 * ARCHIVE_BATCH)
    assert budget.behind == tally.fell_behind


def test_falls_behind_when_every_claim_since_it_last_asked_came_back_full():
    tally = ClaimTally()
    assert not tally.fell_behind()  # no claim: no sign of a backlog
    behind(tally, 3)
    assert tally.fell_behind()
    tally.record(10, 10)
    tally.record(10, 9)
    assert not tally.fell_behind()  # the queue ran dry once
    behind(tally)
    tally.archive_budget(NOW)  # a new pass asks afresh
    assert not tally.fell_behind()


def test_a_pass_that_stopped_for_the_drain_makes_the_next_one_batch():
    tally = ClaimTally()
    for _ in range(5):
        tally.record(10, 3)
        tally.archive_budget(NOW)
    behind(tally)
    assert tally.fell_behind()
    tally.record(10, 3)  # the rest of the pass had room
    assert tally.archive_budget(NOW).rows == 13 + ARCHIVE_BATCH


def test_a_budget_moves_what_it_owes_then_asks_before_each_batch():
    asked = []

    def behind_at_third_question() -> bool:
        asked.append(True)
        return len(asked) == 3

    budget = Budget(rows=100, owed=25, behind=behind_at_third_question)
    sizes = []
    moved = 0
    while size := budget.next_batch(moved, 10):
        sizes.append(size)
        moved += size
    # 25 owed, in whole batches without asking; then two batches with room, and the
    # third question found a backlog.
    assert sizes == [10, 10, 10, 10, 10]
    assert len(asked) == 3


def test_a_budget_ends_at_its_rows():
    budget = Budget(rows=25)
    assert [budget.next_batch(moved, 10) for moved in (0, 10, 20, 25)] == [10, 10, 5, 0]

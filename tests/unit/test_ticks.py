"""ticks.ClaimTally: how much of the history backlog a worker's housekeeping moves per
pass, from its slots' claims. Database-free; the moves are tested in
tests/db/test_history_tables.py."""

import threading

from django_cronqueue.archive import ARCHIVE_BATCH
from django_cronqueue.ticks import ClaimTally


def test_no_claims_no_bound():
    assert ClaimTally().archive_budget() is None


def test_every_claim_full_bounds_the_pass_to_the_claimed_jobs_and_one_batch():
    tally = ClaimTally()
    tally.record(10, 10)
    tally.record(4, 4)
    assert tally.archive_budget() == 14 + ARCHIVE_BATCH


def test_one_short_claim_lifts_the_bound():
    tally = ClaimTally()
    tally.record(10, 10)
    tally.record(10, 0)
    tally.record(10, 10)
    assert tally.archive_budget() is None


def test_each_budget_starts_a_fresh_tally():
    tally = ClaimTally()
    tally.record(10, 2)
    assert tally.archive_budget() is None
    tally.record(10, 10)
    assert tally.archive_budget() == 10 + ARCHIVE_BATCH
    assert tally.archive_budget() is None


def test_claims_from_many_slots_all_count():
    tally = ClaimTally()

    def slot() -> None:
        for _ in range(1_000):
            tally.record(10, 10)

    threads = [threading.Thread(target=slot) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.archive_budget() == 80_000 + ARCHIVE_BATCH

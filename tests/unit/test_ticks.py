"""ticks.ClaimTally: how much of the history backlog a worker's housekeeping moves per
pass, from its slots' claims. Database-free; the moves are tested in
tests/db/test_history_tables.py."""

import threading

from django_cronqueue.archive import ARCHIVE_BATCH, ARCHIVE_BATCHES
from django_cronqueue.ticks import ClaimTally


def behind(tally: ClaimTally, claims: int = 1) -> None:
    for _ in range(claims):
        tally.record(10, 10)


def test_every_claim_full_bounds_the_pass_to_the_claimed_jobs_and_one_batch():
    tally = ClaimTally()
    tally.record(10, 10)
    tally.record(4, 4)
    assert tally.archive_budget() == 14 + ARCHIVE_BATCH


def test_with_room_the_batches_beyond_the_claimed_jobs_grow_by_one_up_to_a_whole_pass():
    tally = ClaimTally()
    budgets = []
    for _ in range(ARCHIVE_BATCHES + 2):
        tally.record(10, 3)  # a short claim: the queue ran dry
        budgets.append(tally.archive_budget() - 3)
    grown = [*range(2, ARCHIVE_BATCHES + 1), ARCHIVE_BATCHES, ARCHIVE_BATCHES, ARCHIVE_BATCHES]
    assert budgets == [n * ARCHIVE_BATCH for n in grown]


def test_a_pass_behind_goes_back_to_one_batch():
    tally = ClaimTally()
    for _ in range(5):
        assert tally.archive_budget() > ARCHIVE_BATCH  # no claims: room
    behind(tally)
    assert tally.archive_budget() == 10 + ARCHIVE_BATCH
    assert tally.archive_budget() == 2 * ARCHIVE_BATCH


def test_one_short_claim_among_full_ones_is_room():
    tally = ClaimTally()
    behind(tally)
    tally.record(10, 0)
    behind(tally)
    assert tally.archive_budget() == 20 + 2 * ARCHIVE_BATCH


def test_claims_from_many_slots_all_count():
    tally = ClaimTally()
    threads = [threading.Thread(target=behind, args=(tally, 1_000)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.archive_budget() == 80_000 + ARCHIVE_BATCH


def test_a_restart_counts_afresh_from_one_batch():
    tally = ClaimTally()
    for _ in range(5):
        tally.archive_budget()
    behind(tally, 3)
    tally.restart()
    tally.record(10, 2)
    assert tally.archive_budget() == 2 + 2 * ARCHIVE_BATCH

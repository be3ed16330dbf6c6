"""claiming.fairflow's filling of a plan: each slot takes its key's next candidate that
fits the room left under its name's cap or its limit key's limits, in the plan's order.
Database-free; the claims themselves are tested in tests/db/claiming/test_fair_flow.py."""

import datetime as dt

from django_cronqueue.claiming import ClaimedJob, ClaimRequest, FlowLimit
from django_cronqueue.claiming.fair import TURN_NEVER, Share, plan
from django_cronqueue.claiming.fairflow import _fill

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
LIMITED = "limited"
CAPPED = "capped"
REQUEST = ClaimRequest(
    now=T0,
    lease_until=T0,
    token="t",
    worker_id="w",
    limit=6,
    names=[],
    capped={CAPPED: 2},
    limited={LIMITED: FlowLimit(concurrency=2)},
)


def share(share_id: int, key: str, weight: int = 1) -> Share:
    return Share(share_id, key, weight, 0, 0, TURN_NEVER, 0)


def candidate(job_id: int, name: str, limit_key: str = "") -> tuple[ClaimedJob, str]:
    job = ClaimedJob(
        id=job_id,
        name=name,
        payload={},
        attempts=1,
        max_attempts=4,
        queue="fair",
        priority=0,
        run_at=T0,
        scheduled_for=None,
        created_at=T0,
        token="t",
    )
    return job, limit_key


def test_slots_are_filled_in_turn_order_with_the_candidates_that_fit():
    a, b, c = share(1, "a"), share(2, "b"), share(3, "c")
    served = plan([a, b, c], 6)
    assert served == [a, b, c, a, b, c]
    candidates = {
        # a's first two share the limit key "x", whose room is one: the second is passed.
        a: [candidate(1, LIMITED, "x"), candidate(2, LIMITED, "x"), candidate(3, LIMITED, "y")],
        # b's jobs are of the capped name, whose cap leaves room for two, shared with c.
        b: [candidate(4, CAPPED), candidate(5, CAPPED)],
        c: [candidate(6, CAPPED), candidate(7, LIMITED, "z")],
    }
    room = {(LIMITED, "x"): 1, (LIMITED, "y"): 2, (LIMITED, "z"): 0}
    kept, given, taken = _fill(REQUEST, served, candidates, {CAPPED: 2}, room)
    # a: 1 (x), b: 4 (cap 1 left), c: 6 (cap 0 left), a: 3 (y), b: none, c: none (z full).
    assert [job.id for job, _ in kept] == [1, 4, 6, 3]
    assert given == {a: 2, b: 1, c: 1}
    assert taken == {(LIMITED, "x"): 1, (LIMITED, "y"): 1}


def test_a_key_without_room_gives_nothing_and_takes_no_other_key_s_slot():
    a, b = share(1, "a"), share(2, "b")
    served = plan([a, b], 4)
    candidates = {
        a: [candidate(1, LIMITED, "full")],
        b: [candidate(i, LIMITED, "b") for i in (2, 3)],
    }
    room = {(LIMITED, "full"): 0, (LIMITED, "b"): 2}
    kept, given, _ = _fill(REQUEST, served, candidates, {}, room)
    # a's slots stay empty (the next round goes on to other keys); b takes its own two only.
    assert [job.id for job, _ in kept] == [2, 3]
    assert given == {b: 2}

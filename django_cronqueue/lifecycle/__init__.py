"""Every change of a job's status happens here.

The worker, the admin and user code call these functions (or the ``Job`` methods
that wrap them); nothing else writes ``status``, except the claim itself
(``django_cronqueue.claiming``: pending -> running, and its batched successes). Each
transition is one conditional UPDATE, so two actors racing for the same row cannot both
win: completions are guarded by the lease token of the claim that ran them.

``running`` holds the worker's transitions of a claimed job, ``operator`` those that
operators and user code ask for (retry, cancel, run now), ``common`` what they share.

May import ``claiming``, ``history`` and everything below them.
"""

from typing import TYPE_CHECKING, Any

from .common import Outcome
from .running import (
    cancel_requested_among,
    cancelled_message,
    complete_failure,
    complete_snooze,
    complete_success,
    leased_until,
    lose_lease,
    release_unstarted,
    renew_leases,
    report_failure,
    running_with_downstream,
    write_progress,
)
from .workflow import (
    after_end,
    after_success,
    mark_upstream_ended,
    members_succeeded,
    release_downstream,
    upstream_ended_text,
)

if TYPE_CHECKING:
    from .operator import (
        RETRYABLE,
        Cancellation,
        cancel,
        cancel_job,
        cancel_rows,
        cancel_text,
        make_rows_due,
        mark_skipped,
        request_cancel_rows,
        retry,
        retry_rows,
        run_now,
    )

# operator's functions (retry, cancel, run now: operators and user code) and what they
# import, the history tables among them, load when first asked for (PEP 562): a worker
# claims and runs jobs without them.
_OPERATOR = frozenset(
    (
        "RETRYABLE",
        "Cancellation",
        "cancel",
        "cancel_job",
        "cancel_rows",
        "cancel_text",
        "make_rows_due",
        "mark_skipped",
        "request_cancel_rows",
        "retry",
        "retry_rows",
        "run_now",
    )
)

__all__ = [
    "RETRYABLE",
    "Cancellation",
    "Outcome",
    "after_end",
    "after_success",
    "cancel",
    "cancel_job",
    "cancel_requested_among",
    "cancel_rows",
    "cancel_text",
    "cancelled_message",
    "complete_failure",
    "complete_snooze",
    "complete_success",
    "leased_until",
    "lose_lease",
    "make_rows_due",
    "mark_skipped",
    "mark_upstream_ended",
    "members_succeeded",
    "release_downstream",
    "release_unstarted",
    "renew_leases",
    "report_failure",
    "request_cancel_rows",
    "retry",
    "retry_rows",
    "run_now",
    "running_with_downstream",
    "upstream_ended_text",
    "write_progress",
]


def __getattr__(name: str) -> Any:
    if name not in _OPERATOR:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import operator

    return getattr(operator, name)

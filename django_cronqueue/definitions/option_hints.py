"""What to write instead of an option ``@jobs.job`` or ``@jobs.cron`` does not take.

Teams arrive with Celery's, django-q's or Django Tasks' option names in their fingers
(``max_retries=3``, ``time_limit=60``, ``bind=True``, ``catchup=...``); a bare "unexpected
keyword argument" sends them to the docs. Each known name maps to the fix; any other name
gets the closest accepted option, if one is close. Pure: no Django, no database.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# The option names of other tools, and what to write here instead.
_FOREIGN: dict[str, str] = {
    # Celery task options
    "max_retries": "use retries= (retries after the first attempt, as Celery's max_retries)",
    "time_limit": "use timeout= (seconds; past it the attempt fails with "
    "jobs.TimeLimitExceeded, and the process pool kills the child)",
    "soft_time_limit": "use soft_timeout= (seconds, below timeout=; raises "
    "jobs.SoftTimeLimitExceeded inside the handler)",
    "autoretry_for": "use retry_on= (only these exceptions are retried; every exception is "
    "retried by default)",
    "dont_autoretry_for": "use discard_on= (these exceptions fail the job at once)",
    "bind": "drop it: a handler gets no task argument; call jobs.current() inside it for its "
    "job, attempt, progress and cancellation",
    "retry_backoff": "drop it: retries back off exponentially with jitter by default; pass "
    "backoff= (a function of the attempt number) for another curve",
    "retry_backoff_max": "use backoff= (a function of the attempt number returning seconds)",
    "retry_jitter": "drop it: the default backoff has jitter; pass backoff= for another curve",
    "default_retry_delay": "use backoff= (a function of the attempt number returning seconds)",
    "retry_kwargs": "use retries= (and backoff= for the delays)",
    "acks_late": "drop it: a job is claimed under a lease, and runs again if its worker dies",
    "ignore_result": "drop it: a handler's return value is stored as the job's result",
    "serializer": "drop it: arguments and results are stored as JSON, never pickled",
    "base": "drop it: jobs are plain functions; share code with a helper function",
    "shared": "drop it: @jobs.job registers the function once, under its name",
    "countdown": "pass it when enqueueing: handle.using(delay=...).enqueue(...)",
    "eta": "pass it when enqueueing: handle.using(run_at=...).enqueue(...)",
    "expires": "cancel the job instead: jobs.cancel(job), or check a deadline in the handler",
    # django-q / django-q2
    "max_attempts": "use retries= (retries after the first attempt: max_attempts=3 is retries=2)",
    "retry": "use retries= (how many times a failed attempt is retried)",
    "hook": "use on_failed= (called once when the job fails), or the job_succeeded and "
    "job_failed signals",
    "group": "drop it: filter jobs by name or queue in the admin; jobs.group([...]) runs "
    "signatures side by side",
    # Django Tasks (@task)
    "queue_name": "use queue=",
    "takes_context": "drop it: call jobs.current() inside the handler for its job and attempt",
    "backend": "drop it: @jobs.job is always a django-cronqueue job; Django Tasks reach it "
    "through CronQueueBackend",
    # Celery beat / common spellings of the cron options
    "catchup": "use catch_up= ('latest', 'all' or 'none')",
    "catchup_window": "use catch_up_window=",
    "max_catchup": "use max_catch_up=",
    "timezone": "use tz= (an IANA name, like 'Europe/London')",
    "time_zone": "use tz= (an IANA name, like 'Europe/London')",
    "schedule": "pass the cron expression as the first argument: @jobs.cron('*/5 * * * *')",
}


def hint(option: str, accepted: Iterable[str]) -> str:
    """The fix for ``option``, which the decorator does not take: what to write instead,
    or the closest accepted option, or the accepted options."""
    choices = sorted(accepted)
    known = _FOREIGN.get(option)
    if known is not None:
        instead = re.match(r"use (\w+)=", known)
        if instead and instead.group(1) not in choices:
            return f"{option}=: {known}, an option of @jobs.cron (schedules) only"
        return f"{option}=: {known}"
    close = difflib.get_close_matches(option, choices, n=1, cutoff=0.75)
    if close:
        return f"{option}=: did you mean {close[0]}=?"
    return f"{option}=: not an option (accepted: {', '.join(choices)})"


def unknown_options(what: str, options: Iterable[str], accepted: Iterable[str]) -> str:
    """The message for the ``options`` that ``what`` (``"Job 'shop.sync': @jobs.job()"``)
    does not take, each with its fix."""
    choices = list(accepted)
    fixes = "; ".join(hint(option, choices) for option in sorted(options))
    return f"{what} does not take {fixes}" + ("" if fixes.endswith("?") else ".")

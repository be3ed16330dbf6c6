"""Jobs of the reliability suite.

Every job has an explicit name: the pytest process imports this module directly,
while the ``runjobs`` processes (``tests.reliability.worker_settings``) discover it as
an installed app's ``jobs.py``, and both must register the same names.

Handlers leave their traces in ``SideEffect`` rows (``key``, ``pid``, ``created_at``):
``start:<key>`` when a run begins and ``end:<key>`` when it has done its work, so a
test can count runs, see which process made them and compute how many overlapped.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

from django.dispatch import receiver

from django_cronqueue import jobs, signals
from tests.testapp.models import SideEffect


def mark(kind: str, key: str) -> None:
    SideEffect.objects.create(key=f"{kind}:{key}"[:100], pid=os.getpid())


def no_wait(attempt: int) -> float:
    return 0.0


def short_wait(attempt: int) -> float:
    return 0.1


# --- crashes, leases, database faults ----------------------------------------------


@jobs.job(name="rel.tracked", retries=50, backoff=short_wait)
def tracked(key: str, seconds: float = 0.0) -> None:
    """Marks its start, works ``seconds``, marks its end (a killed run has no end)."""
    mark("start", key)
    time.sleep(seconds)
    mark("end", key)


def first_then(key: str, first: float, then: float) -> dict:
    """The first run of ``key`` takes ``first`` seconds, every later one ``then``."""
    first_run = not SideEffect.objects.filter(key=f"start:{key}").exists()
    mark("start", key)
    time.sleep(first if first_run else then)
    mark("end", key)
    return {"pid": os.getpid(), "first_run": first_run}


@jobs.job(name="rel.hour_long", timeout=3600, retries=3, backoff=no_wait)
def hour_long(key: str, first: float, then: float) -> dict:
    """Allowed an hour: only the heartbeat keeps its short lease alive."""
    return first_then(key, first, then)


@jobs.job(name="rel.slow_first", timeout=5, retries=3, backoff=no_wait)
def slow_first(key: str, first: float, then: float) -> dict:
    return first_then(key, first, then)


@jobs.job(name="rel.capped", concurrency=2, retries=3, backoff=no_wait)
def capped(key: str, seconds: float) -> None:
    mark("start", key)
    time.sleep(seconds)
    mark("end", key)


# --- flow control: limits per tenant (limit_by) -------------------------------------


def until_released(key: str, release: str) -> None:
    """Marks its start, waits for a ``release:<release>`` mark (at most 5 min), marks its end."""
    mark("start", key)
    deadline = time.monotonic() + 300
    while not SideEffect.objects.filter(key=f"release:{release}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key!r} was never released")
        time.sleep(0.05)
    mark("end", key)


@jobs.job(name="rel.tenant_capped", limit_by="tenant", concurrency=2, timeout=600, retries=0)
def tenant_capped(tenant: str, key: str, seconds: float = 0.0, hold: bool = False) -> None:
    """At most 2 running per tenant. ``hold``: runs until ``release:<tenant>`` exists."""
    if hold:
        until_released(key, tenant)
        return
    mark("start", key)
    time.sleep(seconds)
    mark("end", key)


@jobs.job(name="rel.tenant_rated", limit_by="tenant", rate_limit="5/s", retries=0)
def tenant_rated(tenant: str, key: str) -> None:
    """At most 5 starts per tenant in any second."""
    mark("start", key)
    mark("end", key)


@jobs.job(name="rel.tenant_hourly", limit_by="tenant", rate_limit="3/h", retries=0)
def tenant_hourly(tenant: str, key: str) -> None:
    """At most 3 starts per tenant in any hour: a tenant that had them is saturated."""
    mark("start", key)
    mark("end", key)


@jobs.job(name="rel.async_sleep", retries=0)
async def async_sleep(key: str, seconds: float) -> None:
    from asgiref.sync import sync_to_async

    await asyncio.sleep(seconds)
    await sync_to_async(mark)("end", key)


# --- results no database stores -------------------------------------------------------


@jobs.job(name="rel.unstorable_result", backoff=no_wait)  # the default retries: 4 attempts
def unstorable_result(key: str, text: str, levels: int) -> object:
    """Marks its start, then returns ``text`` inside ``levels`` lists."""
    mark("start", key)
    value: object = text
    for _ in range(levels):
        value = [value]
    return value


@jobs.job(name="rel.held", timeout=600, retries=3, backoff=no_wait)
def held(key: str) -> dict:
    """Marks its start, then runs until a ``release:<key>`` mark exists (at most 5 min)."""
    mark("start", key)
    deadline = time.monotonic() + 300
    while not SideEffect.objects.filter(key=f"release:{key}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rel.held {key!r} was never released")
        time.sleep(0.05)
    mark("end", key)
    return {"pid": os.getpid()}


# --- hostile handlers ----------------------------------------------------------------


class Doom(BaseException):
    """Not an Exception: only ``except BaseException`` catches it."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself is broken")


@jobs.job(name="rel.hostile.system_exit", retries=0)
def system_exit() -> None:
    sys.exit("the handler called sys.exit")


@jobs.job(name="rel.hostile.keyboard_interrupt", retries=0)
def keyboard_interrupt() -> None:
    raise KeyboardInterrupt


@jobs.job(name="rel.hostile.base_exception", retries=0)
def base_exception() -> None:
    raise Doom("a BaseException subclass")


@jobs.job(name="rel.hostile.async_system_exit", retries=0)
async def async_system_exit() -> None:
    raise SystemExit(4)


@jobs.job(name="rel.hostile.hangs", timeout=1, retries=0)
def hangs(seconds: float) -> None:
    time.sleep(seconds)


@jobs.job(name="rel.hostile.hangs_until_released", timeout=1, retries=0)
def hangs_until_released(key: str) -> None:
    """Overruns its 1 s timeout: returns only once a ``release`` mark exists (or after
    a minute), polling for it on its slot's own connection."""
    mark("start", key)
    deadline = time.monotonic() + 60
    while not SideEffect.objects.filter(key="release").exists():
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    mark("end", key)


@receiver(signals.job_timed_out)
def mark_timed_out(sender: str, job: object, timeout: float, **kwargs: object) -> None:
    if sender == "rel.hostile.hangs_until_released":
        mark("timed_out", f"{job.payload['key']}:{timeout:g}")  # type: ignore[attr-defined]


@jobs.job(name="rel.hostile.deep_recursion", retries=0)
def deep_recursion() -> None:
    def down(depth: int) -> int:
        return down(depth + 1) + 1

    down(0)


@jobs.job(name="rel.hostile.huge_message", retries=0)
def huge_message(characters: int) -> None:
    raise ValueError("€" * characters)


@jobs.job(name="rel.hostile.surrogate_message", retries=0)
def surrogate_message() -> None:
    raise ValueError("a lone surrogate \ud800 in the message")


@jobs.job(name="rel.hostile.nul_message", retries=0)
def nul_message() -> None:
    raise ValueError("a NUL \x00 in the message")


@jobs.job(name="rel.hostile.unprintable", retries=0)
def unprintable() -> None:
    raise Unprintable


def exit_hook(job: object, exc: BaseException) -> None:
    raise SystemExit("on_failed called sys.exit")


@jobs.job(name="rel.hostile.exiting_on_failed", retries=0, on_failed=exit_hook)
def exiting_on_failed() -> None:
    raise ValueError("fails, then its on_failed hook exits")


@jobs.job(name="rel.hostile.prints", retries=0)
def prints(megabytes: int) -> None:
    line = "x" * 1023 + "\n"
    for _ in range(megabytes * 1024):
        sys.stdout.write(line)
    sys.stdout.flush()
    print("done printing", file=sys.stderr)


def deeply_nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


RETURNED = {
    "json": lambda: {"ok": ["✓", 1, 2.5, None, True], "nested": {"a": []}},
    "set": lambda: {1, 2, 3},
    "object": object,
    "nan": lambda: float("nan"),
    "nul": lambda: {"text": "a\x00b"},
    "surrogate": lambda: ["\ud800"],
    "deep": lambda: deeply_nested(100_000),
    "huge": lambda: "x" * 20_000_000,
}


@jobs.job(name="rel.hostile.returns", retries=0)
def returns(kind: str) -> object:
    return RETURNED[kind]()


# --- security ----------------------------------------------------------------------


@jobs.job(name="rel.charge_card", retries=1, backoff=no_wait)
def charge_card(card_number: str, api_token: str) -> None:
    """Fails with the secrets in its message, as careless code does."""
    raise ValueError(f"card {card_number} declined (token {api_token})")


INJECTION = "x'); DROP TABLE django_cronqueue_job; -- %s \\' \""
INJECTED_NAME = f"rel.injected{INJECTION}"


@jobs.job(name=INJECTED_NAME, concurrency=1, retries=1, backoff=no_wait)
def injected(text: str, fail: bool = False) -> str:
    """A name, payload, result and error full of SQL: they must only ever be parameters."""
    if fail:
        raise ValueError(text)
    return text


# --- unicode -----------------------------------------------------------------------

UNICODE_NAME = "rel.ünïcødé.名前.🚀.שלום"


@jobs.job(name=UNICODE_NAME, retries=0)
def unicode_job(text: str, nested: dict, fail: bool = False) -> dict:
    mark("unicode", text[:40])
    if fail:
        raise ValueError(f"échec ✗ {text}")
    return {"text": text, "nested": nested}


# --- soak --------------------------------------------------------------------------

FAILURE_RATE = float(os.environ.get("CRONQUEUE_SOAK_FAILURE_RATE", "0.1"))


@jobs.job(name="rel.soak", retries=3, backoff=short_wait)
def soak(n: int) -> None:
    """Records each call, then fails at random (10% by default)."""
    SideEffect.objects.create(key=f"call:{n}", pid=os.getpid())
    if random.random() < FAILURE_RATE:
        raise RuntimeError(f"random failure of {n}")


# --- controlling running work (SPEC section 8) ----------------------------------------


def seen(key: str) -> None:
    """Record the instant (this host's ``time.time()``) a handler saw its cancel, in a
    ``seen:<key>@<seconds>`` mark: the test compares it with its own clock, the same one."""
    mark("seen", f"{key}@{time.time():.6f}")


def mark_on_failed(job: object, exc: BaseException) -> None:
    mark("on_failed", job.payload["key"])  # type: ignore[attr-defined]


@jobs.job(name="rel.ctl.cooperative", timeout=600, retries=3, on_failed=mark_on_failed)
def cooperative(key: str, poll: float = 0.005) -> None:
    """Loops calling ``check_cancelled()`` every ``poll`` seconds (for at most 5 min);
    records the instant it saw the request, then lets ``JobCancelled`` out."""
    context = jobs.current()
    assert context is not None
    mark("start", key)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            context.check_cancelled()
            time.sleep(poll)
    except jobs.JobCancelled:
        seen(key)
        raise
    mark("end", key)


@jobs.job(name="rel.ctl.async_sleeper", timeout=600, retries=3, on_failed=mark_on_failed)
async def async_sleeper(key: str) -> None:
    """Never checks for a cancel: only ``asyncio.CancelledError`` on its loop ends it."""
    from asgiref.sync import sync_to_async

    try:  # the cancel may come while the start mark is being written: inside the try
        await sync_to_async(mark)("start", key)
        for _ in range(6000):  # 5 min
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        await sync_to_async(seen)(key)
        raise
    await sync_to_async(mark)("end", key)


@jobs.job(name="rel.ctl.finishes_anyway", timeout=600, retries=3, on_failed=mark_on_failed)
def finishes_anyway(key: str) -> dict:
    """Waits for its cancel request (at most 5 min), then returns normally all the same."""
    context = jobs.current()
    assert context is not None
    mark("start", key)
    deadline = time.monotonic() + 300
    while not context.cancel_requested and time.monotonic() < deadline:
        time.sleep(0.01)
    seen(key)
    return {"saw_cancel": context.cancel_requested}


@jobs.job(name="rel.ctl.snoozer", retries=0)
def snoozer(key: str, times: int, seconds: float, pause: bool = False) -> dict:
    """Snoozes ``seconds`` on each of its first ``times`` runs, then succeeds. No retry
    is allowed: a snooze must not use up the single attempt. With ``pause``, the first
    snooze also pauses this job's name (the test resumes it)."""
    runs = SideEffect.objects.filter(key=f"start:{key}").count()
    mark("start", key)
    context = jobs.current()
    assert context is not None
    if runs < times:
        if pause and runs == 0:
            jobs.pause(name=context.name, reason="the test looks at the snoozed row")
        mark("snooze", key)
        raise jobs.Snooze(seconds=seconds)
    return {"runs": runs + 1, "attempt": context.attempt}


@jobs.job(name="rel.ctl.progress", timeout=600, retries=0)
def progress(key: str, writes: int, min_calls: int) -> dict:
    """Calls ``set_progress`` in a tight loop until the worker's heartbeat has stored
    ``writes`` different values of it (read back from the row) and it made at least
    ``min_calls`` calls; then sets a last value and returns the number of calls."""
    from django_cronqueue.models import Job

    context = jobs.current()
    assert context is not None
    mark("start", key)
    calls = 0
    stored: set[str] = set()
    deadline = time.monotonic() + 300
    while len(stored) < writes or calls < min_calls:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the heartbeat stored {len(stored)} progress values")
        for _ in range(500):
            calls += 1
            context.set_progress(calls, message=f"call {calls}")
        value = Job.objects.filter(pk=context.job_id).values_list("progress", flat=True).get()
        if value is not None:
            stored.add(value["message"])
    calls += 1
    context.set_progress(calls, total=calls, message="done")
    return {"calls": calls, "stored": len(stored)}


@jobs.job(name="rel.ctl.paused_name", retries=0)
def paused_name(key: str) -> None:
    mark("start", key)


# --- worker pools and time limits ---------------------------------------------------

_leaked: list[bytes] = []


def mark_failed(job, exc) -> None:
    mark("on_failed", f"{job.payload.get('key')}:{type(exc).__name__}")


@jobs.job(name="rel.pool.c_sleep", timeout=2, retries=1, backoff=no_wait, on_failed=mark_failed)
def c_sleep(key: str) -> None:
    """Stuck in C code: only killing its process ends it."""
    import ctypes
    import ctypes.util

    mark("start", key)
    ctypes.CDLL(ctypes.util.find_library("c")).sleep(1000)
    mark("end", key)


@jobs.job(name="rel.pool.c_sleep_long", timeout=60, retries=1)
def c_sleep_long(key: str) -> None:
    c_sleep.func(key)


@jobs.job(name="rel.pool.exits", retries=0)
def exits(key: str, status: int) -> None:
    mark("start", key)
    os._exit(status)


@jobs.job(name="rel.pool.leaks", retries=0)
def leaks(key: str, megabytes: int) -> None:
    """Keeps ``megabytes`` more of resident memory for as long as its process lives."""
    mark("start", key)
    _leaked.append(b"x" * (megabytes * 1024 * 1024))


@jobs.job(name="rel.pool.overruns", timeout=1, retries=1, backoff=no_wait)
def overruns(key: str, seconds: float) -> None:
    """Sleeps past its timeout (a thread cannot be stopped): never two runs at once."""
    mark("start", key)
    time.sleep(seconds)
    mark("end", key)


class TwoArgumentError(Exception):
    """Pickles (as its message only) but cannot be unpickled: ``__init__`` wants two."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


@jobs.job(name="rel.pool.returns_unreadable", retries=0)
def returns_unreadable(key: str) -> TwoArgumentError:
    """Returns (not raises) a value that cannot travel back from a child process."""
    mark("start", key)
    return TwoArgumentError(1, key)


@jobs.job(name="rel.pool.noop", retries=0)
def noop(key: str) -> None:
    """Quick (no query): a slot's claims grow while it runs these, so that the jobs
    enqueued behind them are claimed, and sent to a child, together."""


@jobs.job(name="rel.pool.waits", timeout=600, retries=0)
def waits(key: str, release: str) -> dict:
    """Cooperative: sets its progress and checks for a cancel while it waits for a
    ``release:<release>`` mark (at most 5 min); returns a value."""
    mark("start", key)
    context = jobs.current()
    assert context is not None
    deadline = time.monotonic() + 300
    while not SideEffect.objects.filter(key=f"release:{release}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key!r} was never released")
        context.set_progress(time.monotonic() % 300, 300)
        context.check_cancelled()
        time.sleep(0.05)
    mark("end", key)
    return {"key": key}


@jobs.job(name="rel.pool.c_sleep_15", timeout=15, retries=0)
def c_sleep_15(key: str) -> None:
    c_sleep.func(key)


@jobs.job(name="rel.pool.dies_after_reporting", retries=0)
def dies_after_reporting(key: str) -> None:
    """Ends its child process as soon as the child has sent this job's report: after
    this job, before the child starts its next one."""
    mark("start", key)

    def exit_after_the_report(frame, event, arg) -> None:  # type: ignore[no-untyped-def]
        code = frame.f_code
        if (
            event == "return"
            and code.co_name == "send"
            and code.co_filename.endswith(os.path.join("multiprocessing", "connection.py"))
        ):
            os._exit(7)

    sys.setprofile(exit_after_the_report)


@jobs.job(name="rel.pool.async_sleeps", timeout=2, retries=0)
async def async_sleeps(key: str, seconds: float) -> None:
    """The asyncio pool's job: awaits ``seconds`` (past its 2 s timeout: cancelled)."""
    await asyncio.sleep(seconds)


@jobs.job(name="rel.pool.short_timeout", timeout=1, retries=0)
def short_timeout(key: str, seconds: float) -> dict:
    """Returns a value, but only after ``seconds``: past its 1 s timeout, well within a
    heartbeat of the default 30 s lease."""
    mark("start", key)
    time.sleep(seconds)
    mark("end", key)
    return {"key": key}


@jobs.job(name="rel.pool.async_short_timeout", timeout=1, retries=0)
async def async_short_timeout(key: str, seconds: float) -> dict:
    """``short_timeout`` as an ``async def`` handler (the thread pool runs it on an event
    loop of its slot thread, and cancels it only when the heartbeat sees the overrun)."""
    from asgiref.sync import sync_to_async

    await sync_to_async(mark)("start", key)
    await asyncio.sleep(seconds)
    await sync_to_async(mark)("end", key)
    return {"key": key}


# --- the asyncio pool: connections, shutdown, a handler's own TimeoutError ------------


@jobs.job(name="rel.pool.queries", retries=12, backoff=no_wait)
def queries(key: str) -> None:
    """Queries the database from the thread it runs on (the asyncio pool's executor)."""
    mark("end", key)


@jobs.job(name="rel.pool.async_queries", retries=12, backoff=no_wait)
async def async_queries(key: str) -> None:
    """Queries the database through the async ORM (``sync_to_async``'s thread)."""
    await SideEffect.objects.acreate(key=f"end:{key}", pid=os.getpid())


@jobs.job(name="rel.pool.async_held", timeout=600, retries=3, backoff=no_wait)
async def async_held(key: str) -> None:
    """Marks its start, then awaits a ``release:<key>`` mark (at most 5 min), marks its end."""
    from asgiref.sync import sync_to_async

    released = sync_to_async(SideEffect.objects.filter(key=f"release:{key}").exists)
    await sync_to_async(mark)("start", key)
    for _ in range(3000):
        if await released():
            break
        await asyncio.sleep(0.1)
    await sync_to_async(mark)("end", key)


class UpstreamTimedOut(TimeoutError):
    """What an HTTP client raises when its own deadline passes."""


@jobs.job(
    name="rel.pool.upstream_timeout",
    timeout=30,
    retries=2,
    retry_on=(TimeoutError,),
    backoff=no_wait,
)
def upstream_timeout(key: str) -> None:
    """Its upstream call times out at once: an ordinary error, retried by ``retry_on``."""
    mark("start", key)
    raise UpstreamTimedOut(f"{key}: the upstream call timed out")


@jobs.job(
    name="rel.pool.async_upstream_timeout",
    timeout=30,
    retries=2,
    # Until Python 3.11 asyncio.wait_for raises asyncio.TimeoutError, not the builtin.
    retry_on=(TimeoutError, asyncio.TimeoutError),
    backoff=no_wait,
)
async def async_upstream_timeout(key: str) -> None:
    """``asyncio.wait_for`` around its upstream call raises TimeoutError: retried."""
    from asgiref.sync import sync_to_async

    await sync_to_async(mark)("start", key)
    await asyncio.wait_for(asyncio.sleep(60), 0.01)

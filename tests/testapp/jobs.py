"""Jobs used by the test suite, discovered like any app's jobs.py."""

import builtins
import datetime as dt
import os
import time

from django_cronqueue import jobs
from tests.testapp.models import SideEffect


@jobs.job
def record(key: str) -> None:
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job(retries=0)
def sleep_then_record(key: str, seconds: float) -> None:
    time.sleep(seconds)
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job(retries=2, backoff=lambda attempt: 0)
def always_fails(reason: str = "boom") -> None:
    raise RuntimeError(reason)


@jobs.job
def noop() -> None:
    return None


@jobs.job(retries=3, backoff=lambda attempt: 0)
def slow_record(key: str, seconds: float) -> None:
    """Sleeps, then records: a run killed mid-way leaves no side effect."""
    time.sleep(seconds)
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job(concurrency=2)
def capped(key: str) -> None:
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job
async def async_record(key: str) -> str:
    from asgiref.sync import sync_to_async

    await sync_to_async(SideEffect.objects.create)(key=key, pid=os.getpid())
    return key


FAILURES_SEEN: list[tuple[int, str]] = []


def remember_failure(job, exc) -> None:
    FAILURES_SEEN.append((job.pk, type(exc).__name__))


@jobs.job(retries=1, backoff=lambda attempt: 0, on_failed=remember_failure)
def fails_with_hook() -> None:
    raise ValueError("always")


def broken_hook(job, exc) -> None:
    raise RuntimeError("the hook itself is broken")


@jobs.job(retries=0, on_failed=broken_hook)
def fails_with_broken_hook() -> None:
    raise ValueError("always")


@jobs.job(retries=0)
def exits() -> None:
    raise SystemExit(3)


@jobs.job(retries=0)
def returns_value(value: int) -> dict:
    return {"doubled": value * 2}


@jobs.job(timeout=1, retries=1, backoff=lambda attempt: 0)
def hangs(key: str, seconds: float) -> None:
    """Overruns its one-second timeout."""
    time.sleep(seconds)
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job(retries=0)
def fails_with_value_error(message: str) -> None:
    raise ValueError(message)


# --- control of running work (jobs.current(), cancel, snooze, progress) -------------

CONTEXTS_SEEN: list = []


@jobs.job
def reports_context(key: str) -> None:
    CONTEXTS_SEEN.append(jobs.current())


@jobs.job
async def async_reports_context(key: str) -> None:
    CONTEXTS_SEEN.append(jobs.current())


@jobs.job(retries=3, backoff=lambda attempt: 0, on_failed=remember_failure)
def cancels_itself(reason: str) -> None:
    """Asks for its own cancel, as an operator would from elsewhere, then checks."""
    context = jobs.current()
    jobs.cancel(context.job_id, reason=reason, by="tests")
    context.check_cancelled()


@jobs.job(retries=3, backoff=lambda attempt: 0)
def snoozes(seconds: float) -> None:
    raise jobs.Snooze(seconds=seconds)


@jobs.job
def reports_progress(steps: int) -> None:
    context = jobs.current()
    for step in range(1, steps + 1):
        context.set_progress(step, total=steps, message=f"step {step}")


@jobs.job(retries=3)
def reports_a_file_name(raw_name: str) -> str:
    """Progress naming a file as os.listdir() gives it: a name that is not UTF-8 holds
    lone surrogates (b"\\xff" -> "\\udcff")."""
    name = os.fsdecode(raw_name.encode("latin-1"))
    jobs.current().set_progress(1, total=1, message=f"read {name}\x00")
    SideEffect.objects.create(key=raw_name, pid=os.getpid())
    return "done"


# --- flow control (limit_by, rate_limit) -------------------------------------------


@jobs.job(limit_by="tenant", concurrency=2)
def per_tenant(tenant: str, key: str = "") -> None:
    SideEffect.objects.create(key=f"{tenant}:{key}", pid=os.getpid())


@jobs.job(limit_by="tenant", rate_limit="2/m")
def rated(tenant: object, key: str = "") -> None:
    SideEffect.objects.create(key=f"{tenant}:{key}", pid=os.getpid())


@jobs.job(rate_limit=(3, dt.timedelta(hours=1)), concurrency=2)
def name_rated(key: str = "") -> None:
    SideEffect.objects.create(key=key, pid=os.getpid())


def region_of(payload: dict) -> str:
    return str(payload["address"]["region"]).lower()


@jobs.job(limit_by=region_of, rate_limit="1/s", concurrency=1)
def by_region(address: dict) -> None:
    SideEffect.objects.create(key=region_of({"address": address}), pid=os.getpid())


# --- dynamic schedules (CronSchedule.objects.create_dynamic) ------------------------


@jobs.job
def send_report(tenant_id: int, format: str = "html") -> None:
    """Records the tenant, the format and the occurrence it runs for."""
    scheduled_for = jobs.current().scheduled_for
    when = scheduled_for.isoformat() if scheduled_for else "manual"
    SideEffect.objects.create(key=f"report {tenant_id} {format} {when}", pid=os.getpid())


# --- workflows (jobs.chain, jobs.group, using(after=...)) ---------------------------

BATCHES_SEEN: list = []


@jobs.job
def collect_batch(key: str) -> None:
    """A group's callback: what it sees of its batch when it runs."""
    batch = jobs.current().batch
    BATCHES_SEEN.append(
        (key, batch.size, batch.succeeded, batch.failed, batch.member_ids, batch.results())
    )
    SideEffect.objects.create(key=key, pid=os.getpid())


UPSTREAM_SEEN: list[tuple[str, dict]] = []


@jobs.job
def collect_upstream(key: str) -> None:
    """Remembers the results of the jobs it waited for (in-process tests only)."""
    UPSTREAM_SEEN.append((key, jobs.current().upstream_results()))


@jobs.job(retries=0)
def fails_now(key: str) -> None:
    raise RuntimeError(f"{key} failed")


@jobs.job(retries=0)
def fails_until_fixed(key: str) -> None:
    """Fails until a ``SideEffect`` row ``fixed <key>`` says its cause was fixed (as an
    operator would before a retry); then records ``key``."""
    if not SideEffect.objects.filter(key=f"fixed {key}").exists():
        raise RuntimeError(f"{key} failed: not fixed yet")
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job(retries=0)
def records_types(**values: object) -> None:
    """One SideEffect per argument: ``name=type:value`` of what the handler received."""
    for name, value in values.items():
        SideEffect.objects.create(key=f"{name}={type(value).__name__}:{value}", pid=os.getpid())


@jobs.job(
    retries=3,
    backoff=lambda attempt: 0,
    retry_on=(ConnectionError,),
    discard_on=(LookupError,),
    on_failed=remember_failure,
)
def fails_by_policy(key: str, error: str) -> None:
    """Raises ``error`` (a builtin exception's name, or "discard" for jobs.Discard)."""
    SideEffect.objects.create(key=key, pid=os.getpid())
    if error == "discard":
        raise jobs.Discard(f"gave up on {key}")
    raise getattr(builtins, error)(key)

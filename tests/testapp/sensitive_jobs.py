"""Jobs with sensitive arguments (SPEC section 16). Not discovered by default: tests
register them (``sensitive_defined``), workers import them when
``CRONQUEUE["DISCOVER"]`` lists ``sensitive_jobs``. Each handler records a digest of
what it received, so a test can tell it saw the clear values without storing them."""

import asyncio
import hashlib
import json
import os

from django_cronqueue import jobs, signals

from .models import SideEffect


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


@jobs.job(name="sensitive.charge", sensitive=("card_token", "email"), retries=0)
def charge(order_id: int, card_token: str, email: str) -> int:
    SideEffect.objects.create(key=digest(card_token + email), pid=os.getpid())
    return order_id


@jobs.job(name="sensitive.everything", sensitive=True, retries=0)
def everything(email: str) -> dict[str, str]:
    SideEffect.objects.create(key=digest(email), pid=os.getpid())
    return {"echo": email}


@jobs.job(name="sensitive.declined", sensitive=("card_token",), retries=1)
def declined(card_token: str) -> None:
    SideEffect.objects.create(key=digest(card_token), pid=os.getpid())
    raise ValueError("the card was declined")


@jobs.job(name="sensitive.charge_async", sensitive=("card_token",), retries=0)
async def charge_async(card_token: str) -> None:
    await asyncio.sleep(0)
    await SideEffect.objects.acreate(key=digest(card_token), pid=os.getpid())


HANDLES = (charge, everything, declined, charge_async)

# A worker started with CRONQUEUE_TEST_SIGNAL_LOG writes what each signal receiver gets
# (the job's payload, the result) to that file, one JSON line per signal.
SIGNAL_LOG = os.environ.get("CRONQUEUE_TEST_SIGNAL_LOG")


def _write_signal(sender, job=None, result=None, **kwargs):
    line = json.dumps({"name": sender, "payload": getattr(job, "payload", None), "result": result})
    with open(SIGNAL_LOG, "a") as log:
        log.write(line + "\n")


if SIGNAL_LOG:
    for signal in (signals.job_started, signals.job_succeeded, signals.job_failed):
        signal.connect(_write_signal, dispatch_uid=f"sensitive-{id(signal)}")

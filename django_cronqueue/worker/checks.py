"""System checks of the worker pools and time limits (ids E030-E034, in
docs/settings.md): the ``POOL``, ``TIMEOUT_GRACE`` and per-child limit settings, and
each job's ``soft_timeout`` against its ``timeout`` and the pool that will run it."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

from ..conf import get_settings, user_settings
from ..definitions.registry import registry
from ..values.validation import is_finite_number, is_int

POOLS = ("threads", "processes", "asyncio")
CHECK_ID = "django_cronqueue.{}"

# The pool this process's runjobs was started with (--pool), when it differs from
# CRONQUEUE['POOL']: the soft_timeout check judges the pool that will run the jobs.
pool_in_use: str | None = None


def _error(message: str, hint: str, number: str) -> Error:
    return Error(message, hint=hint, id=CHECK_ID.format(number))


@register(Tags.compatibility)
def check_pools(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = user_settings()
    messages: list[CheckMessage] = []
    if "POOL" in raw and raw["POOL"] not in POOLS:
        messages.append(
            _error(
                f"CRONQUEUE['POOL'] must be one of {', '.join(POOLS)}, got {raw['POOL']!r}.",
                "Fix or remove CRONQUEUE['POOL'] in your settings.",
                "E030",
            )
        )
    grace = raw.get("TIMEOUT_GRACE", 60)
    if not is_finite_number(grace) or grace < 0:
        messages.append(
            _error(
                f"CRONQUEUE['TIMEOUT_GRACE'] must be a number of seconds >= 0, got {grace!r}.",
                "Fix or remove CRONQUEUE['TIMEOUT_GRACE'] in your settings.",
                "E033",
            )
        )
    for key in ("MAX_JOBS_PER_CHILD", "MAX_MEMORY_PER_CHILD"):
        value = raw.get(key)
        if value is not None and (not is_int(value) or value < 1):
            messages.append(
                _error(
                    f"CRONQUEUE['{key}'] must be an integer >= 1, or None for no limit, "
                    f"got {value!r}.",
                    f"Fix or remove CRONQUEUE['{key}'] in your settings.",
                    "E034",
                )
            )
    if not messages:
        messages.extend(_check_soft_timeouts())
    return messages


def _check_soft_timeouts() -> list[CheckMessage]:
    pool = pool_in_use or get_settings().POOL
    messages: list[CheckMessage] = []
    for definition in registry:
        soft = definition.soft_timeout
        if soft is None:
            continue
        timeout = definition.effective_timeout
        if soft >= timeout:
            messages.append(
                _error(
                    f"Job {definition.name!r}: soft_timeout={soft:g} must be less than its "
                    f"timeout ({timeout:g} s): the hard limit would come first.",
                    "Lower soft_timeout, or raise timeout (or CRONQUEUE['DEFAULT_TIMEOUT']).",
                    "E031",
                )
            )
        elif pool != "processes" and not definition.is_async:
            messages.append(
                _error(
                    f"Job {definition.name!r}: soft_timeout= needs the process pool for a "
                    f"sync handler ({pool} pool here): a thread cannot be interrupted.",
                    "Run it with runjobs --pool processes (or CRONQUEUE['POOL'] = "
                    "'processes'), make the handler async def, or remove soft_timeout.",
                    "E032",
                )
            )
    return messages

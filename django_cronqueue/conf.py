"""The ``CRONQUEUE`` setting: one dict merged onto typed defaults.

Read it with :func:`get_settings`; the result is cached and dropped whenever
``override_settings`` (or anything else) changes ``CRONQUEUE`` or ``DATABASES``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver


@dataclass(frozen=True)
class CronQueueSettings:
    POLL_INTERVAL: float = 1.0
    CONCURRENCY: int = 1
    DEFAULT_RETRIES: int = 3
    DEFAULT_TIMEOUT: float = 60
    LEASE: float = 30
    SUCCEEDED_RETENTION: float | None = 86400
    FAILED_RETENTION: float | None = None
    CATCH_UP_WINDOW: float = 3600
    DATABASE: str = "default"
    # A read-only copy of DATABASE (a replica) for the dashboard and MetricsView; None: DATABASE.
    READ_DATABASE: str | None = None
    DEFAULT_QUEUE: str = "default"
    SHUTDOWN_TIMEOUT: float = 30
    PREFETCH: int = 10
    PRUNE_BATCH_SIZE: int = 1000
    MAX_PAYLOAD_BYTES: int = 1_000_000
    WORKER_CONN_MAX_AGE: float | None = 600
    # PostgreSQL: prepare the worker's claim statements once per connection. None: yes,
    # unless the alias sets DISABLE_SERVER_SIDE_CURSORS (a pooler in transaction mode).
    PREPARED_STATEMENTS: bool | None = None
    MAX_CLOCK_SKEW: float | None = None  # None: a third of LEASE (see max_clock_skew)
    POOL: str = "threads"  # runjobs' default --pool: threads, processes or asyncio
    # Seconds a thread-pool handler may stay past its timeout before the worker exits
    # (its supervisor restarts it; the lease of that run is kept until then).
    TIMEOUT_GRACE: float = 60
    MAX_JOBS_PER_CHILD: int | None = None  # process pool: replace a child after N jobs
    MAX_MEMORY_PER_CHILD: int | None = None  # process pool: MB of resident set after a job
    EAGER: bool = (
        False  # tests: enqueue runs the handler at once (django_cronqueue.enqueueing.eager)
    )
    DISCOVER: tuple[str, ...] = ("jobs",)  # modules imported from every installed app
    # PostgreSQL: the worker warns when a transaction on the queue's database has been
    # open this many seconds, or the job table holds this many dead rows (None: never).
    WARN_TRANSACTION_AGE: float | None = 300
    WARN_DEAD_TUPLES: int | None = 1_000_000
    # {"AFTER": s, "EVERY": s}: a due pending job ranks one priority higher for every EVERY
    # seconds it has waited beyond AFTER past its run_at (claiming.aging). None: off.
    PRIORITY_AGING: dict[str, float] | None = None
    # Fernet keys of sensitive arguments (integrations.encryption): the first encrypts,
    # every one decrypts. Empty: no job may be defined with sensitive=.
    ENCRYPTION_KEYS: tuple[str, ...] = ()


DEFAULTS = CronQueueSettings()
KNOWN_KEYS = frozenset(field.name for field in dataclasses.fields(CronQueueSettings))

_cached: CronQueueSettings | None = None


def user_settings() -> dict[str, Any]:
    """The raw ``CRONQUEUE`` dict (empty when unset)."""
    value = getattr(django_settings, "CRONQUEUE", None)
    return value if isinstance(value, dict) else {}


def get_settings() -> CronQueueSettings:
    """The effective settings: ``CRONQUEUE`` merged onto the defaults.

    Unknown keys are ignored here; the system checks report them.
    """
    global _cached
    if _cached is None:
        known = {key: value for key, value in user_settings().items() if key in KNOWN_KEYS}
        _cached = dataclasses.replace(DEFAULTS, **known)
    return _cached


def is_module_list(value: Any) -> bool:
    """A list or tuple of module names (``"tasks"``, ``"jobs.billing"``)."""
    return isinstance(value, (list, tuple)) and all(
        isinstance(name, str) and name and all(part.isidentifier() for part in name.split("."))
        for name in value
    )


def discover_modules() -> tuple[str, ...]:
    """``DISCOVER``, or the default when it is not a list of module names (E022 says so)."""
    value = get_settings().DISCOVER
    return tuple(value) if is_module_list(value) else DEFAULTS.DISCOVER


def is_priority_aging(value: Any) -> bool:
    """``{"AFTER": seconds >= 0, "EVERY": seconds > 0}``, nothing else."""
    return (
        isinstance(value, dict)
        and set(value) == {"AFTER", "EVERY"}
        and all(_is_seconds(value[key]) for key in value)
        and value["AFTER"] >= 0
        and value["EVERY"] > 0
    )


def _is_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def priority_aging() -> tuple[float, float] | None:
    """(AFTER, EVERY) in seconds when ``PRIORITY_AGING`` is on and valid, else None (a bad
    value is refused by system check E048, and ages nothing)."""
    aging = get_settings().PRIORITY_AGING
    if aging is None or not is_priority_aging(aging):
        return None
    return float(aging["AFTER"]), float(aging["EVERY"])


def database_alias() -> str:
    return get_settings().DATABASE


def read_database_alias() -> str:
    """Where the read-only screens (the admin dashboard, ``MetricsView``) read the queue:
    ``READ_DATABASE``, or ``DATABASE`` when unset."""
    settings = get_settings()
    return settings.READ_DATABASE or settings.DATABASE


def max_clock_skew() -> float:
    """Seconds a worker's clock may be off the database's before it refuses to claim:
    ``MAX_CLOCK_SKEW``, or a third of ``LEASE`` (the heartbeat's interval) when unset."""
    settings = get_settings()
    if settings.MAX_CLOCK_SKEW is None:
        return float(settings.LEASE) / 3
    return float(settings.MAX_CLOCK_SKEW)


@receiver(setting_changed)
def _drop_cache(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting in ("CRONQUEUE", "DATABASES", "TIME_ZONE", "USE_TZ"):
        _cached = None

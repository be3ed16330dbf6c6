"""System checks of the ``CRONQUEUE`` setting and the database.

Every id is stable and documented in docs/settings.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from .conf import KNOWN_KEYS, is_module_list, is_priority_aging, user_settings
from .values.validation import MAX_QUEUE_LENGTH, is_finite_number, is_int, is_queue_name

CHECK_ID = "django_cronqueue.{}"


# Numbers must be finite: inf would overflow the timedeltas built from them (None means
# "forever" where that is allowed).
_is_number = is_finite_number
_is_int = is_int

# key -> (check id, test, what the value must be)
RULES: dict[str, tuple[str, Callable[[Any], bool], str]] = {
    "POLL_INTERVAL": ("E002", lambda v: _is_number(v) and v > 0, "a number of seconds > 0"),
    "CONCURRENCY": ("E003", lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "DEFAULT_RETRIES": ("E004", lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "DEFAULT_TIMEOUT": ("E005", lambda v: _is_number(v) and v > 0, "a number of seconds > 0"),
    "LEASE": ("E006", lambda v: _is_number(v) and v >= 1, "a number of seconds >= 1"),
    "SUCCEEDED_RETENTION": (
        "E007",
        lambda v: v is None or (_is_number(v) and v >= 0),
        "a number of seconds >= 0, or None to keep rows forever",
    ),
    "FAILED_RETENTION": (
        "E008",
        lambda v: v is None or (_is_number(v) and v >= 0),
        "a number of seconds >= 0, or None to keep rows forever",
    ),
    "CATCH_UP_WINDOW": ("E009", lambda v: _is_number(v) and v > 0, "a number of seconds > 0"),
    "DEFAULT_QUEUE": (
        "E011",
        is_queue_name,
        f"a non-empty string of at most {MAX_QUEUE_LENGTH} characters",
    ),
    "SHUTDOWN_TIMEOUT": ("E012", lambda v: _is_number(v) and v >= 0, "a number of seconds >= 0"),
    "PREFETCH": ("E013", lambda v: _is_int(v) and 1 <= v <= 100, "an integer from 1 to 100"),
    "PRUNE_BATCH_SIZE": ("E014", lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "MAX_PAYLOAD_BYTES": ("E015", lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "WORKER_CONN_MAX_AGE": (
        "E016",
        lambda v: v is None or (_is_number(v) and v >= 0),
        "a number of seconds >= 0, or None to keep Django's CONN_MAX_AGE",
    ),
    "EAGER": ("E019", lambda v: isinstance(v, bool), "True or False"),
    "DISCOVER": (
        "E022",
        is_module_list,
        'a list or tuple of module names, e.g. ("jobs", "tasks")',
    ),
    "MAX_CLOCK_SKEW": (
        "E021",
        lambda v: v is None or (_is_number(v) and v > 0),
        "a number of seconds > 0, or None for a third of LEASE",
    ),
    "WARN_TRANSACTION_AGE": (
        "E045",
        lambda v: v is None or (_is_number(v) and v > 0),
        "a number of seconds > 0, or None to never warn",
    ),
    "WARN_DEAD_TUPLES": (
        "E046",
        lambda v: v is None or (_is_int(v) and v >= 1),
        "an integer >= 1, or None to never warn",
    ),
    "PRIORITY_AGING": (
        "E048",
        lambda v: v is None or is_priority_aging(v),
        'a dict {"AFTER": seconds >= 0, "EVERY": seconds > 0}, or None for no aging',
    ),
    "PREPARED_STATEMENTS": (
        "E047",
        lambda v: v is None or isinstance(v, bool),
        "True, False, or None to prepare unless DISABLE_SERVER_SIDE_CURSORS is set",
    ),
}

MINIMUM_VERSIONS = {"sqlite": (3, 35), "postgresql": (13,), "mysql": (8, 0), "mariadb": (10, 6)}


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, "CRONQUEUE", None)
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [
            Error(
                f"CRONQUEUE must be a dict, got {type(raw).__name__}.",
                hint='Write CRONQUEUE = {"POLL_INTERVAL": 1.0, ...} in your settings.',
                id=CHECK_ID.format("E001"),
            )
        ]
    messages: list[CheckMessage] = []
    for key, value in raw.items():
        if key not in KNOWN_KEYS:
            messages.append(_unknown_key(key))
            continue
        if key == "DATABASE":
            messages.extend(_check_database_key(value))
            continue
        if key not in RULES:  # the worker pool keys: django_cronqueue.worker.checks
            continue
        check_id, valid, expected = RULES[key]
        if not valid(value):
            messages.append(
                Error(
                    f"CRONQUEUE['{key}'] must be {expected}, got {value!r}.",
                    hint=f"Fix or remove CRONQUEUE['{key}'] in your settings.",
                    id=CHECK_ID.format(check_id),
                )
            )
    messages.extend(_check_lease(raw))
    messages.extend(_check_clock_skew(raw))
    return messages


def _unknown_key(key: Any) -> CheckMessage:
    close = difflib.get_close_matches(str(key), sorted(KNOWN_KEYS), n=1)
    hint = (
        f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(sorted(KNOWN_KEYS))}."
    )
    return Warning(
        f"CRONQUEUE has an unknown key {key!r}; it is ignored.",
        hint=hint,
        id=CHECK_ID.format("W001"),
    )


def _check_database_key(value: Any) -> list[CheckMessage]:
    if isinstance(value, str) and value in settings.DATABASES:
        return []
    return [
        Error(
            f"CRONQUEUE['DATABASE'] is {value!r}, which is not an alias in DATABASES.",
            hint=f"Use one of: {', '.join(settings.DATABASES)}.",
            id=CHECK_ID.format("E010"),
        )
    ]


MIN_SAFE_LEASE = 5


def _check_lease(raw: dict[str, Any]) -> list[CheckMessage]:
    """The heartbeat renews leases every LEASE/3 seconds; a very short lease leaves no
    room for a slow database or a long pause, and a live job would be run twice."""
    lease = raw.get("LEASE", 30)
    if _is_number(lease) and 1 <= lease < MIN_SAFE_LEASE:
        return [
            Warning(
                f"CRONQUEUE['LEASE'] is {lease}s: heartbeats come every {lease / 3:.2g}s, so a "
                "database stall or a pause that long makes a live job look lost and run twice.",
                hint=f"Use a LEASE of at least {MIN_SAFE_LEASE} seconds (the default is 30).",
                id=CHECK_ID.format("W002"),
            )
        ]
    return []


def _check_clock_skew(raw: dict[str, Any]) -> list[CheckMessage]:
    """A worker's clock correction is as fresh as its last heartbeat (every LEASE/3 s); a
    clock stepped by more than 2/3 LEASE in between makes live leases look expired. A
    worker refuses to claim beyond MAX_CLOCK_SKEW, which should keep a step below that."""
    skew, lease = raw.get("MAX_CLOCK_SKEW"), raw.get("LEASE", 30)
    if not (_is_number(skew) and _is_number(lease) and lease >= 1 and skew > lease / 3):
        return []
    return [
        Warning(
            f"CRONQUEUE['MAX_CLOCK_SKEW'] is {skew}s, more than a third of LEASE "
            f"({lease / 3:.3g}s): a worker corrects its clock at each heartbeat, and a clock "
            "stepped by that much in between can make a live job's lease look expired.",
            hint="Use at most LEASE / 3 seconds, or remove the key (the default is LEASE / 3).",
            id=CHECK_ID.format("W004"),
        )
    ]


@register(Tags.compatibility)
def check_time_zone_support(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if settings.USE_TZ:
        return []
    return [
        Error(
            "django-cronqueue needs USE_TZ = True: leases, run_at and cron occurrences are "
            "instants, and cron schedules need aware datetimes.",
            hint="Set USE_TZ = True in your settings (Django's default since 5.0).",
            id=CHECK_ID.format("E018"),
        )
    ]


def _queue_alias(databases: Any) -> str | None:
    """The alias of the queue's database, if a command asked for checks of it."""
    alias = user_settings().get("DATABASE", "default")
    if not isinstance(alias, str) or not databases or alias not in databases:
        return None
    if alias not in connections:  # E010 reports an unknown alias
        return None
    return alias


@register(Tags.database)
def check_database_version(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Runs only when a command asks for database checks (e.g. migrate)."""
    alias = _queue_alias(databases)
    if alias is None:
        return []
    connection = connections[alias]
    vendor = connection.vendor
    if vendor == "mysql" and getattr(connection, "mysql_is_mariadb", False):
        vendor = "mariadb"
    minimum = MINIMUM_VERSIONS.get(vendor)
    if minimum is None:
        return [
            Error(
                f"django-cronqueue does not support the {connection.vendor!r} database "
                f"(DATABASES[{alias!r}]).",
                hint="Use PostgreSQL >= 13, MySQL >= 8.0, MariaDB >= 10.6 or SQLite >= 3.35.",
                id=CHECK_ID.format("E017"),
            )
        ]
    version = tuple(connection.get_database_version())
    if version[: len(minimum)] < minimum:
        wanted = ".".join(map(str, minimum))
        found = ".".join(map(str, version))
        return [
            Error(
                f"django-cronqueue needs {vendor} >= {wanted}; DATABASES[{alias!r}] runs {found}.",
                hint="Upgrade the database server (SKIP LOCKED and RETURNING are required).",
                id=CHECK_ID.format("E017"),
            )
        ]
    return []


# What the server decodes statements with and converts their text through before it
# reaches a column: both must hold every character a column of utf8mb4 can.
CHARSET_VARIABLES = ("character_set_client", "character_set_connection")


@register(Tags.database)
def check_database_charset(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """On MySQL and MariaDB, the connection must speak utf8mb4: with utf8mb3 (``utf8``)
    any 4-byte character (an emoji) in a payload, queue name or error is refused."""
    alias = _queue_alias(databases)
    if alias is None or connections[alias].vendor != "mysql":
        return []
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT @@character_set_client, @@character_set_connection")
        row = cursor.fetchone()
    wrong = [
        f"{name}={value}"
        for name, value in zip(CHARSET_VARIABLES, row, strict=True)
        if value != "utf8mb4"
    ]
    if not wrong:
        return []
    return [
        Warning(
            f"The connection of DATABASES[{alias!r}] does not use utf8mb4 ({', '.join(wrong)}): "
            "payloads, queue names and errors with 4-byte characters (emoji) cannot be "
            "stored; errors are then stored with their non-ASCII characters escaped.",
            hint=f'Set DATABASES[{alias!r}]["OPTIONS"]["charset"] = "utf8mb4" (Django\'s '
            "default), and remove any init_command that sets another character set.",
            id=CHECK_ID.format("W003"),
        )
    ]


@register(Tags.compatibility)
def check_runjobs_not_shadowed(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Django runs the ``runjobs`` of the app listed first in INSTALLED_APPS; another
    app's (django-extensions has one) would take ``runjobs`` arguments it does not know,
    or run something else and exit 0 under a process manager."""
    from django.core.management import get_commands

    owner = get_commands().get("runjobs")
    if owner in (None, "django_cronqueue"):
        return []
    return [
        Warning(
            f"The runjobs command of {owner!r} shadows django-cronqueue's: it is listed "
            "above django_cronqueue in INSTALLED_APPS, so manage.py runjobs runs its "
            "command, not the cronqueue worker.",
            hint=f'List "django_cronqueue" above {owner!r} in INSTALLED_APPS, or run the '
            "worker as manage.py cronqueue_worker (the same command, under a name no other "
            "app uses).",
            id=CHECK_ID.format("W005"),
        )
    ]


STORAGE_WARNING_KEYS = ("WARN_TRANSACTION_AGE", "WARN_DEAD_TUPLES")


@register(Tags.compatibility)
def check_storage_warnings_apply(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The dead-row and open-transaction warnings read PostgreSQL's statistics: set on
    another database, they never fire."""
    raw = user_settings()
    alias = raw.get("DATABASE", "default")
    given = [key for key in STORAGE_WARNING_KEYS if raw.get(key) is not None]
    if not given or not isinstance(alias, str) or alias not in connections:
        return []
    vendor = connections[alias].vendor
    if vendor == "postgresql":
        return []
    return [
        Warning(
            f"CRONQUEUE[{given[0]!r}] is set, but the queue's database is {vendor}: the "
            "dead-row and open-transaction warnings are PostgreSQL's only and never fire.",
            hint=f"Remove {' and '.join(repr(key) for key in given)} from CRONQUEUE.",
            id=CHECK_ID.format("W045"),
        )
    ]

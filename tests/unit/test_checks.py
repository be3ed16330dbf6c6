"""The system checks of the CRONQUEUE setting and of the database."""

import dataclasses
import math
from types import SimpleNamespace

import pytest
from django.core.checks import ERROR, WARNING, run_checks
from django.test import override_settings

from django_cronqueue import checks
from django_cronqueue.checks import check_database_charset, check_database_version, check_settings
from django_cronqueue.conf import DEFAULTS, KNOWN_KEYS, get_settings, max_clock_skew
from django_cronqueue.db.routing_checks import check_read_database, check_routing
from tests.sensitive_keys import KEY_A, KEY_B


def ids(messages):
    return [message.id for message in messages]


def only(messages, check_id):
    assert ids(messages) == [f"django_cronqueue.{check_id}"], [str(m) for m in messages]
    return messages[0]


# --- valid settings -------------------------------------------------------------------

VALID = {
    "POLL_INTERVAL": 0.5,
    "CONCURRENCY": 4,
    "DEFAULT_RETRIES": 0,
    "DEFAULT_TIMEOUT": 300,
    "LEASE": 30,
    "SUCCEEDED_RETENTION": None,
    "FAILED_RETENTION": 0,
    "CATCH_UP_WINDOW": 3600,
    "DATABASE": "default",
    "READ_DATABASE": "default",
    "DEFAULT_QUEUE": "emails",
    "SHUTDOWN_TIMEOUT": 0,
    "PREFETCH": 100,
    "PRUNE_BATCH_SIZE": 1,
    "MAX_PAYLOAD_BYTES": 10,
    "WORKER_CONN_MAX_AGE": None,
    "EAGER": False,
    "MAX_CLOCK_SKEW": 5,
    "DISCOVER": ["jobs", "tasks", "billing.jobs"],
    "POOL": "processes",
    "TIMEOUT_GRACE": 0,
    "MAX_JOBS_PER_CHILD": 1,
    "MAX_MEMORY_PER_CHILD": None,
    "WARN_TRANSACTION_AGE": 0.5,
    "WARN_DEAD_TUPLES": None,
    "PREPARED_STATEMENTS": True,
    "PRIORITY_AGING": {"AFTER": 300, "EVERY": 60},
    "ENCRYPTION_KEYS": [KEY_A, KEY_B],
}


def test_every_known_key_is_covered_here():
    assert set(VALID) == KNOWN_KEYS


def test_valid_settings_pass():
    with override_settings(CRONQUEUE=VALID):
        assert check_settings() == []


@pytest.mark.parametrize("value", [None, {}])
def test_no_or_empty_setting_passes(value):
    with override_settings(CRONQUEUE=value):
        assert check_settings() == []


def test_the_defaults_pass():
    with override_settings(CRONQUEUE=dataclasses.asdict(DEFAULTS)):
        assert check_settings() == []


# --- E001 ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [[("POLL_INTERVAL", 1)], "POLL_INTERVAL=1", 1])
def test_e001_setting_is_not_a_dict(value):
    with override_settings(CRONQUEUE=value):
        message = only(check_settings(), "E001")
    assert message.level == ERROR
    assert "CRONQUEUE" in message.msg
    assert type(value).__name__ in message.msg
    assert message.hint


# --- E002 .. E016: one per key ------------------------------------------------------

BAD_VALUES = [
    ("POLL_INTERVAL", "E002", [0, -1, "1", True, None, math.nan, math.inf]),
    ("CONCURRENCY", "E003", [0, -2, 1.5, "4", True, None]),
    ("DEFAULT_RETRIES", "E004", [-1, 1.0, "3", True, None]),
    ("DEFAULT_TIMEOUT", "E005", [0, -1, "60", None, math.nan, math.inf]),
    ("LEASE", "E006", [0, 0.5, -30, "30", None, math.inf]),
    ("SUCCEEDED_RETENTION", "E007", [-1, "1d", True, math.nan, math.inf]),
    ("FAILED_RETENTION", "E008", [-1, "forever", False, math.inf]),
    ("CATCH_UP_WINDOW", "E009", [0, -1, "1h", None, math.inf]),
    ("DEFAULT_QUEUE", "E011", ["", "   ", 5, None, "q" * 101]),
    ("SHUTDOWN_TIMEOUT", "E012", [-1, "30", None, math.inf]),
    ("PREFETCH", "E013", [0, 101, 1.0, "1", True]),
    ("PRUNE_BATCH_SIZE", "E014", [0, -1, 10.0, None]),
    ("MAX_PAYLOAD_BYTES", "E015", [0, -1, 1e6, "1MB", None]),
    ("WORKER_CONN_MAX_AGE", "E016", [-1, "600", True, math.inf]),
    ("EAGER", "E019", [1, "yes", None]),
    ("MAX_CLOCK_SKEW", "E021", [0, -1, "10", True, math.nan, math.inf]),
    ("DISCOVER", "E022", ["tasks", ["jobs", ""], ["my-tasks"], [None], ("jobs.",), None]),
    ("WARN_TRANSACTION_AGE", "E045", [0, -1, "300", True, math.nan, math.inf]),
    ("WARN_DEAD_TUPLES", "E046", [0, -1, 1e6, "1000000", True]),
    ("PREPARED_STATEMENTS", "E047", [1, 0, "yes", "false"]),
    (
        "PRIORITY_AGING",
        "E048",
        [
            300,
            {"AFTER": 300},
            {"AFTER": 300, "EVERY": 0},
            {"AFTER": -1, "EVERY": 60},
            {"AFTER": "5m", "EVERY": 60},
            {"AFTER": 300, "EVERY": 60, "MAX": 5},
            {"AFTER": 300, "EVERY": math.inf},
            {"AFTER": True, "EVERY": 60},
        ],
    ),
]


@pytest.mark.parametrize("value", [None, {"AFTER": 0, "EVERY": 1}, {"AFTER": 300, "EVERY": 60.5}])
def test_priority_aging_accepts_none_or_after_and_every(value):
    with override_settings(CRONQUEUE={"PRIORITY_AGING": value}):
        assert ids(check_settings()) == []


@pytest.mark.parametrize(
    ("key", "check_id", "value"),
    [(key, check_id, value) for key, check_id, values in BAD_VALUES for value in values],
)
def test_bad_value_is_an_error_naming_the_key(key, check_id, value):
    with override_settings(CRONQUEUE={key: value}):
        message = only(check_settings(), check_id)
    assert message.level == ERROR
    assert f"CRONQUEUE['{key}']" in message.msg
    assert repr(value) in message.msg
    assert key in message.hint


def test_every_rule_has_its_own_id():
    rules = {key: check_id for key, (check_id, _, _) in checks.RULES.items()}
    assert rules == {key: check_id for key, check_id, _ in BAD_VALUES}
    assert len(set(rules.values())) == len(rules)


def test_several_bad_values_give_several_errors():
    with override_settings(CRONQUEUE={"POLL_INTERVAL": 0, "CONCURRENCY": 0, "PREFETCH": 0}):
        assert sorted(ids(check_settings())) == [
            "django_cronqueue.E002",
            "django_cronqueue.E003",
            "django_cronqueue.E013",
        ]


# --- E010 ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["replica", "", None, 0, ["default"]])
def test_e010_database_is_not_an_alias(value):
    with override_settings(CRONQUEUE={"DATABASE": value}):
        message = only(check_settings(), "E010")
    assert message.level == ERROR
    assert "CRONQUEUE['DATABASE']" in message.msg
    assert repr(value) in message.msg
    assert "default" in message.hint  # lists the aliases there are


# --- E042 ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["replica", "", 0, ["default"]])
def test_e042_read_database_is_not_an_alias(value):
    with override_settings(CRONQUEUE={"READ_DATABASE": value}):
        message = only(check_read_database(), "E042")
    assert message.level == ERROR
    assert f"CRONQUEUE['READ_DATABASE'] is {value!r}" in message.msg
    assert "default" in message.hint  # lists the aliases there are


@pytest.mark.parametrize("value", [None, "default"])
def test_read_database_may_be_unset_or_an_alias(value):
    with override_settings(CRONQUEUE={"READ_DATABASE": value}):
        assert check_read_database() == []


def test_the_routing_checks_leave_the_default_database_alone():
    """With the queue in ``default`` (or an alias E010 reports), no router is needed."""
    for value in ("default", "missing", None):
        with override_settings(CRONQUEUE={"DATABASE": value}, DATABASE_ROUTERS=[]):
            assert check_routing() == []


# --- W001 ---------------------------------------------------------------------------


def test_w001_unknown_key_suggests_the_close_one():
    with override_settings(CRONQUEUE={"POLL_INTERVALL": 1.0}):
        message = only(check_settings(), "W001")
    assert message.level == WARNING
    assert "'POLL_INTERVALL'" in message.msg
    assert "'POLL_INTERVAL'" in message.hint


def test_w001_unknown_key_lists_the_known_ones():
    with override_settings(CRONQUEUE={"XYZZY": 1, 3: "three"}):
        messages = check_settings()
    assert ids(messages) == ["django_cronqueue.W001", "django_cronqueue.W001"]
    assert "'XYZZY'" in messages[0].msg
    assert "3" in messages[1].msg
    assert "POLL_INTERVAL" in messages[0].hint


def test_unknown_keys_are_ignored_by_the_settings():
    with override_settings(CRONQUEUE={"XYZZY": 1, "LEASE": 45}):
        assert get_settings().LEASE == 45
        assert not hasattr(get_settings(), "XYZZY")


# --- W002 ---------------------------------------------------------------------------


@pytest.mark.parametrize("setting", [{"LEASE": 1}, {"LEASE": 2}, {"LEASE": 4.9}])
def test_w002_lease_too_short_for_heartbeats(setting):
    with override_settings(CRONQUEUE=setting):
        message = only(check_settings(), "W002")
    assert message.level == WARNING
    assert "CRONQUEUE['LEASE']" in message.msg
    assert "LEASE" in message.hint


@pytest.mark.parametrize(
    "setting",
    [{"LEASE": 5}, {"LEASE": 30, "POLL_INTERVAL": 10}, {"POLL_INTERVAL": 5}, {"LEASE": 0}],
)
def test_no_w002_when_lease_is_long_enough_or_already_an_error(setting):
    with override_settings(CRONQUEUE=setting):
        assert "django_cronqueue.W002" not in ids(check_settings())


# --- MAX_CLOCK_SKEW and W004 -----------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "limit"),
    [
        ({}, 10.0),
        ({"LEASE": 6}, 2.0),
        ({"MAX_CLOCK_SKEW": None, "LEASE": 9}, 3.0),
        ({"MAX_CLOCK_SKEW": 0.5}, 0.5),
    ],
)
def test_max_clock_skew_is_a_third_of_lease_unless_set(setting, limit):
    with override_settings(CRONQUEUE=setting):
        assert max_clock_skew() == limit


@pytest.mark.parametrize("setting", [{"MAX_CLOCK_SKEW": 10.5}, {"MAX_CLOCK_SKEW": 3, "LEASE": 6}])
def test_w003_max_clock_skew_over_a_third_of_lease(setting):
    with override_settings(CRONQUEUE=setting):
        message = only(check_settings(), "W004")
    assert message.level == WARNING
    assert f"CRONQUEUE['MAX_CLOCK_SKEW'] is {setting['MAX_CLOCK_SKEW']}s" in message.msg
    assert "LEASE / 3" in message.hint


@pytest.mark.parametrize(
    "setting",
    [
        {"MAX_CLOCK_SKEW": 10},
        {"MAX_CLOCK_SKEW": 2, "LEASE": 6},
        {"MAX_CLOCK_SKEW": None},
        {"LEASE": 5},
        {"MAX_CLOCK_SKEW": 100, "LEASE": "30"},
    ],
)
def test_no_w003_within_a_third_of_lease_or_already_an_error(setting):
    with override_settings(CRONQUEUE=setting):
        assert "django_cronqueue.W004" not in ids(check_settings())


# --- E018 ---------------------------------------------------------------------------


def test_e018_use_tz_must_be_true():
    from django_cronqueue.checks import check_time_zone_support

    with override_settings(USE_TZ=False):
        [message] = check_time_zone_support()
    assert message.id == "django_cronqueue.E018"
    assert "USE_TZ" in message.msg and "USE_TZ = True" in message.hint
    assert check_time_zone_support() == []


# --- registration -------------------------------------------------------------------


def test_checks_are_registered_with_django():
    with override_settings(CRONQUEUE={"POLL_INTERVAL": -1, "TYPO": 1}):
        found = ids(run_checks(databases=[]))
    assert "django_cronqueue.E002" in found
    assert "django_cronqueue.W001" in found


def test_the_test_settings_pass_every_check():
    assert [m for m in run_checks(databases=[]) if m.id.startswith("django_cronqueue.")] == []


# --- E017: the database -------------------------------------------------------------


def fake_connections(monkeypatch, **attributes):
    fake = SimpleNamespace(**attributes)
    monkeypatch.setattr(checks, "connections", {"default": fake})
    return fake


@pytest.mark.parametrize(
    ("vendor", "mariadb", "version"),
    [
        ("sqlite", False, (3, 34, 1)),
        ("postgresql", False, (12, 18)),
        ("mysql", False, (5, 7, 44)),
        ("mysql", True, (10, 5, 20)),
    ],
)
def test_e017_database_too_old(monkeypatch, vendor, mariadb, version):
    fake_connections(
        monkeypatch, vendor=vendor, mysql_is_mariadb=mariadb, get_database_version=lambda: version
    )
    message = only(check_database_version(databases=["default"]), "E017")
    assert message.level == ERROR
    assert ("mariadb" if mariadb else vendor) in message.msg
    assert ".".join(map(str, version)) in message.msg
    assert "DATABASES['default']" in message.msg
    assert message.hint


@pytest.mark.parametrize(
    ("vendor", "mariadb", "version"),
    [
        ("sqlite", False, (3, 35, 0)),
        ("postgresql", False, (13, 0)),
        ("mysql", False, (8, 0, 36)),
        ("mysql", True, (10, 6, 0)),
        ("mysql", True, (11, 4, 2)),
    ],
)
def test_supported_database_versions_pass(monkeypatch, vendor, mariadb, version):
    fake_connections(
        monkeypatch, vendor=vendor, mysql_is_mariadb=mariadb, get_database_version=lambda: version
    )
    assert check_database_version(databases=["default"]) == []


def test_e017_unsupported_vendor(monkeypatch):
    fake_connections(monkeypatch, vendor="oracle", get_database_version=lambda: (19,))
    message = only(check_database_version(databases=["default"]), "E017")
    assert "'oracle'" in message.msg


def test_database_check_runs_only_when_asked_for_that_database(monkeypatch):
    fake_connections(monkeypatch, vendor="sqlite", get_database_version=lambda: (3, 0))
    assert check_database_version(databases=None) == []
    assert check_database_version(databases=["other"]) == []
    with override_settings(CRONQUEUE={"DATABASE": "missing"}):
        assert check_database_version(databases=["missing"]) == []
    with override_settings(CRONQUEUE={"DATABASE": ["default"]}):
        assert check_database_version(databases={"default"}) == []


# --- W003: the connection's character set (the real ones: tests/db/test_checks.py) ---


def test_charset_check_runs_only_when_asked_for_that_database(monkeypatch):
    fake_connections(monkeypatch, vendor="mysql")  # no cursor: a query would raise
    assert check_database_charset(databases=None) == []
    assert check_database_charset(databases=["other"]) == []
    with override_settings(CRONQUEUE={"DATABASE": "missing"}):
        assert check_database_charset(databases=["missing"]) == []


@pytest.mark.parametrize("vendor", ["sqlite", "postgresql"])
def test_charset_check_leaves_other_vendors_alone(monkeypatch, vendor):
    fake_connections(monkeypatch, vendor=vendor)  # no cursor: a query would raise
    assert check_database_charset(databases=["default"]) == []


# --- W005: another app's runjobs command ---------------------------------------------------


def test_w005_another_apps_runjobs_listed_first_shadows_ours():
    """django-extensions (installed for this test: the dev extra) has a runjobs too."""
    apps = ["django.contrib.contenttypes", "django_extensions", "django_cronqueue"]
    with override_settings(INSTALLED_APPS=apps):
        message = only(checks.check_runjobs_not_shadowed(), "W005")
    assert message.level == WARNING
    assert "'django_extensions'" in message.msg
    assert message.hint == (
        "List \"django_cronqueue\" above 'django_extensions' in INSTALLED_APPS, or run the "
        "worker as manage.py cronqueue_worker (the same command, under a name no other app "
        "uses)."
    )


def test_no_w005_when_django_cronqueue_is_listed_first():
    apps = ["django.contrib.contenttypes", "django_cronqueue", "django_extensions"]
    with override_settings(INSTALLED_APPS=apps):
        assert checks.check_runjobs_not_shadowed() == []
    assert checks.check_runjobs_not_shadowed() == []  # the test settings


def test_discover_falls_back_to_jobs_when_invalid():
    from django_cronqueue.conf import discover_modules

    assert discover_modules() == ("jobs",)
    with override_settings(CRONQUEUE={"DISCOVER": ["jobs", "tasks"]}):
        assert discover_modules() == ("jobs", "tasks")
    with override_settings(CRONQUEUE={"DISCOVER": "tasks"}):  # E022: a string, not a list
        assert discover_modules() == ("jobs",)


# --- W045: storage warnings set on a database that is not PostgreSQL -----------------------


@pytest.mark.parametrize("vendor", ["sqlite", "mysql"])
def test_w045_storage_warnings_set_on_another_database_never_fire(monkeypatch, vendor):
    fake_connections(monkeypatch, vendor=vendor)
    with override_settings(CRONQUEUE={"WARN_DEAD_TUPLES": 5000}):
        message = only(checks.check_storage_warnings_apply(), "W045")
    assert message.level == WARNING
    assert "WARN_DEAD_TUPLES" in message.msg
    assert vendor in message.msg


def test_no_w045_on_postgresql_or_with_the_keys_unset_or_off(monkeypatch):
    fake = fake_connections(monkeypatch, vendor="postgresql")
    with override_settings(CRONQUEUE={"WARN_TRANSACTION_AGE": 60}):
        assert checks.check_storage_warnings_apply() == []
    fake.vendor = "sqlite"
    assert checks.check_storage_warnings_apply() == []  # the defaults: nothing was asked
    with override_settings(CRONQUEUE={"WARN_TRANSACTION_AGE": None, "WARN_DEAD_TUPLES": None}):
        assert checks.check_storage_warnings_apply() == []

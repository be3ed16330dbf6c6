"""Fuzzing: the job list, the schedule list and the dashboard answer every search and
every filter value (random Unicode, digits of other scripts, NUL, astral characters,
very long strings) with a page or a redirect, never a server error."""

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_cronqueue.models import JobStatus
from tests.factories import CronScheduleFactory, JobFactory

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_cronqueue_job_changelist")
SCHEDULES = reverse("admin:django_cronqueue_cronschedule_changelist")
DASHBOARD = reverse("admin:django_cronqueue_job_dashboard")

JOB_PARAMETERS = ["q", "status", "failed", "name", "queue", "o", "p", "all"]
SCHEDULE_PARAMETERS = ["q", "paused__exact", "active__exact", "o", "p", "all"]

# Characters a form field can carry: any code point but lone surrogates (a browser
# cannot send them: a query string is UTF-8), NUL and the other controls included.
# ASCII digits and digits of other scripts: superscripts (isdigit() but not int()),
# Arabic-Indic, extended Arabic-Indic, NKo, Devanagari, Roman numeral twelve, circled
# one, mathematical double-struck zero.
DIGITS = "0123456789²³¹\u0663\u06f7\u07c2\u0969\u216b\u2460\U0001d7d8"
CHARACTERS = st.characters(exclude_categories=["Cs"])
VALUES = st.one_of(
    st.text(CHARACTERS, max_size=40),
    st.text(st.sampled_from(DIGITS + "\x00 \"'\\%_-"), max_size=30),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.builds(
        lambda text, n: text * n,
        st.text(CHARACTERS, min_size=1, max_size=3),
        st.integers(1000, 20_000),
    ),
)
FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run and every database
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NAMED_CASES = [
    "²",
    "٣",
    "Ⅻ",
    "\x00",
    "a\x00b",
    "\U0001d7d8\U0001d7d9",  # mathematical double-struck 0 and 1
    "😀 🀄 𐍈",
    "9" * 19,
    "9" * 40,
    "-1",
    '"unterminated',
    "x" * 100_000,
    "² " * 5_000,
]


@pytest.fixture
def rows(db):
    now = timezone.now()
    JobFactory(name="testapp.record", dedupe_key="key-²-1")
    JobFactory(
        name="testapp.noop",
        queue="émails",
        status=JobStatus.FAILED,
        finished_at=now - dt.timedelta(minutes=5),
        last_error="RuntimeError: ٣ went wrong \\x00",
    )
    JobFactory(name="testapp.record", status=JobStatus.SUCCEEDED, finished_at=now)
    CronScheduleFactory(name="tests.unicode_ünï", paused=True)
    CronScheduleFactory(name="tests.plain", active=False)


def get_ok(client: Client, url: str, params: dict[str, str]) -> None:
    response = client.get(url, params)
    assert response.status_code < 500, (url, params)
    assert response.status_code in (200, 302, 400), (url, params, response.status_code)


@pytest.mark.parametrize("parameter", JOB_PARAMETERS)
def test_job_list_never_fails(admin_client, rows, parameter):
    @FUZZ
    @given(VALUES)
    def check(value: str) -> None:
        get_ok(admin_client, JOBS, {parameter: value})

    for value in NAMED_CASES:
        get_ok(admin_client, JOBS, {parameter: value})
    check()


@pytest.mark.parametrize("parameter", SCHEDULE_PARAMETERS)
def test_schedule_list_never_fails(admin_client, rows, parameter):
    @FUZZ
    @given(VALUES)
    def check(value: str) -> None:
        get_ok(admin_client, SCHEDULES, {parameter: value})

    for value in NAMED_CASES:
        get_ok(admin_client, SCHEDULES, {parameter: value})
    check()


def test_every_filter_at_once_never_fails(admin_client, rows):
    @FUZZ
    @given(st.fixed_dictionaries(dict.fromkeys(JOB_PARAMETERS, VALUES)))
    def check_jobs(params: dict[str, str]) -> None:
        get_ok(admin_client, JOBS, params)

    @FUZZ
    @given(st.fixed_dictionaries(dict.fromkeys(SCHEDULE_PARAMETERS, VALUES)))
    def check_schedules(params: dict[str, str]) -> None:
        get_ok(admin_client, SCHEDULES, params)

    check_jobs()
    check_schedules()


def test_dashboard_never_fails(admin_client, rows):
    @FUZZ
    @given(st.text(CHARACTERS, min_size=1, max_size=10), VALUES)
    def check(key: str, value: str) -> None:
        get_ok(admin_client, DASHBOARD, {key: value, "q": value})

    for value in NAMED_CASES:
        get_ok(admin_client, DASHBOARD, {"q": value})
    check()

"""The first hour of a new site (tests/firsthour: the README's settings on Django's
defaults, SQLite, no LOGGING), in real manage.py processes."""

import os
import socket
import time

import pytest

from tests.firsthour.site import Site

pytestmark = [pytest.mark.e2e]

# The site's database: the test run's vendor (a database of its own on the server), except
# where a test is about SQLite.
VENDOR = os.environ.get("CRONQUEUE_TEST_DB", "sqlite")


def a_site(tmp_path, **options):
    return Site(tmp_path, vendor=VENDOR, **options)


def test_django_extensions_listed_first_is_named_by_the_check(tmp_path):
    shadowed = a_site(tmp_path, apps_first=("django_extensions",))
    done = shadowed.manage("check")
    assert "django_cronqueue.W005" in done.stderr, done.stderr
    assert "The runjobs command of 'django_extensions' shadows" in done.stderr
    assert "List \"django_cronqueue\" above 'django_extensions' in INSTALLED_APPS" in done.stderr
    assert "or run the worker as manage.py cronqueue_worker" in done.stderr
    # Its runjobs, not ours, runs: the warning is what tells the user why.
    assert "minutely" in shadowed.manage("runjobs").stdout

    fine = a_site(tmp_path, apps_first=())
    done = fine.manage("check")
    assert done.returncode == 0
    assert "W005" not in done.stderr


def test_cronqueue_worker_runs_the_jobs_where_another_apps_runjobs_shadows_ours(tmp_path):
    """django-extensions listed above django_cronqueue (its settings appended with +=):
    runjobs is its command; cronqueue_worker, with the same options, is ours whatever
    the order."""
    site = migrated(a_site(tmp_path, apps_first=("django_extensions",)))
    shadowed = site.manage("runjobs", "--burst")
    assert shadowed.returncode != 0
    assert "unrecognized arguments: --burst" in shadowed.stderr

    site.shell(ENQUEUE_THREE)
    done = site.manage("cronqueue_worker", "--burst", "--concurrency", "2")
    assert done.returncode == 0, done.stderr
    assert "concurrency: 2, mode: burst" in done.stderr
    assert done.stderr.count("succeeded in") == 2
    assert site.shell(STATUSES).split()[-3:] == ["failed", "succeeded", "succeeded"]


def test_cronqueue_worker_and_runjobs_are_one_command(tmp_path):
    site = a_site(tmp_path)
    worker, runjobs = (site.manage(name, "--help") for name in ("cronqueue_worker", "runjobs"))
    assert worker.returncode == runjobs.returncode == 0
    words = [
        done.stdout.replace("cronqueue_worker", "runjobs").split() for done in (worker, runjobs)
    ]
    assert words[0] == words[1]  # the same options and help, however argparse wraps them
    assert "runjobs and cronqueue_worker are the same command" in worker.stdout


STATUSES = (
    "from django_cronqueue.models import Job\n"
    "print(*Job.objects.order_by('status').values_list('status', flat=True))"
)


ENQUEUE_WHILE_DRAINING = """
from django.db import transaction
from django_cronqueue.models import Job
from tests.firsthour.shop import jobs as shop
for i in range(300):
    with transaction.atomic():  # a view's transaction: it reads, then enqueues
        Job.objects.filter(name="shop.noop").exists()
        shop.noop.enqueue(n=i)
print("enqueued")
"""


def test_readme_settings_on_sqlite_drain_with_concurrency_4_and_no_lock_errors(tmp_path):
    """Django's default SQLite settings and CONCURRENCY 4: two workers drain 4,000 jobs while
    a third process enqueues 300 more in transactions, with no "database is locked"."""
    site = Site(tmp_path)  # SQLite, whatever the run's database
    assert site.manage("migrate", "-v", "0").returncode == 0
    site.shell(
        "from django_cronqueue import jobs\n"
        "from tests.firsthour.shop import jobs as shop\n"
        "jobs.enqueue_many(shop.noop, [{'n': i} for i in range(4000)])"
    )
    enqueuer = site.start("shell", "-c", ENQUEUE_WHILE_DRAINING)
    workers = [site.start("runjobs", "--burst", "--concurrency", "4") for _ in range(2)]
    out, err = enqueuer.communicate(timeout=180)
    assert enqueuer.returncode == 0, err
    assert "enqueued" in out
    outputs = [worker.communicate(timeout=180) for worker in workers]
    for worker, (_, worker_err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, worker_err
        assert "locked" not in worker_err, worker_err
    # What the workers left (a job enqueued after both had found nothing due) runs now.
    done = site.manage("runjobs", "--burst")
    assert done.returncode == 0
    assert "locked" not in done.stderr
    counts = site.shell(
        "from django_cronqueue.models import Job\n"
        "print(Job.objects.filter(status='succeeded').count(), Job.objects.count())"
    )
    assert counts.split()[-2:] == ["4300", "4300"]


def test_runjobs_on_a_database_never_migrated_exits_at_once_saying_to_migrate(tmp_path):
    site = a_site(tmp_path)
    done = site.manage("runjobs", timeout=60)  # no --burst: it would otherwise run forever
    assert done.returncode == 1
    assert "has no django-cronqueue tables" in done.stderr
    assert "run `python manage.py migrate` first" in done.stderr


ENQUEUE_THREE = (
    "from tests.firsthour.shop import jobs as shop\n"
    "shop.noop.enqueue(n=1)\n"
    "shop.noop.enqueue(n=2)\n"
    "shop.fails.enqueue()\n"
)


def migrated(site):
    assert site.manage("migrate", "-v", "0").returncode == 0
    return site


def burst(site, *args):
    site.shell(ENQUEUE_THREE)
    done = site.manage("runjobs", "--burst", *args)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_runjobs_without_logging_prints_a_banner_and_one_line_per_outcome(tmp_path):
    site = migrated(a_site(tmp_path))
    err = burst(site)
    assert "django-cronqueue 0.1.0" in err and " starting\n" in err
    assert f"database:    {site.described}" in err
    assert "queues:      all" in err
    assert "concurrency: 4, mode: burst" in err
    assert "    shop.noop (queue default)\n" in err
    assert "    shop.fails (queue default)\n" in err
    assert "    shop.nightly: 0 3 * * * " in err
    assert err.count(" INFO Job shop.noop #") == 2
    assert err.count("succeeded in") == 2
    assert err.count(" ERROR Job shop.fails #3 raised ValueError on attempt 1 of 1 (failed)") == 1
    assert " started (attempt" not in err  # debug records: -v 2

    quiet = burst(site, "-v", "0")
    assert "starting" not in quiet
    assert "succeeded" not in quiet
    assert quiet.count("raised ValueError") == 1

    verbose = burst(site, "-v", "2")
    assert verbose.count(" DEBUG Job shop.noop #") == 2  # "started (attempt 1)"
    assert verbose.count("succeeded in") == 2


def test_runjobs_prints_no_line_twice_when_the_site_configures_logging(tmp_path):
    logging = {
        "version": 1,
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "site"},
        },
        "formatters": {"site": {"format": "SITE %(levelname)s %(message)s"}},
        "loggers": {"django_cronqueue": {"handlers": ["console"], "level": "INFO"}},
    }
    site = migrated(a_site(tmp_path, logging=logging))
    err = burst(site)
    lines = [line for line in err.splitlines() if "Job shop." in line]
    assert len(lines) == 3, err
    assert all(line.startswith("SITE ") for line in lines), err
    assert err.count("starting") == 1


ENQUEUE_FROM_TASKS = (
    "import datetime as dt\n"
    "from django.utils import timezone\n"
    "from django_cronqueue.models import Job\n"
    "from tests.firsthour.shop.tasks import send_receipt\n"
    "job = send_receipt.enqueue(order_id=7)\n"
    "Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - dt.timedelta(seconds=60))\n"
)


def test_a_job_defined_in_tasks_py_is_reported_until_discover_lists_tasks(tmp_path):
    site = migrated(a_site(tmp_path, cronqueue={"LEASE": 5}))
    site.shell(ENQUEUE_FROM_TASKS)  # a view imports tasks.py; the workers do not

    err = site.manage("runjobs", "--burst").stderr
    assert err.count("WARNING 1 due pending job(s) named 'shop.send_receipt'") == 1, err
    assert "no live worker defines that name" in err
    assert 'add "tasks" to it for tasks.py' in err

    worker = site.start("runjobs")  # a live worker that does not define it
    try:
        count = "from django_cronqueue.models import Worker\nprint(Worker.objects.count())"
        deadline = time.monotonic() + 60
        while site.shell(count).split()[-1] != "1":
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.5)
        done = site.manage("cronqueue_status", "--check")
        assert done.returncode == 1
        assert "1 due pending job(s) named shop.send_receipt have waited up to" in done.stderr
        assert "Stranded: 1 due pending shop.send_receipt job(s)" in done.stdout
    finally:
        worker.terminate()
        worker.communicate(timeout=60)

    fixed = a_site(tmp_path, cronqueue={"LEASE": 5, "DISCOVER": ["jobs", "tasks"]})
    err = fixed.manage("runjobs", "--burst").stderr
    assert "Job shop.send_receipt #1 succeeded" in err, err
    assert "shop.send_receipt (queue default)" in err  # the banner lists it


WEEKLY_ACTIVE = (
    "from django_cronqueue.models import CronSchedule\n"
    "rows = CronSchedule.objects.filter(name='shop.weekly_report')\n"
    "print(*rows.values_list('active', flat=True))"
)


def weekly_active(site):
    return site.shell(WEEKLY_ACTIVE).split()[-1:]


def test_a_worker_that_misses_tasks_py_switches_off_no_schedule_a_live_worker_runs(tmp_path):
    """shop.weekly_report is defined in tasks.py: a worker whose DISCOVER misses it
    starts beside one that defines it (a rolling deploy, one host's settings behind)."""
    full = migrated(a_site(tmp_path, cronqueue={"LEASE": 10, "DISCOVER": ["jobs", "tasks"]}))
    lacking = a_site(tmp_path, cronqueue={"LEASE": 10})
    worker = full.start("runjobs")
    try:
        deadline = time.monotonic() + 120
        while weekly_active(full) != ["True"]:
            assert time.monotonic() < deadline, "the full worker did not sync its schedules"
            time.sleep(0.5)
        done = lacking.manage("runjobs", "--burst")
        assert done.returncode == 0, done.stderr
        assert "marked inactive" not in done.stderr
        assert "Cron schedule shop.weekly_report is not defined in the code of worker " in (
            done.stderr
        )
        assert "but a live worker defines it: left active" in done.stderr
        assert weekly_active(full) == ["True"]
    finally:
        worker.terminate()
        _, worker_err = worker.communicate(timeout=120)
    assert worker.returncode == 0, worker_err
    assert "Cron schedule" not in worker_err  # the full worker never had to switch it on

    # The full worker is gone (a stopping worker deletes its row): now no live worker
    # defines the schedule, and whoever switches it off or on says so.
    host = socket.gethostname()
    done = lacking.manage("runjobs", "--burst")
    assert (
        " WARNING Cron schedule shop.weekly_report is no longer defined in code: marked "
        f"inactive by worker {host}:"
    ) in done.stderr, done.stderr
    assert weekly_active(full) == ["False"]
    done = full.manage("runjobs", "--burst")
    assert (
        " WARNING Cron schedule shop.weekly_report is defined in code again: marked active by "
        f"worker {host}:"
    ) in done.stderr, done.stderr
    assert weekly_active(full) == ["True"]

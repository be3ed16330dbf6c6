"""The first hour of a new site (tests/firsthour: the README's settings on Django's
defaults, SQLite, no LOGGING), in real manage.py processes."""

import pytest

from tests.firsthour.site import Site

pytestmark = [pytest.mark.e2e]


def test_django_extensions_listed_first_is_named_by_the_check(tmp_path):
    shadowed = Site(tmp_path, apps_first=("django_extensions",))
    done = shadowed.manage("check")
    assert "django_cronqueue.W005" in done.stderr, done.stderr
    assert "The runjobs command of 'django_extensions' shadows" in done.stderr
    assert "List \"django_cronqueue\" above 'django_extensions' in INSTALLED_APPS" in done.stderr
    # Its runjobs, not ours, runs: the warning is what tells the user why.
    assert "minutely" in shadowed.manage("runjobs").stdout

    fine = Site(tmp_path, apps_first=())
    done = fine.manage("check")
    assert done.returncode == 0
    assert "W005" not in done.stderr


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
    site = Site(tmp_path)
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

"""Workers behind a real PgBouncer in transaction mode (Debian's package) whose database
alias does not say so (no ``DISABLE_SERVER_SIDE_CURSORS``): the first prepared statement
that is missing or already exists on the server session the pooler hands out makes the
worker stop preparing on that alias, warn once naming the setting, and go on. Before,
every claim failed ("prepared statement ... already exists"), logged as "database
unavailable" and retried forever."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count

from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import port_env, postgres_only, wait_until
from .pgbouncer import PgBouncer, installed

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    postgres_only,
    pytest.mark.skipif(not installed(), reason="needs pgbouncer (Debian's package)"),
]

WARNING = "seems to sit in front of PostgreSQL"


@pytest.fixture
def pgbouncer():
    settings = connection.settings_dict
    # Two server sessions for every client: each session serves several connections in turn.
    bouncer = PgBouncer(
        settings["HOST"] or "127.0.0.1", int(settings["PORT"]), settings["USER"], pool_size=2
    )
    bouncer.start()
    yield bouncer
    bouncer.stop()


def test_workers_behind_an_unannounced_transaction_pooler_stop_preparing_and_run_every_job(
    runjobs, pgbouncer
):
    count = 300
    jobs.enqueue_many(rel.tracked, [{"key": f"j{i}"} for i in range(count)])
    workers = [
        runjobs.start(
            "--concurrency", "3", env=port_env(pgbouncer.port), settings={"POLL_INTERVAL": 0.2}
        )
        for _ in range(2)
    ]

    def settled() -> bool:
        return Job.objects.filter(status="succeeded").count() == count

    try:
        wait_until(settled, timeout=120)
    finally:
        logs = [runjobs.log(worker) for worker in workers]
    for worker in workers:
        assert runjobs.stop(worker) == 0, runjobs.logs()
    ended = SideEffect.objects.filter(key__startswith="end:")
    assert ended.count() == count  # each ran once: no run lost, none doubled
    assert not ended.values("key").annotate(n=Count("id")).filter(n__gt=1).exists()
    warned = [log.count(WARNING) for log in logs]
    assert max(warned) == 1 and all(n <= 1 for n in warned), warned  # once per process
    log = "\n".join(logs)
    assert "DISABLE_SERVER_SIDE_CURSORS" in log
    assert "database unavailable" not in log, log

"""PostgreSQL: the claim index holds the claimable rows in claim order, and nothing else.

Made partial on ``status = 'pending'`` (0014), the index kept ``status`` and ``blocked``
as its first columns, but PostgreSQL drops a condition the index's own ``WHERE`` implies
from the conditions it positions a scan with: with no condition left on its first column,
every claim started at the first entry of the index and read forward, testing each one.
That cost nothing while the entries at the head were the rows to claim; while a
transaction is held open they are the entries of every row claimed since it began, which
no vacuum may remove yet. In claim order (priority DESC, run_at, id), with the pending and
unblocked rows as its condition, the index lets a claim start right after the last row a
worker claimed (``claiming.floor``) with one descent. Rows blocked behind a workflow's
upstream jobs, never claimable, leave the index too. MariaDB and SQLite keep theirs.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

DROP = 'DROP INDEX IF EXISTS "cronqueue_job_claim"'
IN_CLAIM_ORDER = (
    'CREATE INDEX "cronqueue_job_claim" ON "django_cronqueue_job" (priority DESC, run_at, id) '
    "WHERE status = 'pending' AND blocked = FALSE"
)
BY_STATUS = (  # as 0014 made it
    'CREATE INDEX "cronqueue_job_claim" ON "django_cronqueue_job" '
    "(status, blocked, priority DESC, run_at, id) WHERE status = 'pending'"
)


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
        schema_editor.execute(IN_CLAIM_ORDER)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
        schema_editor.execute(BY_STATUS)


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0019_finished_day_counts")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]

"""Workflows (jobs.chain, jobs.group, using(after=...)): the Batch and JobDependency
tables, the Job fields blocked, waiting_for, has_downstream and batch, and the claim index
led by (status, blocked) so that blocked rows are never walked by the claim."""

import importlib

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

# MySQL/MariaDB: tables created under a utf8mb3 database default take that character
# set: 0004's conversion runs again (it leaves utf8mb4 tables and other vendors alone).
utf8mb4 = importlib.import_module("django_cronqueue.migrations.0004_mysql_utf8mb4_text_columns")


class Migration(migrations.Migration):
    dependencies = [
        ("django_cronqueue", "0008_dynamic_schedules"),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("size", models.PositiveIntegerField()),
                ("succeeded", models.PositiveIntegerField(default=0)),
                (
                    "failed",
                    models.PositiveIntegerField(
                        default=0, help_text="Members that failed for good or were cancelled."
                    ),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "verbose_name_plural": "batches",
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
        ),
        migrations.RemoveIndex(
            model_name="job",
            name="cronqueue_job_claim",
        ),
        migrations.AddField(
            model_name="job",
            name="blocked",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Waits for its upstream jobs or its batch.",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="has_downstream",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name="job",
            name="waiting_for",
            field=models.PositiveIntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name="batch",
            name="finally_job",
            field=models.OneToOneField(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="batch_finally",
                to="django_cronqueue.job",
            ),
        ),
        migrations.AddField(
            model_name="batch",
            name="then_job",
            field=models.OneToOneField(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="batch_then",
                to="django_cronqueue.job",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="batch",
            field=models.ForeignKey(
                blank=True,
                help_text="The group (jobs.group) this job is a member of.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="members",
                to="django_cronqueue.batch",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                fields=["status", "blocked", "-priority", "run_at", "id"],
                name="cronqueue_job_claim",
            ),
        ),
        migrations.AddField(
            model_name="jobdependency",
            name="downstream",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="upstream_links",
                to="django_cronqueue.job",
            ),
        ),
        migrations.AddField(
            model_name="jobdependency",
            name="upstream",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="downstream_links",
                to="django_cronqueue.job",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobdependency",
            constraint=models.UniqueConstraint(
                fields=("upstream", "downstream"), name="cronqueue_dependency_unique"
            ),
        ),
        migrations.RunPython(utf8mb4.forwards, migrations.RunPython.noop, atomic=False),
    ]

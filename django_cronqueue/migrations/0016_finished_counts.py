"""The counts of finished rows per status, name and queue (in all, and per hour over the
last two days), and the instant up to which they are counted
(``django_cronqueue.history.counting``). Both start empty: until the first housekeeping pass
counts the history, readers count the job table as before. The finish instants are read
through the existing (status, finished_at) index."""

import importlib

import django_cronqueue.models
from django.db import migrations, models

# On a utf8mb3 MySQL/MariaDB database the new tables would get the database's character
# set: 0004's conversion runs again (it leaves utf8mb4 tables and other vendors alone).
utf8mb4 = importlib.import_module("django_cronqueue.migrations.0004_mysql_utf8mb4_text_columns")


class Migration(migrations.Migration):

    dependencies = [
        ('django_cronqueue', '0015_job_storage'),
    ]

    operations = [
        migrations.CreateModel(
            name='FinishedCountMark',
            fields=[
                ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ('counted_until', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name='FinishedCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], max_length=16)),
                ('name', django_cronqueue.models.ExactCharField(max_length=200)),
                ('queue', django_cronqueue.models.ExactCharField(max_length=100)),
                ('hour', models.DateTimeField(blank=True, null=True)),
                ('rows', models.BigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('status', 'name', 'queue', 'hour'), name='cronqueue_finishedcount_unique')],
            },
        ),
        migrations.RunPython(utf8mb4.forwards, migrations.RunPython.noop, atomic=False),
    ]

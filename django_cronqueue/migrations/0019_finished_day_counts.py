"""The counts of finished rows per UTC day (``django_cronqueue.history.counting``), so that a day's
history table is dropped without reading its rows, and the mark's ``by_day``: the counts
made before this migration lack their days: the next housekeeping pass counts the
history again, in one transaction (readers meanwhile read the counts as they were)."""

import importlib

import django_cronqueue.models
from django.db import migrations, models

# As 0016: on a utf8mb3 MySQL/MariaDB database the new table gets utf8mb4.
utf8mb4 = importlib.import_module("django_cronqueue.migrations.0004_mysql_utf8mb4_text_columns")


class Migration(migrations.Migration):

    dependencies = [
        ('django_cronqueue', '0018_sqlite_partial_claim_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='finishedcountmark',
            name='by_day',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.CreateModel(
            name='FinishedDayCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], max_length=16)),
                ('name', django_cronqueue.models.ExactCharField(max_length=200)),
                ('queue', django_cronqueue.models.ExactCharField(max_length=100)),
                ('day', models.DateField()),
                ('rows', models.BigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('status', 'name', 'queue', 'day'), name='cronqueue_finisheddaycount_unique')],
            },
        ),
        migrations.RunPython(utf8mb4.forwards, migrations.RunPython.noop, atomic=False),
    ]

"""On MySQL and MariaDB, compare queue names, paused names and dedupe_for keys byte for byte.

Like migration 0002 for job names and dedupe keys: the default collations ignore case
and trailing spaces, so a pause of queue "Emails" held back "emails" and dedupe_for key
"Invoice-42 " returned the job of "Invoice-42". ExactCharField gives these columns the
binary NO PAD collation on MySQL and MariaDB; other vendors see no change.
"""

import django_cronqueue.models
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('django_cronqueue', '0011_name_status_queue_index'),
    ]

    operations = [
        migrations.AlterField(
            model_name='job',
            name='queue',
            field=django_cronqueue.models.ExactCharField(default='default', max_length=100),
        ),
        migrations.AlterField(
            model_name='job',
            name='window_dedupe_key',
            field=django_cronqueue.models.ExactCharField(blank=True, editable=False, max_length=200, null=True),
        ),
        migrations.AlterField(
            model_name='pause',
            name='name',
            field=django_cronqueue.models.ExactCharField(blank=True, default='', max_length=200, verbose_name='job name'),
        ),
        migrations.AlterField(
            model_name='pause',
            name='queue',
            field=django_cronqueue.models.ExactCharField(blank=True, default='', max_length=100),
        ),
    ]

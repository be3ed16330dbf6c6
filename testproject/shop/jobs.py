"""The demo's jobs: discovered because this is an installed app's jobs.py."""

import logging

from django.utils import timezone

from django_cronqueue import jobs

from .models import Order

logger = logging.getLogger(__name__)


@jobs.job(retries=3)
def send_receipt(order_id: int) -> None:
    """Pretend to e-mail a receipt."""
    order = Order.objects.get(pk=order_id)
    order.receipt_sent_at = timezone.now()
    order.save(update_fields=["receipt_sent_at"])
    logger.info("Receipt sent for order %s to %s", order_id, order.email)


@jobs.job(retries=0)
def flaky_export(order_id: int) -> None:
    """Always fails: a job to read and retry in the admin."""
    raise RuntimeError(f"export service rejected order {order_id}")


@jobs.cron("*/5 * * * *", catch_up="latest")
def sales_report(run: jobs.CronRun) -> None:
    """Every five minutes (in TIME_ZONE): count the orders of the last five minutes."""
    since = run.scheduled_for - timezone.timedelta(minutes=5)
    count = Order.objects.filter(created_at__gte=since, created_at__lt=run.scheduled_for).count()
    logger.info("Sales report for %s: %s order(s)", run.scheduled_for.isoformat(), count)

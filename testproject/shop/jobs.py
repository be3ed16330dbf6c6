"""The demo's jobs: discovered because this is an installed app's jobs.py."""

import logging
import random

from django.utils import timezone

from django_cronqueue import jobs

from .models import Order

logger = logging.getLogger(__name__)


@jobs.job(retries=3)
def send_receipt(order_id: int) -> None:
    """Pretend to e-mail a receipt; fails now and then to show retries in the admin."""
    order = Order.objects.get(pk=order_id)
    if random.random() < 0.2:
        raise ConnectionError(f"SMTP server did not answer for {order.email}")
    order.receipt_sent_at = timezone.now()
    order.save(update_fields=["receipt_sent_at"])
    logger.info("Receipt sent for order %s", order_id)


@jobs.job(retries=0)
def flaky_export(order_id: int) -> None:
    """Always fails: a job to retry from the admin."""
    raise RuntimeError(f"export service rejected order {order_id}")

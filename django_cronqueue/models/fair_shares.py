"""The table of fair keys' turns and weights (``FairShare``), which enqueues and the
claims of fair queues keep (``django_cronqueue.claiming.fair``) and ``jobs.set_weight``
and the admin edit."""

from __future__ import annotations

import datetime as dt

from django.db import models

from ..definitions.flow_options import MAX_LIMIT_KEY_LENGTH
from ..values.validation import MAX_QUEUE_LENGTH
from .fields import ExactCharField

__all__ = ["TURN_NEVER", "FairShare"]

TURN_NEVER = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)  # a key never served goes first


class FairShare(models.Model):
    """One row per (queue, fair key) of a queue whose jobs take turns (``fair_by``,
    ``using(fair_key=...)``; the queue's jobs without a key are the key ``""``). Created
    by the first enqueue of the key, or by ``jobs.set_weight``.

    ``weight`` is the key's share (``jobs.set_weight``): jobs per turn. Claims serve the
    key whose last turn ended first (``turn_at``; ``used``: jobs taken in its current
    turn). A claim that finds none of a key's jobs due skips the key until
    ``idle_until``; an enqueue of the key clears it and counts itself in ``enqueued``,
    which a claim compares before it marks the key idle (``claiming.fair``)."""

    queue = ExactCharField(max_length=MAX_QUEUE_LENGTH)
    fair_key = ExactCharField(max_length=MAX_LIMIT_KEY_LENGTH, blank=True, default="")
    weight = models.PositiveIntegerField(
        default=1, help_text="Jobs per turn, 1 to 1000: its share against the other keys."
    )
    turn_at = models.DateTimeField(default=TURN_NEVER, editable=False)
    used = models.PositiveIntegerField(default=0, editable=False)
    idle_until = models.DateTimeField(null=True, blank=True, editable=False)
    idle_checks = models.PositiveSmallIntegerField(default=0, editable=False)
    enqueued = models.BigIntegerField(default=0, editable=False)

    class Meta:
        app_label = "django_cronqueue"
        verbose_name = "fair share"
        constraints = [
            models.UniqueConstraint(fields=["queue", "fair_key"], name="cronqueue_fairshare_key"),
            models.CheckConstraint(
                condition=models.Q(weight__gte=1, weight__lte=1000),
                name="cronqueue_fairshare_weight",
            ),
        ]
        indexes = [
            # A claim's keys in turn order (idle_until NULL), and the idle ones due again.
            # The id breaks ties (every key never served has the same turn_at): the first
            # keys in turn order are the index's first entries, however many keys there are.
            models.Index(
                fields=["queue", "idle_until", "turn_at", "id"], name="cronqueue_fair_turns"
            ),
            # The latest turn of a queue: where a key whose turn ended goes.
            models.Index(fields=["queue", "turn_at"], name="cronqueue_fair_last_turn"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} [{self.fair_key}] x{self.weight}"

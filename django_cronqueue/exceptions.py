"""Errors that django-cronqueue raises at a caller."""

from __future__ import annotations


class CronQueueError(Exception):
    """Base class of django-cronqueue's errors."""


class UnknownJob(CronQueueError, LookupError):
    """No code of this process defines a job of that name."""


class InvalidPayload(CronQueueError, ValueError, TypeError):
    """The payload is not a JSON object of keyword arguments the handler accepts.

    A ValueError, and a TypeError too: Django's Tasks framework raises TypeError for an
    argument that is not JSON, and ``except TypeError`` written for it must catch this.
    """


class LeaseLost(CronQueueError):
    """A run's lease expired before it completed (its worker died or it timed out).

    Passed to ``on_failed`` when the last attempt of a job ends this way.
    """

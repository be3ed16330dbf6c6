"""The weights of fair keys: ``jobs.set_weight(queue, key, weight)``.

A key's weight is its jobs per turn (``claiming.fair``): while keys of weights 4 and 1
both have due jobs, they get claims in the ratio 4:1. The weight lives in the key's
``FairShare`` row, which the first enqueue of the key creates (or this does).
"""

from __future__ import annotations

from ..conf import database_alias
from ..definitions.flow_options import key_problem
from ..models import FairShare
from ..values.validation import MAX_QUEUE_LENGTH, is_int, is_queue_name

__all__ = ["MAX_WEIGHT", "check_weight", "set_weight"]

MAX_WEIGHT = 1000


def check_weight(weight: object) -> int:
    """A weight from 1 to ``MAX_WEIGHT``; raises ValueError naming the fix."""
    if not isinstance(weight, int) or not is_int(weight) or not 1 <= weight <= MAX_WEIGHT:
        raise ValueError(
            f"A fair key's weight must be an integer from 1 to {MAX_WEIGHT} (its jobs per "
            f"turn), or None for the default of 1; got {weight!r}."
        )
    return weight


def set_weight(queue: str, key: str, weight: int | None) -> None:
    """Give the fair key ``key`` of ``queue`` ``weight`` jobs per turn (1 to 1000);
    ``None`` removes its weight (back to 1). ``key`` "" is the queue's jobs without a key.
    Raises ValueError for a bad queue, key or weight."""
    if not is_queue_name(queue):
        raise ValueError(
            f"set_weight(): queue must be a non-empty string of at most {MAX_QUEUE_LENGTH} "
            f"characters, got {queue!r}."
        )
    if not isinstance(key, str) or (key and key_problem(key)):
        problem = key_problem(key) if isinstance(key, str) else "is not a string"
        raise ValueError(
            f"set_weight(): the fair key {key!r} of queue {queue!r} {problem}; a key is a "
            'string ("" for the jobs without one).'
        )
    shares = FairShare.objects.using(database_alias())
    if weight is None:
        shares.filter(queue=queue, fair_key=key).update(weight=1)
        return
    shares.update_or_create(queue=queue, fair_key=key, defaults={"weight": check_weight(weight)})

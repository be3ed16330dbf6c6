"""A function the tests make a Django task of, on a backend whose ``OPTIONS["SENSITIVE"]``
lists it (tests/integrations/test_sensitive_tasks.py): not decorated here, so that no
other test sees a sensitive task."""

import os

from .models import SideEffect
from .sensitive_jobs import digest


def charge_task(card_token: str, amount: int) -> str:
    SideEffect.objects.create(key=digest(card_token), pid=os.getpid())
    return f"charged {amount} on {card_token}"


def returns_a_set(card_token: str) -> set[str]:
    return {card_token}

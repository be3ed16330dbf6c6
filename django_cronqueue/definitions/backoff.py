"""Retry delays: how long a failed job waits before its next attempt."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

BackoffFunction = Callable[[int], float]


@dataclass(frozen=True)
class Exponential:
    """``base * factor ** (attempt - 1)`` seconds, then +-``jitter`` (a fraction) at random.

    ``attempt`` is the number of the attempt that just failed, starting at 1, so the
    default (base 1, factor 2) waits about 1 s, 2 s, 4 s ...
    """

    base: float = 1.0
    factor: float = 2.0
    jitter: float = 0.2
    max_delay: float | None = None

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError(
                "exponential() needs base >= 0, factor >= 1 and 0 <= jitter < 1, "
                f"got base={self.base}, factor={self.factor}, jitter={self.jitter}"
            )
        if self.max_delay is not None and self.max_delay < 0:
            raise ValueError(f"exponential() needs max_delay >= 0, got {self.max_delay}")

    def __call__(self, attempt: int) -> float:
        delay = self.base * self.factor ** max(attempt - 1, 0)
        if self.max_delay is not None:
            delay = min(delay, self.max_delay)
        return delay * random.uniform(1 - self.jitter, 1 + self.jitter)


def exponential(
    base: float = 1.0, factor: float = 2.0, *, jitter: float = 0.2, max_delay: float | None = None
) -> Exponential:
    """Exponential backoff with jitter, the default for every job."""
    return Exponential(base=base, factor=factor, jitter=jitter, max_delay=max_delay)


DEFAULT_BACKOFF = exponential()

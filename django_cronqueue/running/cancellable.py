"""An ``async def`` handler run as a task its job's cancel request, soft time limit
and timeout cancel."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from ..exceptions import JobCancelled, SoftTimeLimitExceeded, TimeLimitExceeded
from .context import JobContext


def _cancel_soon(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` on its loop, from any thread (a loop that has closed is done)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(task.cancel)


class _TimeLimit:
    """Cancels a task after ``seconds`` (none when 0 or None); ``reached`` says it did,
    so that its cancellation is told apart from any other (a cancel request, the
    handler's own timeouts)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], seconds: float | None
    ) -> None:
        self.reached = False
        self._handle = loop.call_later(seconds, self._cancel, task) if seconds else None

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        self.reached = True
        task.cancel()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


async def run_cancellable(
    context: JobContext,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    soft_timeout: float | None = None,
    timeout: float | None = None,
) -> Any:
    """Run an ``async def`` handler as a task of this event loop, cancelled on the loop
    (``asyncio.CancelledError`` inside the handler) when a cancel of its job is requested.
    A CancelledError that escapes the handler then becomes ``jobs.JobCancelled``; after
    ``soft_timeout`` seconds the task is cancelled too, and it becomes
    ``jobs.SoftTimeLimitExceeded``; after ``timeout`` seconds (the asyncio pool's), it
    becomes ``jobs.TimeLimitExceeded``. Whatever else the handler raises is its own, a
    ``TimeoutError`` of its upstream calls included."""
    loop = asyncio.get_running_loop()
    task = loop.create_task(func(*args, **kwargs))
    context.on_cancel(lambda: _cancel_soon(loop, task))
    soft_limit = _TimeLimit(loop, task, soft_timeout)
    hard_limit = _TimeLimit(loop, task, timeout)
    try:
        return await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # the caller was cancelled, not the handler
        if hard_limit.reached:
            raise TimeLimitExceeded(
                f"Job {context.name} #{context.job_id} ran past its timeout of "
                f"{timeout:g}s: its task was cancelled"
            ) from None
        if soft_limit.reached:
            raise SoftTimeLimitExceeded(
                f"Job {context.name} #{context.job_id} ran past its soft time limit of "
                f"{soft_timeout:g}s"
            ) from None
        if context.cancel_requested:
            raise JobCancelled(f"Job {context.name} #{context.job_id}: cancelled") from None
        raise
    finally:
        soft_limit.stop()
        hard_limit.stop()

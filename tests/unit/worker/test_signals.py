"""runjobs' SIGTERM/SIGINT handler. Python runs it on the main thread between two bytecodes,
maybe while that thread holds the lock of one of the worker's events (inside
``wake.set()`` after a housekeeping pass, or entering ``stopping.wait()``); those locks are
not reentrant, so the handler must not take them on that thread."""

import signal
import threading

import pytest

from django_cronqueue.worker import Worker


@pytest.mark.parametrize("event", ["wake", "stopping"])
def test_a_signal_while_the_main_thread_holds_an_events_lock_does_not_deadlock(event):
    worker = Worker()

    def interrupted_inside_the_event() -> None:
        with getattr(worker, event)._cond:  # what set() and wait() hold for a moment
            worker._on_signal(signal.SIGTERM, None)

    main = threading.Thread(target=interrupted_inside_the_event, daemon=True)
    main.start()
    main.join(10)

    assert not main.is_alive(), f"the signal handler deadlocked on the {event} event's lock"
    assert worker.stopping.wait(10)
    assert worker.wake.wait(10)

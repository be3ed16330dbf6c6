"""What ``runjobs`` prints to stderr when the site has not set up logging for the package.

``install`` attaches a stream handler to the ``django_cronqueue`` logger, at the level the
command's verbosity asks for, unless the site already decides where the package's records
go: a handler on that logger or on the root logger, or a ``LOGGING`` entry for the package.
Then it does nothing, and the site's configuration alone decides (no line printed twice).

A worker drains thousands of jobs a second: the line of a success (the hot path) does not
build a log record but goes straight to the stream, formatted as the handler would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from django.conf import settings

LOGGER_NAME = "django_cronqueue"
LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
FORMAT = "%(asctime)s %(levelname)s %(message)s"
THREADED_FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

# Set while the console is installed at a verbosity that prints successes: called with
# [(job name, job id, seconds), ...] instead of logger.info(). None otherwise.
success_line: SuccessLine | None = None


def site_configures_logging() -> bool:
    """Whether the site decides where the package's records go."""
    logger = logging.getLogger(LOGGER_NAME)
    if logger.handlers or logging.getLogger().handlers:
        return True
    configured = getattr(settings, "LOGGING", None) or {}
    loggers = configured.get("loggers", {}) if isinstance(configured, dict) else {}
    return any(name == LOGGER_NAME or name.startswith(f"{LOGGER_NAME}.") for name in loggers)


class SuccessLine:
    """The lines of successes written together (a worker records quick successes in
    batches: one write per batch), under the handler's lock, with the time prefix the
    formatter would give them (formatted once a second)."""

    def __init__(self, handler: logging.StreamHandler[TextIO]) -> None:
        self.write = handler.stream.write
        self.lock = handler.lock or threading.RLock()
        self.second = -1
        self.prefix = ""

    def __call__(self, successes: Iterable[tuple[str, int, float]]) -> None:
        now = int(time.time())
        if now != self.second:
            self.second = now
            self.prefix = time.strftime(DATE_FORMAT, time.localtime(now)) + " INFO Job "
        prefix = self.prefix
        lines = "".join(
            f"{prefix}{name} #{job_id} succeeded in {duration:.3f}s\n"
            for name, job_id, duration in successes
        )
        if lines:
            with self.lock:
                self.write(lines)


def install(verbosity: int, stream: TextIO) -> Callable[[], None]:
    """Print the package's records to ``stream`` at ``verbosity`` (0: errors only, 1: the
    start banner and one line per job outcome, 2: also debug records, 3: also the thread
    of each line), unless the site configures logging. Returns what undoes it."""
    global success_line
    if site_configures_logging():
        return lambda: None
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        logging.Formatter(THREADED_FORMAT if verbosity >= 3 else FORMAT, DATE_FORMAT)
    )
    previous_level = logger.level
    logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
    logger.addHandler(handler)
    if 1 <= verbosity <= 2:
        success_line = SuccessLine(handler)

    def uninstall(*args: Any) -> None:
        global success_line
        success_line = None
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
        handler.flush()

    return uninstall

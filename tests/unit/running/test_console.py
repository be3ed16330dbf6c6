"""runjobs's console output: added only when the site does not configure the package's
logging, at the level -v asks for; a success's line without a log record."""

import io
import logging

import pytest
from django.test import override_settings

from django_cronqueue.running import console
from django_cronqueue.running.execution import Call, announce_successes

LOGGER = logging.getLogger("django_cronqueue")


@pytest.fixture
def no_root_handlers(monkeypatch, settings):
    """As in a runjobs process without LOGGING. Call it in the test: pytest adds its
    capture handlers to the root logger after the fixtures are set up."""
    settings.LOGGING = {}

    def clear() -> None:
        monkeypatch.setattr(logging.getLogger(), "handlers", [])
        monkeypatch.setattr(LOGGER, "handlers", [])

    return clear


class FakeJob:
    name = "shop.noop"
    id = 7
    attempts = 1
    max_attempts = 1


@pytest.mark.parametrize(
    ("verbosity", "level", "fast"),
    [
        (0, logging.ERROR, False),
        (1, logging.INFO, True),
        (2, logging.DEBUG, True),
        (3, logging.DEBUG, False),
    ],
)
def test_verbosity_sets_the_level_and_the_success_line(no_root_handlers, verbosity, level, fast):
    no_root_handlers()
    stream = io.StringIO()
    previous = LOGGER.level
    uninstall = console.install(verbosity, stream)
    try:
        assert LOGGER.level == level
        assert (console.success_line is not None) == fast
        announce_successes([Call(FakeJob(), None, duration=0.0123)])  # type: ignore[arg-type]
        LOGGER.debug("a debug record")
    finally:
        uninstall()
    assert console.success_line is None
    assert LOGGER.level == previous
    assert not LOGGER.handlers
    output = stream.getvalue()
    success = "Job shop.noop #7 succeeded in 0.012s\n"
    assert (success in output) == (verbosity >= 1)
    if 1 <= verbosity <= 2:  # the fast line looks like the handler's
        assert f" INFO {success}" in output
    assert ("DEBUG" in output) == (verbosity >= 2)
    assert ("[MainThread]" in output) == (verbosity == 3)


def test_nothing_is_added_when_the_site_configures_logging(no_root_handlers):
    no_root_handlers()
    with override_settings(LOGGING={"version": 1, "loggers": {"django_cronqueue.x": {}}}):
        assert console.site_configures_logging()
        uninstall = console.install(1, io.StringIO())
        assert not LOGGER.handlers
        assert console.success_line is None
        uninstall()
    assert not console.site_configures_logging()
    logging.getLogger().handlers.append(logging.NullHandler())  # e.g. logging.basicConfig()
    assert console.site_configures_logging()

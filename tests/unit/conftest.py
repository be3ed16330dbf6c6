"""tests/unit holds database-free tests only: a test here that asks for the database
(the ``django_db`` marker, or a fixture that needs it) fails before anything touches
the database. Every other test starts with database access blocked, so a query fails
too, even when a wider-scoped fixture left access unblocked."""

import pytest

DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "django_db_setup",
        "live_server",
        "admin_user",
        "admin_client",
    }
)


def pytest_runtest_setup(item):
    wanted = sorted(DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())))
    if item.get_closest_marker("django_db") is not None:
        wanted.insert(0, "the django_db marker")
    if wanted:
        pytest.fail(
            f"{item.nodeid} asks for the database ({', '.join(wanted)}); tests/unit is for "
            "database-free tests: move it to tests/db.",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _no_database_access(django_db_blocker):
    """pytest-django blocks the database for unmarked tests; this makes sure of it."""
    with django_db_blocker.block():
        yield

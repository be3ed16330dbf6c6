"""The first hour of a new site (tests/firsthour: the README's settings on Django's
defaults, SQLite, no LOGGING), in real manage.py processes."""

import pytest

from tests.firsthour.site import Site

pytestmark = [pytest.mark.e2e]


def test_django_extensions_listed_first_is_named_by_the_check(tmp_path):
    shadowed = Site(tmp_path, apps_first=("django_extensions",))
    done = shadowed.manage("check")
    assert "django_cronqueue.W005" in done.stderr, done.stderr
    assert "The runjobs command of 'django_extensions' shadows" in done.stderr
    assert "List \"django_cronqueue\" above 'django_extensions' in INSTALLED_APPS" in done.stderr
    # Its runjobs, not ours, runs: the warning is what tells the user why.
    assert "minutely" in shadowed.manage("runjobs").stdout

    fine = Site(tmp_path, apps_first=())
    done = fine.manage("check")
    assert done.returncode == 0
    assert "W005" not in done.stderr

"""Every import path the README and the docs show (and those the SPEC names) resolves:
a module, or a name in one. A path that moves keeps a thin re-export (docs/architecture.md,
"Paths that moved"), and this test fails the day one is dropped or a doc names a path
that does not exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOTTED = re.compile(r"\bdjango_cronqueue(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FROM_IMPORT = re.compile(
    r"^\s*from (django_cronqueue(?:\.[a-z_]+)*) import \(?([A-Za-z0-9_, ]+)\)?\s*$", re.M
)
CHECK_ID = re.compile(r"\.[EW]\d{3}$")  # django_cronqueue.E001 is a system check's id
# Named by the SPEC, which lives beside the project.
SPEC_PATHS = [
    "django_cronqueue.backend.CronQueueBackend",
    "django_cronqueue.metrics.MetricsView",
    "django_cronqueue.models.Job",
    "django_cronqueue.models.CronSchedule",
    "django_cronqueue.testing",
    "django_cronqueue.jobs",
    "django_cronqueue.routers.CronQueueRouter",
    "django_cronqueue.pytest_plugin",
]
# Moved when the package was laid out by concept (docs/architecture.md), kept by re-exports.
MOVED_PATHS = [
    "django_cronqueue.bulk.retry_jobs",
    "django_cronqueue.bulk.cancel_jobs",
    "django_cronqueue.bulk.run_jobs_now",
    "django_cronqueue.bulk.BulkOutcome",
    "django_cronqueue.cron.occurrences",
    "django_cronqueue.cron.next_occurrences",
    "django_cronqueue.cron.validate_expression",
    "django_cronqueue.cron.load_zone",
    "django_cronqueue.cron.InvalidCronExpression",
    "django_cronqueue.cron.InvalidTimeZone",
]


def documents() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if p.name != "changelog.md"]
    return [ROOT / "README.md", *sorted(docs)]


def documented_paths() -> set[str]:
    found: set[str] = set()
    for path in documents():
        text = path.read_text()
        found.update(match for match in DOTTED.findall(text) if not CHECK_ID.search(match))
        for module, names in FROM_IMPORT.findall(text):
            found.update(f"{module}.{name.strip()}" for name in names.split(",") if name.strip())
    return found


def resolves(path: str) -> bool:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                try:
                    target = importlib.import_module(f"{target.__name__}.{name}")
                except (ModuleNotFoundError, AttributeError):
                    return False
            else:
                target = getattr(target, name)
        return True
    return False


def test_the_docs_name_the_public_paths():
    paths = documented_paths()
    # The scan itself works: it finds the paths the quick start and the reference use.
    assert {"django_cronqueue.models.Job", "django_cronqueue.jobs"} <= paths
    assert "django_cronqueue.cron.occurrences" in paths


@pytest.mark.parametrize("path", sorted(documented_paths() | set(SPEC_PATHS) | set(MOVED_PATHS)))
def test_every_documented_path_resolves(path):
    assert resolves(path), f"{path} is shown in the docs but cannot be imported"


def test_a_path_that_does_not_exist_is_caught():
    assert not resolves("django_cronqueue.cron.no_such_function")
    assert not resolves("django_cronqueue.no_such_module")


def test_the_moved_paths_are_the_objects_of_their_new_homes():
    from django_cronqueue import bulk, cron
    from django_cronqueue.cron import maths
    from django_cronqueue.operations import bulk as operations_bulk

    assert bulk.retry_jobs is operations_bulk.retry_jobs
    assert cron.occurrences is maths.occurrences
    assert cron.InvalidCronExpression is maths.InvalidCronExpression


def test_the_top_level_keeps_the_public_face_only():
    package = ROOT / "django_cronqueue"
    modules = sorted(p.stem for p in package.glob("*.py"))
    assert modules == [
        "__init__",
        "apps",
        "backend",
        "bulk",
        "checks",
        "conf",
        "exceptions",
        "health",
        "jobs",
        "pytest_plugin",
        "routers",
        "signals",
        "testing",
    ]

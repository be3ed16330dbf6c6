"""Broken, or not, as BROKEN_JOBS_MODE says: raise, import, clash or fine."""

import os

from django_cronqueue import jobs

MODE = os.environ.get("BROKEN_JOBS_MODE", "raise")

if MODE == "raise":
    raise RuntimeError("broken_jobs_app.jobs fails on purpose")

if MODE == "import":
    import module_that_does_not_exist  # noqa: F401

if MODE == "clash":

    @jobs.job(name="broken_jobs.clash")
    def first() -> None:
        return None

    @jobs.job(name="broken_jobs.clash")
    def second() -> None:
        return None


@jobs.job
def fine() -> None:
    return None

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.factories"]

# The property tests draw the same examples in every run (a run that fails fails again, on
# any machine) and never fail for the machine's speed: no per-example deadline, no
# "too slow" health check, which a loaded CI machine trips at random.
settings.register_profile(
    "cronqueue",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("cronqueue")


@pytest.fixture(autouse=True)
def _fresh_housekeeping():
    """Each test's in-process ticks start with a fresh prune clock, and the first one
    syncs the schedule rows."""
    from django.apps import apps

    from django_cronqueue.worker.tick import Housekeeping

    apps.get_app_config("django_cronqueue").housekeeping = Housekeeping()


@pytest.fixture
def bounded_enumeration(monkeypatch):
    """Counts the wall times croniter is asked for (django_cronqueue.cron.maths), and stops a
    test that asks for more than 20,000: one that enumerates a whole range of years of
    minutes instead of the few it needs would otherwise run for minutes or hours."""
    from django_cronqueue.cron import maths

    computed = []
    wall_times = maths._wall_times

    def counted(schedule, after):
        for wall in wall_times(schedule, after):
            computed.append(wall)
            if len(computed) > 20_000:
                raise AssertionError("enumerated the whole range instead of stopping")
            yield wall

    monkeypatch.setattr(maths, "_wall_times", counted)
    return computed

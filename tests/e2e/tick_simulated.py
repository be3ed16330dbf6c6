"""Child process: tick through simulated time, one tick per simulated ``step`` seconds.

Usage: python -m tests.e2e.tick_simulated START_ISO MINUTES STEP_SECONDS
"""

import datetime as dt
import sys

import django


def main() -> None:
    django.setup()
    import tests.e2e.cron_jobs  # noqa: F401  (registers the schedules)
    from django_cronqueue import jobs

    start = dt.datetime.fromisoformat(sys.argv[1])
    total = int(sys.argv[2]) * 60
    step = int(sys.argv[3])
    for offset in range(0, total + 1, step):
        jobs.tick(now=start + dt.timedelta(seconds=offset))


if __name__ == "__main__":
    main()

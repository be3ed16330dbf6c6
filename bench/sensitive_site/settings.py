"""tests/firsthour's settings (the README's) plus this site's jobs and one encryption key."""

from tests.firsthour.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.sensitive_site"]  # noqa: F405
# A fixed Fernet key: the benchmark's jobs carry made-up values only.
CRONQUEUE = {**CRONQUEUE, "ENCRYPTION_KEYS": ["eJSkXFvzxNwYPi3EbHwu6IcsOPQp0Zk5Q8gTyo6Jw0E="]}  # noqa: F405

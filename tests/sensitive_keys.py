"""Fernet keys for the tests of sensitive arguments (made for the tests, never secret)."""

import contextlib
from collections.abc import Iterator

KEY_A = "z4RXt3-0Zxg4Qwc5CXeFtgn5tR5s9kYmPvLqUEXv2jY="
KEY_B = "eVq3L2Wq0nO3n6Q7fS0rLr7dJqmPbsK2hYwRvt0y1Tg="
KEY_C = "rJ8S6qYzjH1mM0aX6Z9wq4rV3fD2pB7cL5nK8tE1uGs="
SECRET = "4242-4242-4242-SECRET"


def unregistered_handles():
    """The jobs of ``tests.testapp.sensitive_jobs``, imported but not left registered:
    a site's other tests must not see sensitive jobs (their checks, their erasure). The
    ``sensitive_defined`` fixtures register them for one test."""
    from django_cronqueue.definitions.registry import registry
    from tests.testapp import sensitive_jobs

    for handle in sensitive_jobs.HANDLES:
        if registry.get(handle.name) is handle:
            registry.unregister(handle.name)
    return sensitive_jobs.HANDLES


@contextlib.contextmanager
def registered(handles) -> Iterator[None]:
    """``handles`` registered for one test; the registry as it was afterwards."""
    from django_cronqueue.definitions.registry import registry

    saved = dict(registry._definitions)
    for handle in handles:
        registry.register(handle)
    try:
        yield
    finally:
        registry._definitions.clear()
        registry._definitions.update(saved)

"""Other libraries the queue works with, each optional.

- ``taskapi``: Django's Tasks framework, from ``django.tasks`` (Django >= 6.0) or the
  ``django-tasks`` backport (``django_cronqueue.backend`` is built on it);
- ``tracing``: OpenTelemetry producer and consumer spans (the ``[otel]`` extra);
- ``encryption``: sensitive arguments encrypted with ``cryptography`` (the
  ``[encryption]`` extra).

May import ``exceptions``, ``values``, ``conf`` (``encryption`` reads its keys) and the
package's version only.
"""

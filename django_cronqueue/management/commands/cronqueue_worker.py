"""``manage.py cronqueue_worker``: the worker (the same command as ``manage.py runjobs``)."""

from django_cronqueue.management.worker_command import WorkerCommand as Command

__all__ = ["Command"]

"""``manage.py runjobs``: the worker (the same command as ``manage.py cronqueue_worker``)."""

from django_cronqueue.management.worker_command import WorkerCommand as Command

__all__ = ["Command"]

"""The ``runjobs`` worker: ``Worker`` (``loop``) claims, renews leases and records
outcomes; its pool runs the handlers."""

from .loop import HELPER_JOIN_TIMEOUT, MAX_DB_BACKOFF, OUTCOME_WRITE_ATTEMPTS, Worker

__all__ = ["HELPER_JOIN_TIMEOUT", "MAX_DB_BACKOFF", "OUTCOME_WRITE_ATTEMPTS", "Worker"]

"""Turning a call into a ``Job`` row, after checking everything first.

- ``decorators``: ``@jobs.job`` and ``@jobs.cron`` and the handles they return;
- ``workflows``: signatures, chains, groups with callbacks, jobs that wait for others;
- ``on_commit``: enqueue once the site's transaction commits;
- ``enqueue``: one job or many, inside the caller's transaction;
- ``arguments``: a call's payload and options checked (``InvalidPayload`` and friends);
- ``dedupe``: the job holding a dedupe key, and spans of ``dedupe_for``;
- ``eager``: ``CRONQUEUE["EAGER"]``, tests' run-at-once mode.

May import ``running`` and everything below it.
"""

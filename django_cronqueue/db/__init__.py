"""The database underneath: what the queue asks of each vendor beyond the ORM.

- ``cursors``: the hot statements' cursors (server-side parameters, prepared claims);
- ``clock``: the database's clock, and a worker's clock corrected to it;
- ``notify``: PostgreSQL LISTEN/NOTIFY wake-ups and cancel requests;
- ``sqlite_defaults``: WAL, a busy timeout and IMMEDIATE transactions on SQLite;
- ``routing_checks``: the system checks of where the queue lives (``routers``).

May import ``conf`` and ``routers`` only.
"""

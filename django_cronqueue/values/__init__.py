"""The values a row stores, and their limits: checked before anything is written.

- ``validation``: the limits a row's columns impose and the predicates every check is
  built from (names, queues, priorities, JSON that every database stores alike);
- ``typedjson``: argument values JSON has no type for (datetimes, decimals, UUIDs, ...),
  kept in a stored payload as tagged objects and given back as they were;
- ``error_text``: bounded, readable, storable error text and exception class paths.

Pure: no Django models, no database. May import nothing of the package but ``conf``.
"""

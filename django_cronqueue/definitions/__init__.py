"""Job definitions: what ``@jobs.job`` and ``@jobs.cron`` register, checked at import.

- ``registry``: the name -> code mapping and every option a definition is checked against;
- ``backoff``: retry delays; ``flow_options``: ``rate_limit`` and the limit key;
- ``option_hints``: what to write instead of another queue's option name.

No database. May import ``cron``, ``conf``, ``exceptions`` and ``values``.
"""

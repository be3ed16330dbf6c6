"""The management commands (``commands/``): each parses its options and calls library
code that tests call directly (``worker_command`` is ``runjobs``' and
``cronqueue_worker``'s). May import every concept; no module of the package imports it.
"""

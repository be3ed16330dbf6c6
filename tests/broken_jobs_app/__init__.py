"""An app whose jobs.py breaks on purpose; only tests/unit/definitions/test_registry.py installs it,
in a subprocess, through tests.broken_jobs_app.settings."""

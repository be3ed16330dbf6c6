"""A new site as a team leaving Celery writes it: the README's settings and nothing more
(the default SQLite settings, no LOGGING), for tests that run real manage.py processes."""

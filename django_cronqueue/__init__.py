"""django-cronqueue: background jobs and cron schedules in your Django database."""

__version__ = "0.1.0.dev0"

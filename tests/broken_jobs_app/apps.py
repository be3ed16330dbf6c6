from django.apps import AppConfig


class BrokenJobsAppConfig(AppConfig):
    name = "tests.broken_jobs_app"
    label = "broken_jobs"

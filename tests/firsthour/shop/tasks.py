"""Where Celery code lives: not imported unless CRONQUEUE["DISCOVER"] lists "tasks"."""

from django_cronqueue import jobs


@jobs.job
def send_receipt(order_id: int) -> None:
    pass


@jobs.cron("0 6 * * 1")
def weekly_report(run: jobs.CronRun) -> None:
    pass

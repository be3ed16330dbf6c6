from django_cronqueue import jobs


@jobs.job
def noop(n: int = 0) -> None:
    pass


@jobs.job(retries=0)
def fails() -> None:
    raise ValueError("out of stock")


@jobs.cron("0 3 * * *")
def nightly(run: jobs.CronRun) -> None:
    pass

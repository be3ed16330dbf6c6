from django_cronqueue import jobs


@jobs.job
def plain(n: int, card_token: str, email: str) -> None:
    pass


@jobs.job(sensitive=("card_token", "email"))
def two_sensitive(n: int, card_token: str, email: str) -> None:
    pass


@jobs.job(sensitive=True)
def all_sensitive(n: int, card_token: str, email: str) -> None:
    pass

from django.db import models


class SideEffect(models.Model):
    """One row per handler call: lets tests count runs across processes."""

    key = models.CharField(max_length=100, db_index=True)
    pid = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return self.key


class Note(models.Model):
    text = models.CharField(max_length=100)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return self.text

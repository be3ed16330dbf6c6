from django.db import models


class Order(models.Model):
    email = models.EmailField()
    created_at = models.DateTimeField(auto_now_add=True)
    receipt_sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Order #{self.pk} for {self.email}"

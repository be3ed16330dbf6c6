from django.contrib import admin
from django.urls import path

from django_cronqueue.metrics import MetricsView

METRICS_TOKEN = "scrape-token-for-tests"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/", MetricsView.as_view(), name="metrics"),
    path("metrics/token/", MetricsView.as_view(bearer_token=METRICS_TOKEN), name="metrics-token"),
]

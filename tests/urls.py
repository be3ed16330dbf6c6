from django.contrib import admin
from django.urls import path

from django_cronqueue.metrics import MetricsView
from tests.testapp import views

METRICS_TOKEN = "scrape-token-for-tests"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("order/", views.place_order),
    path("metrics/", MetricsView.as_view(), name="metrics"),
    path("metrics/token/", MetricsView.as_view(bearer_token=METRICS_TOKEN), name="metrics-token"),
]

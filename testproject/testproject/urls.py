from django.contrib import admin
from django.urls import path

from django_cronqueue.metrics import MetricsView
from shop import views

urlpatterns = [
    path("", views.home, name="home"),
    path("admin/", admin.site.urls),
    # The queue's gauges for Prometheus (staff only; see docs/metrics-and-traces.md).
    path("metrics/", MetricsView.as_view(), name="metrics"),
]

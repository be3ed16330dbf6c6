"""Views of the test app: a request that enqueues a job."""

from django.http import HttpRequest, JsonResponse

from tests.testapp import jobs


def place_order(request: HttpRequest) -> JsonResponse:
    """Enqueues ``record``, inside a SERVER span as an instrumented Django site has."""
    # Imported here: the URLconf must load where OpenTelemetry is not installed
    # (tests/integrations/test_without_extras.py).
    from opentelemetry import trace

    tracer = trace.get_tracer("tests.testapp")
    with tracer.start_as_current_span("GET /order", kind=trace.SpanKind.SERVER):
        job = jobs.record.enqueue(key=request.GET.get("key", "order"))
    return JsonResponse({"job": job.pk})

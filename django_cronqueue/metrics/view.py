"""``MetricsView``: the queue's gauges for Prometheus to scrape.

Staff-only by default: an active staff user's session, or, for Prometheus itself, a
bearer token set on the view (``MetricsView.as_view(bearer_token=...)``; Prometheus sends
it with ``authorization: {credentials: ...}`` in its scrape config). Anyone else gets
403. ``as_view(require_staff=False)`` serves everyone: only behind a network that keeps
strangers out.
"""

from __future__ import annotations

import hmac
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views import View

from .client import MISSING, installed

__all__ = ["MetricsView"]

PLAIN_TEXT = "text/plain; charset=utf-8"


class MetricsView(View):
    http_method_names = ["get", "head"]
    require_staff: bool = True
    bearer_token: str = ""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not self.allowed(request):
            return HttpResponse("Forbidden: staff only.\n", status=403, content_type=PLAIN_TEXT)
        if not installed():
            return HttpResponse(MISSING + "\n", status=501, content_type=PLAIN_TEXT)
        from .queue_metrics import render  # the gauges: loaded at the first scrape

        body, content_type = render(timezone.now(), request.headers.get("Accept", ""))
        return HttpResponse(body, content_type=content_type)

    def allowed(self, request: HttpRequest) -> bool:
        if not self.require_staff:
            return True
        if self.bearer_token and self._token_matches(request):
            return True
        user = getattr(request, "user", None)
        return bool(user is not None and user.is_active and user.is_staff)

    def _token_matches(self, request: HttpRequest) -> bool:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self.bearer_token.encode()
        )

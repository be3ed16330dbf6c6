"""The live refresh of the job list, a job's page and the dashboard (``static/
django_cronqueue/live.js``): the page fetches its own URL every few seconds, with the
``X-CronQueue-Live`` header, and swaps in the parts that changed.

A refresh runs the same view as a page load, so it costs what a page load costs (the
same statements) and never more. It leaves the session's messages for the next page
load: a refresh renders them without using them up, and adds none of its own (a search's
warnings are given on the page load only).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.messages.storage.base import BaseStorage
from django.http import HttpRequest, HttpResponse
from django.template.response import SimpleTemplateResponse

HEADER = "X-CronQueue-Live"


def is_live(request: HttpRequest) -> bool:
    """Whether ``request`` is a live refresh of a page already shown."""
    return request.headers.get(HEADER) == "1"


def keep_messages(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """A refresh renders the page's messages without using them up."""
    if not is_live(request):
        return response
    storage = messages.get_messages(request)

    def unused(rendered: Any) -> None:
        if isinstance(storage, BaseStorage):
            storage.used = False

    if isinstance(response, SimpleTemplateResponse) and not response.is_rendered:
        response.add_post_render_callback(unused)
    response.headers["Cache-Control"] = "no-store"
    return response


class LiveRefresh:
    """The job admin's list and a job's page refresh live (the dashboard's view calls
    ``keep_messages`` itself)."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return keep_messages(request, super().changelist_view(request, extra_context))  # type: ignore[misc]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)  # type: ignore[misc]
        return keep_messages(request, response)

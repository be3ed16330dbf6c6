"""Fair keys' weights in the admin, beside pauses: the "Fair shares" list, where the
weight of each key is edited in place (``FairShareAdmin``).

A weight change goes through ``jobs.set_weight()``; the turns' state (when a key's turn
ended, what it used of it, whether a claim found it idle) is read-only. Changing weights
needs the ``change_job`` permission, the one that steers jobs; seeing them, ``view_job``
or ``change_job``. Each change is in the key's admin history ("Weight 1 -> 4"). Keys
are created by enqueues, not here, and removed by no one: a key without jobs costs its
row only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from .. import jobs
from ..models import FairShare
from .base import refuse_forbidden_action
from .pauses import job_permission

if TYPE_CHECKING:
    _FairShareAdmin = admin.ModelAdmin[FairShare]
else:  # Django's classes cannot be subscripted at run time
    _FairShareAdmin = admin.ModelAdmin


class FairShareAdmin(_FairShareAdmin):
    list_display = ("queue", "fair_key", "weight", "turn_at", "used", "idle_until")
    list_editable = ("weight",)
    list_filter = ("queue",)
    search_fields = ("queue", "fair_key")
    ordering = ("queue", "fair_key")
    fields = ("queue", "fair_key", "weight", "turn_at", "used", "idle_until")
    readonly_fields = ("queue", "fair_key", "turn_at", "used", "idle_until")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return job_permission(request, "view") or job_permission(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return job_permission(request, "change")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        refuse_forbidden_action(self, request)
        return super().changelist_view(request, extra_context)

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        """The history entry of a weight change says from what to what (in place on the
        list, or on the key's page)."""
        if "weight" not in form.changed_data:
            return super().construct_change_message(request, form, formsets, add)
        return f"Weight {form.initial.get('weight')} -> {form.cleaned_data['weight']}"

    def save_model(self, request: HttpRequest, obj: FairShare, form: Any, change: bool) -> None:
        jobs.set_weight(obj.queue, obj.fair_key, obj.weight)

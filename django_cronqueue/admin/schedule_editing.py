"""Adding, changing and deleting dynamic schedules in the CronSchedule admin: the
admin's own add, change and delete views, saving through the library
(``CronSchedule.objects.create_dynamic``, ``schedule.edit``, ``schedule.delete``) so that
its checks and arming rules hold and the admin's history records each save; a preview
endpoint for the expression. A code schedule's page stays read-only (ReadOnlyAdmin)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.forms import ModelForm
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import URLPattern, path, reverse

from .. import cron
from ..models import CronSchedule
from .base import ReadOnlyAdmin
from .schedule_form import (
    DEFINITION_FIELDS,
    AddScheduleForm,
    DynamicScheduleForm,
    preview,
    preview_html,
)


class SaveRefused(Exception):
    """The library refused a save the form had checked (a concurrent write)."""


class EditableScheduleAdmin(ReadOnlyAdmin[CronSchedule]):
    # a bulk delete would bypass the library (and could take code schedules)
    hidden_actions = ("delete_selected",)
    #: A code schedule's page (and a dynamic one's for a user who may not change it).
    code_fields: list[str]
    #: A dynamic schedule's change page: its definition in the form, the rest shown.
    dynamic_readonly = [
        "name_display",
        "source",
        "next_runs_display",
        "last_occurrence_display",
        "cursor",
        "next_run",
        "paused",
        "active",
        "created_at",
        "updated_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return admin.ModelAdmin.has_add_permission(self, request)

    def has_delete_permission(self, request: HttpRequest, obj: CronSchedule | None = None) -> bool:
        if obj is not None and not obj.is_dynamic:
            return False
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def get_fields(self, request: HttpRequest, obj: CronSchedule | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("name", *DEFINITION_FIELDS)
        if self._editable(request, obj):
            return (*self.dynamic_readonly[:2], *DEFINITION_FIELDS, *self.dynamic_readonly[2:])
        return tuple(self.code_fields)

    def _editable(self, request: HttpRequest, obj: CronSchedule) -> bool:
        """A dynamic schedule, and a user who may change it: the page is its form."""
        return obj.is_dynamic and self.has_change_permission(request, obj)

    def get_readonly_fields(
        self, request: HttpRequest, obj: CronSchedule | None = None
    ) -> tuple[str, ...]:
        if obj is None:
            return ()
        if self._editable(request, obj):
            return tuple(self.dynamic_readonly)
        return self.get_fields(request, obj)

    def get_form(
        self,
        request: HttpRequest,
        obj: CronSchedule | None = None,
        change: bool = False,
        **kwargs: Any,
    ) -> type[ModelForm[CronSchedule]]:
        if obj is None:
            return AddScheduleForm
        if self._editable(request, obj):
            return DynamicScheduleForm
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request: HttpRequest, obj: CronSchedule, form: Any, change: bool) -> None:
        """Create or edit through the library; a new row's values are copied onto ``obj``,
        which the admin logs and redirects to."""
        definition = form.definition()
        try:
            if change:
                obj.edit(**definition)
                return
            created = CronSchedule.objects.create_dynamic(
                name=form.cleaned_data["name"], **definition
            )
        except (CronSchedule.DoesNotExist, ValueError) as exc:
            # another user's write between the form's checks and this save: the schedule
            # was deleted, or its name taken
            raise SaveRefused(str(exc)) from exc
        for field in CronSchedule._meta.concrete_fields:
            setattr(obj, field.attname, getattr(created, field.attname))
        obj._state.adding = False
        obj._state.db = created._state.db

    def delete_model(self, request: HttpRequest, obj: CronSchedule) -> None:
        obj.delete()

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The add page and a dynamic schedule's change page save; a code schedule's page
        stays read-only (ReadOnlyAdmin)."""
        obj = None if object_id is None else self.get_object(request, unquote(object_id))
        if object_id is not None and (obj is None or not obj.is_dynamic):
            return super().changeform_view(request, object_id, form_url, extra_context)
        try:
            return admin.ModelAdmin.changeform_view(
                self, request, object_id, form_url, extra_context
            )
        except SaveRefused as exc:  # the admin's transaction rolled back: nothing logged
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(
                reverse(
                    "admin:django_cronqueue_cronschedule_changelist",
                    current_app=self.admin_site.name,
                )
            )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: CronSchedule | None = None,
    ) -> HttpResponse:
        form = context["adminform"].form
        if isinstance(form, DynamicScheduleForm):
            values = form.data if form.is_bound else {**form.initial}
            expression = str(values.get("expression") or "")
            context["cq_preview"] = preview_html(expression, str(values.get("tz") or ""))
            context["cq_preview_url"] = reverse(
                "admin:django_cronqueue_cronschedule_preview", current_app=self.admin_site.name
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """GET ?expression=...&tz=...: the description and next five runs as JSON, or
        a 400 with the cron module's message."""
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        if not (self.has_add_permission(request) or self.has_change_permission(request)):
            raise PermissionDenied
        expression = request.GET.get("expression", "")
        try:
            return JsonResponse(preview(expression, request.GET.get("tz", "")))
        except (cron.InvalidCronExpression, cron.InvalidTimeZone) as exc:
            return JsonResponse({"error": str(exc)}, status=400)

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            return self.admin_site.admin_view(view)

        info = self.opts.app_label, self.opts.model_name
        return [
            path("preview/", wrap(self.preview_view), name=f"{info[0]}_{info[1]}_preview"),
            *super().get_urls(),
        ]

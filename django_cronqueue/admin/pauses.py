"""Pauses of queues and job names in the admin: the "Pauses" list and its add and change
forms (``PauseAdmin``), and the dashboard's Pause and Resume buttons
(``pause_from_dashboard``, ``resume_from_dashboard``).

Every change goes through ``jobs.pause()`` and ``jobs.resume()``: deleting a pause is
resuming, which wakes idle workers. Managing pauses needs the ``change_job``
permission, the one that steers jobs, whatever the pause model's own permissions say;
seeing them, ``view_job`` or ``change_job``. Every change is written to the admin's
history, on the pause.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from .. import jobs
from ..conf import database_alias
from ..models import Job, Pause
from ..values.validation import MAX_NAME_LENGTH, MAX_QUEUE_LENGTH
from .actions import by_whom
from .base import refuse_forbidden_action
from .renderers import pause_until_text

if TYPE_CHECKING:
    _PauseAdmin = admin.ModelAdmin[Pause]
    _PauseModelForm = forms.ModelForm[Pause]
else:  # Django's classes cannot be subscripted at run time
    _PauseAdmin = admin.ModelAdmin
    _PauseModelForm = forms.ModelForm

ONE_OF = "Give a queue or a job name, not both."


def job_permission(request: HttpRequest, action: str) -> bool:
    """Whether the user has the permission ``action`` (``view``, ``change``) on jobs."""
    return request.user.has_perm(
        f"{Job._meta.app_label}.{get_permission_codename(action, Job._meta)}"
    )


def _pauses() -> QuerySet[Pause]:
    return Pause.objects.using(database_alias())


def _existing(queue: str, name: str) -> Pause | None:
    return _pauses().filter(queue=queue, name=name).first()


class PauseForm(_PauseModelForm):
    """A pause of exactly one queue or job name, ending (if at all) in the future."""

    class Meta:
        model = Pause
        fields = ["queue", "name", "until", "reason"]
        help_texts = {
            "queue": "Pause every job of this queue…",
            "name": "…or every job of this name (give one of the two).",
            "until": "The pause ends by itself at this instant. Empty: until resumed.",
        }

    def clean_until(self) -> dt.datetime | None:
        until: dt.datetime | None = self.cleaned_data.get("until")
        if until is None:
            return None
        if timezone.is_naive(until):  # a project with USE_TZ = False
            until = timezone.make_aware(until)
        if until <= timezone.now():
            raise forms.ValidationError("This instant has passed: the pause would end at once.")
        return until

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Django checks the model's unique and check constraints on the database the
        # instance belongs to: the queue's own (CRONQUEUE["DATABASE"]).
        self.instance._state.db = self.instance._state.db or database_alias()

    def clean(self) -> dict[str, Any]:
        """Exactly one of queue and job name, not paused yet. The errors go to those
        fields, which keeps Django from repeating them in its constraints' words."""
        data = super().clean() or {}
        if self.instance.pk is not None or {"queue", "name"} & set(self.errors):
            return data  # a change (queue and name are read-only), or a field error
        queue, name = data.get("queue") or "", data.get("name") or ""
        if not queue and not name:
            self.add_error("queue", "Give a queue or a job name.")
        elif queue and name:
            self.add_error("name", ONE_OF)
        elif (existing := _existing(queue, name)) is not None:
            self.add_error(
                "queue" if queue else "name",
                f"{str(existing).capitalize()} is already paused: change that pause instead.",
            )
        return data


@admin.action(description="Resume selected (end their pauses)", permissions=["delete"])
def delete_selected(
    modeladmin: admin.ModelAdmin[Pause], request: HttpRequest, queryset: QuerySet[Pause]
) -> HttpResponse | None:
    """Django's "delete selected" (its confirmation page, then ``delete_queryset``: the
    pauses end), under the name that says what deleting a pause does."""
    return django_delete_selected(modeladmin, request, queryset)


class PauseAdmin(_PauseAdmin):
    form = PauseForm
    actions = [delete_selected]  # in place of the site's action of the same name
    list_display = [
        "target",
        "until_display",
        "reason_display",
        "created_by",
        "created_at",
        "in_force",
    ]
    list_display_links = ["target"]
    ordering = ["queue", "name"]
    search_fields = ["queue", "name", "reason"]

    class Media:
        css = {"all": ["django_cronqueue/admin.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Pause]:
        return super().get_queryset(request).using(database_alias())

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        refuse_forbidden_action(self, request)
        return super().changelist_view(request, extra_context)

    def get_readonly_fields(self, request: HttpRequest, obj: Pause | None = None) -> list[str]:
        if obj is None:
            return []
        return ["queue", "name", "created_by", "created_at"]

    # -- permissions: those of jobs

    def has_view_permission(self, request: HttpRequest, obj: Pause | None = None) -> bool:
        return job_permission(request, "view") or job_permission(request, "change")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return job_permission(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Pause | None = None) -> bool:
        return job_permission(request, "change")

    def has_delete_permission(self, request: HttpRequest, obj: Pause | None = None) -> bool:
        return job_permission(request, "change")

    # -- columns

    @admin.display(description="queue or job name", ordering="queue")
    def target(self, pause: Pause) -> str:
        return str(pause)

    @admin.display(description="until", ordering="until")
    def until_display(self, pause: Pause) -> str:
        return pause_until_text(pause.until, timezone.now())

    @admin.display(description="reason")
    def reason_display(self, pause: Pause) -> str:
        text = pause.reason.strip()
        if len(text) <= 80:
            return text
        return format_html('<span title="{}">{}…</span>', text, text[:79])

    @admin.display(description="in force", boolean=True)
    def in_force(self, pause: Pause) -> bool:
        return pause.holds(timezone.now())

    # -- changes, all through jobs.pause() and jobs.resume()

    def save_model(self, request: HttpRequest, obj: Pause, form: Any, change: bool) -> None:
        row = jobs.pause(
            queue=obj.queue or None,
            name=obj.name or None,
            until=obj.until,
            reason=obj.reason,
            by=by_whom(request),
        )
        for field in Pause._meta.concrete_fields:
            setattr(obj, field.attname, getattr(row, field.attname))
        obj._state.adding, obj._state.db = False, row._state.db

    def delete_model(self, request: HttpRequest, obj: Pause) -> None:
        jobs.resume(queue=obj.queue or None, name=obj.name or None)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Pause]) -> None:
        for pause in queryset:
            self.delete_model(request, pause)


# --- the dashboard's buttons ---------------------------------------------------------


class PauseTargetForm(forms.Form):
    """What a dashboard button posts: a queue or a job name."""

    queue = forms.CharField(required=False, max_length=MAX_QUEUE_LENGTH)
    name = forms.CharField(required=False, max_length=MAX_NAME_LENGTH)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        if bool(data.get("queue")) == bool(data.get("name")):
            raise forms.ValidationError(ONE_OF if data.get("queue") else "No queue or job name.")
        return data

    def target(self) -> tuple[str, str]:
        """(queue, job name), one of them empty."""
        return str(self.cleaned_data["queue"]), str(self.cleaned_data["name"])

    def label(self) -> str:
        queue, name = self.target()
        return f"queue {queue}" if queue else f"job {name}"


def _dashboard_post(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest
) -> PauseTargetForm | HttpResponse:
    """The checked form of a dashboard button's POST, or the response refusing it."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    form = PauseTargetForm(request.POST)
    if form.is_valid():
        return form
    errors = " ".join(str(message) for errors in form.errors.values() for message in errors)
    model_admin.message_user(request, f"Nothing was paused or resumed: {errors}", messages.ERROR)
    return HttpResponseRedirect(_dashboard(model_admin))


def _dashboard(model_admin: admin.ModelAdmin[Any]) -> str:
    return reverse("admin:django_cronqueue_job_dashboard", current_app=model_admin.admin_site.name)


def _pause_admin(model_admin: admin.ModelAdmin[Any]) -> PauseAdmin | None:
    found = model_admin.admin_site._registry.get(Pause)
    return found if isinstance(found, PauseAdmin) else None


def pause_from_dashboard(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Pause a queue or a job name until it is resumed."""
    form = _dashboard_post(model_admin, request)
    if isinstance(form, HttpResponse):
        return form
    queue, name = form.target()
    existed = _existing(queue, name) is not None
    row = jobs.pause(queue=queue or None, name=name or None, by=by_whom(request))
    history = _pause_admin(model_admin)
    if history is not None:
        log = history.log_change if existed else history.log_addition
        log(request, row, "Paused from the dashboard, until resumed")
    model_admin.message_user(
        request,
        f"Paused {form.label()} until resumed: no worker claims its pending jobs; "
        "running ones finish.",
        messages.SUCCESS,
    )
    return HttpResponseRedirect(_dashboard(model_admin))


def resume_from_dashboard(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """End the pause of a queue or a job name; idle workers are woken."""
    form = _dashboard_post(model_admin, request)
    if isinstance(form, HttpResponse):
        return form
    queue, name = form.target()
    history = _pause_admin(model_admin)
    if history is not None:  # before the row goes, as Django does
        history.log_deletions(request, _pauses().filter(queue=queue, name=name))
    if jobs.resume(queue=queue or None, name=name or None):
        model_admin.message_user(request, f"Resumed {form.label()}.", messages.SUCCESS)
    else:
        model_admin.message_user(
            request, f"{form.label().capitalize()} was not paused.", messages.WARNING
        )
    return HttpResponseRedirect(_dashboard(model_admin))

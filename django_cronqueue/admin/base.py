"""``ReadOnlyAdmin``, the base of the job and schedule admins: rows are shown, never
edited (no add, no delete, no save); state changes are the explicit actions and the
buttons of the detail pages, each a POST checked against the change permission."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from ..conf import database_alias
from .actions import Action, Noun, Outcome, history_of, messages_of

M = TypeVar("M", bound=Model)

try:  # Django 6.1 and later: an action is offered on the list, on a change form or both
    from django.contrib.admin import ActionLocation  # type: ignore[attr-defined,unused-ignore]

    LIST_ACTIONS: Any = ActionLocation.CHANGE_LIST
except ImportError:  # Django 5.2 and 6.0: on the list only
    LIST_ACTIONS = None

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin
else:  # django.contrib.admin's class cannot be subscripted at run time

    class _ModelAdmin(Generic[M], admin.ModelAdmin):
        pass


def defined_action_names(model_admin: admin.ModelAdmin[Any]) -> list[str]:
    """The names of the list actions ``model_admin`` defines, before their permissions are
    checked: Django 6.1 lists them as ``Action`` objects (unpacking one is deprecated),
    earlier versions as ``(func, name, description)`` tuples."""
    return [
        action.name if hasattr(action, "name") else action[1]
        for action in model_admin._get_base_actions()  # type: ignore[attr-defined]
    ]


def refuse_forbidden_action(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> None:
    """Raise PermissionDenied (403) for the POST of a list action that ``model_admin``
    defines but does not offer this user (an action needs its permission): Django would
    only say "No action selected", and a forged POST must be refused as a button's is."""
    if request.method != "POST" or "action" not in request.POST:
        return
    try:
        name = request.POST.getlist("action")[int(request.POST.get("index", 0))]
    except (ValueError, IndexError):
        return
    # Django's list of an admin's actions before their permissions are checked
    defined = set(defined_action_names(model_admin))
    if name in defined and name not in model_admin.get_actions(request):
        raise PermissionDenied


class ReadOnlyAdmin(_ModelAdmin[M]):
    show_facets = admin.ShowFacets.NEVER
    hidden_actions: tuple[str, ...] = ()  # the site's actions this admin does not offer

    class Media:
        css = {"all": ["django_cronqueue/admin.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[M]:
        return super().get_queryset(request).using(database_alias())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_actions(
        self, request: HttpRequest, action_location: Any = LIST_ACTIONS
    ) -> dict[str, Any]:
        # ``action_location`` is Django 6.1's, passed on only where Django has it.
        if action_location is None:
            actions: dict[str, Any] = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location=action_location)  # type: ignore[call-arg,unused-ignore]
        for name in self.hidden_actions:
            actions.pop(name, None)
        return actions

    def has_delete_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        refuse_forbidden_action(self, request)
        return super().changelist_view(request, extra_context)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "POST":
            if not self.has_change_permission(request):
                raise PermissionDenied  # as every action answers a user who may not act
            # The form is read-only; saving it would write the whole row behind the
            # lifecycle's back (and could undo a worker's concurrent change).
            return HttpResponseNotAllowed(["GET"])
        context = {
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            **(extra_context or {}),
        }
        return super().changeform_view(request, object_id, form_url, context)

    def object_button_view(
        self, request: HttpRequest, object_id: str, handler: Callable[[M], object]
    ) -> HttpResponse:
        """A detail page button: POST only, change permission on that object."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return self.missing_object(request, object_id)
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        handler(obj)
        return HttpResponseRedirect(self.change_url(obj))

    def missing_object(self, request: HttpRequest, object_id: str) -> HttpResponse:
        # Django's own helper for a missing object; private, so django-stubs lacks it.
        response: HttpResponse = self._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]
            request, self.opts, object_id
        )
        return response

    def change_url(self, obj: M) -> str:
        return self.url_of(obj, "change")

    def url_of(self, obj: M, key: str) -> str:
        """The URL of one of the object's pages or buttons (``change``, ``pause``, ...)."""
        opts = self.opts
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_{key}",
            args=[quote(obj.pk)],
            current_app=self.admin_site.name,
        )

    def dashboard_url(self) -> str:
        return reverse("admin:django_cronqueue_job_dashboard", current_app=self.admin_site.name)

    def announce(
        self, request: HttpRequest, action: Action, noun: Noun[M], outcome: Outcome[M]
    ) -> None:
        """The messages and the history entries of an action's outcome."""
        for message, level in messages_of(action, noun, outcome):
            self.message_user(request, message, level)
        for message, objects in history_of(action, outcome):
            self.log_changes(request, objects, message)

    def log_changes(self, request: HttpRequest, objects: list[M], message: str) -> None:
        """An admin history entry (LogEntry) per changed object, in bulk."""
        from django.contrib.admin.models import CHANGE, LogEntry

        for start in range(0, len(objects), 500):
            LogEntry.objects.log_actions(
                # the admin's actions run for a logged-in staff user, whose pk is set
                user_id=request.user.pk,  # type: ignore[arg-type]
                queryset=objects[start : start + 500],
                action_flag=CHANGE,
                change_message=message,
            )

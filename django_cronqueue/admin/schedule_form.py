"""The forms of a dynamic schedule's add and change pages, and the preview of an
expression: its description in plain words and its next five runs in UTC and in the
schedule's zone. Every check is the library's (``dynamic.check``); saving goes through
``CronSchedule.objects.create_dynamic`` and ``CronSchedule.edit``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import cron, observe
from ..cron.spec import CATCH_UP_MODES, DEFAULT_MAX_CATCH_UP, OVERLAP_MODES
from ..definitions.registry import JobDefinition, registry
from ..enqueueing.arguments import check_payload, check_priority, check_queue
from ..exceptions import InvalidPayload, UnknownJob
from ..models import CronSchedule
from ..schedules import dynamic
from ..values import typedjson
from ..values.validation import MAX_EXPRESSION_LENGTH, MAX_JSON_DEPTH, MAX_ZONE_NAME_LENGTH
from .renderers import local_time

PREVIEW_RUNS = 5
ZONE_LIST_ID = "cq-zone-names"
#: The form fields that are ``dynamic.STORED_OPTIONS``, in the order the page shows them.
OPTION_FIELDS = list(dynamic.STORED_OPTIONS)
DEFINITION_FIELDS = ["job", "payload", "expression", "tz", *OPTION_FIELDS]


def job_choices() -> list[tuple[str, str]]:
    """The registered ``@jobs.job`` names (a ``@jobs.cron`` handler is its own schedule)."""
    names = [definition.name for definition in registry if definition.cron is None]
    return [("", "---------"), *((name, name) for name in sorted(names))]


class ZoneInput(forms.TextInput):
    """A text input offering the IANA zone names (a datalist: the browser's own suggestions)."""

    def __init__(self) -> None:
        super().__init__(attrs={"list": ZONE_LIST_ID, "autocomplete": "off"})

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        options = format_html_join("", '<option value="{}">', ((z,) for z in cron.zone_names()))
        return format_html(
            '{}<datalist id="{}">{}</datalist>',
            super().render(name, value, attrs, renderer),
            ZONE_LIST_ID,
            options,
        )


class PayloadField(forms.CharField):
    """JSON text; changed when it means something else (not when only spaced differently)."""

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return bool(json.loads(initial or "{}") != json.loads(data or ""))
        except (ValueError, RecursionError):  # deep nesting exhausts the decoder's stack
            return True


class DynamicScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """A dynamic schedule's definition. Only ``name`` (on the add page) is a model field of
    the form: the rest is handed to the library, never written onto the instance."""

    job = forms.ChoiceField(help_text="A registered @jobs.job; its handler gets the payload.")
    payload = PayloadField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "class": "vLargeTextField"}),
        initial="{}",
        help_text="A JSON object: the handler's keyword arguments.",
    )
    expression = forms.CharField(
        max_length=MAX_EXPRESSION_LENGTH,
        widget=forms.TextInput(attrs={"class": "vTextField", "autocomplete": "off"}),
        help_text='Five fields (minute hour day month weekday) or an alias such as "@daily".',
    )
    tz = forms.CharField(
        label="Time zone",
        max_length=MAX_ZONE_NAME_LENGTH,
        widget=ZoneInput(),
        help_text="An IANA name such as Europe/Paris; empty for settings.TIME_ZONE.",
        required=False,
    )
    catch_up = forms.ChoiceField(
        choices=[(mode, mode) for mode in CATCH_UP_MODES],
        initial="latest",
        help_text="After downtime: the latest missed occurrence, all of them, or none.",
    )
    catch_up_window = forms.FloatField(
        required=False,
        min_value=0.001,
        label="Catch-up window (seconds)",
        help_text="Missed occurrences older than this are not caught up; empty: no limit.",
    )
    max_catch_up = forms.IntegerField(
        min_value=1,
        initial=DEFAULT_MAX_CATCH_UP,
        help_text="At most this many missed occurrences are caught up (catch_up all).",
    )
    overlap = forms.ChoiceField(
        choices=[(mode, mode) for mode in OVERLAP_MODES],
        initial="allow",
        help_text="skip: no occurrence while the previous one is pending or running.",
    )
    retries = forms.IntegerField(
        required=False, min_value=0, help_text="Empty: the job's own retries."
    )
    queue = forms.CharField(required=False, help_text="Empty: the job's own queue.")
    priority = forms.IntegerField(required=False, help_text="Empty: the job's own priority.")

    class Meta:
        model = CronSchedule
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["job"].choices = job_choices()  # type: ignore[attr-defined]
        if self.instance.pk is not None:
            self.initial.update(initial_of(self.instance))

    # -- one field at a time, the library's messages on the field they are about

    def clean_job(self) -> str:
        job: str = self.cleaned_data["job"]
        self._definition(job)
        return job

    def clean_payload(self) -> dict[str, Any]:
        text = self.cleaned_data["payload"]
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}.") from None
        except RecursionError:
            raise forms.ValidationError(
                f"The payload is nested too deeply (at most {MAX_JSON_DEPTH} levels)."
            ) from None
        if not isinstance(payload, dict):
            raise forms.ValidationError(
                f"The payload must be a JSON object (the handler's keyword arguments), "
                f"got {type(payload).__name__}."
            )
        job = self.cleaned_data.get("job")
        if not job:
            return payload
        definition = self._definition(job)
        try:
            values = stored_to_values(definition, payload)
            check_payload(definition, values)
        except InvalidPayload as exc:
            raise forms.ValidationError(str(exc)) from None
        return values

    def clean_expression(self) -> str:
        expression: str = self.cleaned_data["expression"]
        try:
            cron.validate_expression(expression)
        except cron.InvalidCronExpression as exc:
            raise forms.ValidationError(str(exc)) from None
        return expression

    def clean_tz(self) -> str | None:
        tz: str = self.cleaned_data["tz"].strip()
        if not tz:
            return None
        try:
            cron.load_zone(tz)
        except cron.InvalidTimeZone as exc:
            raise forms.ValidationError(str(exc)) from None
        return tz

    def clean_queue(self) -> str | None:
        return self.cleaned_data["queue"] or None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        job = data.get("job")
        if job and "job" not in self.errors:
            self._check_option("queue", check_queue, job)
            self._check_option("priority", check_priority, job)
        if not self.errors:
            new = self.instance.pk is None
            name = data.get("name", "") if new else self.instance.name
            try:
                dynamic.check(name, self.definition(), new=new)
            except UnknownJob as exc:
                self.add_error("job", str(exc))
            except InvalidPayload as exc:
                self.add_error("payload", str(exc))
            except ValueError as exc:
                self.add_error(None, str(exc))
        return data

    def definition(self) -> dict[str, Any]:
        """The checked values, as ``create_dynamic`` and ``edit`` take them."""
        return {field: self.cleaned_data.get(field) for field in DEFINITION_FIELDS}

    def _check_option(
        self, field: str, check: Callable[[JobDefinition, Any], object], job: str
    ) -> None:
        value = self.cleaned_data.get(field)
        if value is None:
            return
        try:
            check(self._definition(job), value)
        except ValueError as exc:
            self.add_error(field, str(exc))

    def _definition(self, job: str) -> JobDefinition:
        try:
            return dynamic.job_definition(job)
        except UnknownJob as exc:
            raise forms.ValidationError(str(exc)) from None


class AddScheduleForm(DynamicScheduleForm):
    class Meta:
        model = CronSchedule
        fields = ["name"]

    def clean_name(self) -> str:
        try:
            return dynamic.check_name(self.cleaned_data["name"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


def stored_to_values(definition: JobDefinition, payload: dict[str, Any]) -> dict[str, Any]:
    """The arguments a payload typed as the row stores it stands for: the form shows and
    takes the stored JSON, whose tags (``{"$datetime": ...}``) are typed values and whose
    escaped keys (``{"$$gt": 5}``) a caller's own; ``create_dynamic`` and ``edit`` take
    the values and store them the same way again."""
    if not definition.typed_values:
        return payload
    try:
        return typedjson.decode_payload(payload)
    except ValueError as exc:
        raise InvalidPayload(f"Job {definition.name!r}: {exc}.") from None


def initial_of(schedule: CronSchedule) -> dict[str, Any]:
    """A dynamic schedule's values as the form shows them."""
    options = {**dynamic.DEFAULTS, **schedule.options}
    return {
        "job": schedule.job,
        "payload": json.dumps(schedule.payload, indent=2, ensure_ascii=False),
        "expression": schedule.expression,
        "tz": schedule.tz,
        **{option: options[option] for option in OPTION_FIELDS},
    }


# --- the preview ------------------------------------------------------------------


def preview(expression: str, tz: str, now: dt.datetime | None = None) -> dict[str, Any]:
    """The description and next runs of ``expression`` in zone ``tz`` (empty: the
    project's); raises InvalidCronExpression or InvalidTimeZone with the cron module's
    message. Input longer than a schedule can store is refused unread: it costs CPU."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise cron.InvalidCronExpression(
            f"The expression is {len(expression)} characters long; at most "
            f"{MAX_EXPRESSION_LENGTH} are stored."
        )
    if len(tz) > MAX_ZONE_NAME_LENGTH:
        raise cron.InvalidTimeZone(
            f"The time zone name is {len(tz)} characters long; at most {MAX_ZONE_NAME_LENGTH}."
        )
    normalized = cron.validate_expression(expression)
    zone_name = tz.strip() or str(timezone.get_default_timezone())
    zone = cron.load_zone(zone_name)
    now = timezone.now() if now is None else now
    runs = cron.next_occurrences(normalized, zone, now, PREVIEW_RUNS)
    return {
        "description": observe.describe_expression(expression),
        "tz": zone_name,
        "runs": [
            {"utc": local_time(run, dt.timezone.utc), "local": local_time(run, zone)}
            for run in runs
        ],
    }


def preview_html(expression: str, tz: str) -> SafeString:
    """The preview as the page shows it before any typing (or the problem, in words)."""
    try:
        shown = preview(expression, tz)
    except ValueError as exc:
        return format_html('<p class="cq-preview-error">{}</p>', str(exc))
    return format_html(
        '<p class="cq-preview-description">{}</p><ol class="cq-runs">{}</ol>',
        shown["description"] or "-",
        format_html_join(
            "",
            "<li>{} <span class='cq-quiet'>({})</span></li>",
            ((run["local"], run["utc"]) for run in shown["runs"]),
        ),
    )

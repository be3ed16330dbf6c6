"""What keeps the job list fast on millions of rows: its filters (choices read by walking
an index, never by scanning the table), its paginator (no COUNT(*) over the whole
table) and its change list (no payloads or tracebacks loaded)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.db.models.functions import Substr
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import cached_property

from .. import observe
from ..definitions.registry import registry
from ..models import Job, JobStatus
from ..values.validation import MAX_NAME_LENGTH, MAX_QUEUE_LENGTH

#: The columns the list filters by exact value, and how long their values can be.
MAX_LENGTHS = {"name": MAX_NAME_LENGTH, "queue": MAX_QUEUE_LENGTH}
RECENT_WINDOWS = {"1h": dt.timedelta(hours=1), "24h": dt.timedelta(hours=24)}
#: The list shows the head of a job's last error: this many characters of its first line.
ERROR_CHARS = 90

if TYPE_CHECKING:
    _JobPaginator = Paginator[Job]
else:  # django.core.paginator's class cannot be subscripted at run time
    _JobPaginator = Paginator


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(JobStatus.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() in JobStatus.values:
            return queryset.filter(status=self.value())
        return queryset


class FailedRecentlyFilter(admin.SimpleListFilter):
    title = "failed recently"
    parameter_name = "failed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("1h", "In the last hour"), ("24h", "In the last 24 hours")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        window = RECENT_WINDOWS.get(self.value() or "")
        if window is None:
            return queryset
        return queryset.filter(status=JobStatus.FAILED, finished_at__gte=timezone.now() - window)


class BlockedFilter(admin.SimpleListFilter):
    """Pending jobs that wait for their upstream jobs or their batch (the claim index
    leads with ``status, blocked``), or every other job."""

    title = "blocked"
    parameter_name = "blocked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes (pending, waiting)"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() == "yes":
            return queryset.filter(status=JobStatus.PENDING, blocked=True)
        if self.value() == "no":
            return queryset.exclude(status=JobStatus.PENDING, blocked=True)
        return queryset


def batch_id_of(value: str | None) -> int | None:
    """The batch id of a ``batch__id__exact`` value, None when it is no id."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 18:
        return None
    return int(value)


class BatchFilter(admin.SimpleListFilter):
    """The members of one batch, as the batch page links them (``batch__id__exact``).
    Its only choice is the batch filtered by: listing every batch would read them all."""

    title = "batch"
    parameter_name = "batch__id__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        batch_id = batch_id_of(self.value())
        return [] if batch_id is None else [(str(batch_id), f"Batch #{batch_id}")]

    def has_output(self) -> bool:
        return self.value() is not None

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() is None:
            return queryset
        return in_batch(queryset, self.value())


def in_batch(queryset: QuerySet[Job], value: str | None) -> QuerySet[Job]:
    """The members of the batch ``value`` names; none when it names no batch."""
    batch_id = batch_id_of(value)
    return queryset.none() if batch_id is None else queryset.filter(batch_id=batch_id)


def exactly(queryset: QuerySet[Job], column: str, value: str) -> QuerySet[Job]:
    """The rows whose ``column`` is ``value``. A value no row can hold matches none without
    asking the database: one with a NUL (which PostgreSQL refuses even to compare) or one
    longer than the column."""
    if "\x00" in value or len(value) > MAX_LENGTHS[column]:
        return queryset.none()
    return queryset.filter(**{column: value})


class DistinctValueFilter(admin.SimpleListFilter):
    """Choices are the column's distinct values, read by walking its index."""

    column = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, self.label(value)) for value in observe.distinct_values(self.column)]

    def label(self, value: str) -> str:
        return value

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value:
            return exactly(queryset, self.column, value)
        return queryset


class NameFilter(DistinctValueFilter):
    title = "name"
    parameter_name = column = "name"

    def label(self, value: str) -> str:
        return value if value in registry else f"{value} (no code)"


class QueueFilter(DistinctValueFilter):
    title = "queue"
    parameter_name = column = "queue"


class JobPaginator(_JobPaginator):
    """Never counts a whole large table. An unfiltered list of a large table takes the
    database's own row estimate (PostgreSQL ``reltuples``, MariaDB/MySQL
    ``TABLE_ROWS``); any other list counts at most ``observe.COUNT_CAP`` rows and
    says "more than" beyond that."""

    is_estimate = False
    is_lower_bound = False

    @cached_property
    def count(self) -> int:
        # the admin paginates a QuerySet; django-stubs types object_list as a protocol
        estimate = observe.estimated_count(self.object_list)  # type: ignore[arg-type]
        if estimate is not None and estimate >= observe.ESTIMATE_ABOVE:
            self.is_estimate = True
            return estimate
        n, self.is_lower_bound = observe.capped_count(self.object_list)  # type: ignore[arg-type]
        return n

    @property
    def count_display(self) -> str:
        return f"{self.count:,}"


class JobChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        observe.mark_stranded(self.result_list, timezone.now())  # one query, if any is due

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        # The list needs neither payloads nor tracebacks, and only the head of the error.
        queryset: QuerySet[Job] = super().get_queryset(request, exclude_parameters)
        return queryset.defer("payload", "traceback", "result", "last_error").annotate(
            error_head=Substr("last_error", 1, ERROR_CHARS * 2)
        )

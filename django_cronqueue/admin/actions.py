"""The one way the admin changes state: actions on the list pages and buttons on the
detail pages, for jobs and cron schedules alike.

Job actions are set-based: ``bulk.retry_jobs`` (and ``cancel_jobs``,
``run_jobs_now``) update the selected rows 500 at a time, each batch in its own
transaction, and count what they changed and what they skipped, by reason
(``bulk.BulkOutcome``); ``summary_messages`` turns those counts into one success message
and one warning per reason, naming the first few ids. Each batch writes the admin
history entries of the jobs it changed, one per job, in one INSERT, within its
transaction. "Select all" on a million rows thus loads no Job object, and costs one
INSERT of history per 500 jobs changed (and a million history rows, as Django's delete
of a million rows would).

Schedule actions go through the library's own methods (``schedule.pause()``, ...)
object by object, a few rows at most, and record each in an ``Outcome``: changed (with a
note when there is more to say than the verb), or skipped and why. ``ReadOnlyAdmin.announce``
then tells the operator (``messages_of``) and writes an admin history entry per changed
object (``history_of``).

The permission (``change``), the POST and its CSRF token are checked before an action
runs: by Django for list actions, by ``ReadOnlyAdmin.object_button_view`` for buttons.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import groupby
from typing import TYPE_CHECKING, Generic, TypeVar

from django.contrib import messages
from django.db.models import Model
from django.http import HttpRequest

from .renderers import listing, plural

if TYPE_CHECKING:  # the operations load when an action runs
    from ..operations.bulk import Tally

M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class Action:
    """What the operator sees of an action: ``label`` on its button and in the history
    ("Retry (admin action)"), ``verb`` in its message ("Retried 2 jobs"; a ``{}`` in the
    verb places the objects: "Made {} due now"). ``key`` names its button's URL."""

    key: str
    label: str
    verb: str

    def done(self, what: str) -> str:
        return self.verb.format(what) if "{}" in self.verb else f"{self.verb} {what}"


@dataclass(frozen=True)
class Noun(Generic[M]):
    """How messages name the objects of one model: ``word`` ("job"), ``label`` of one
    object ("#12"), and how many labels a message lists at most (None: all)."""

    word: str
    label: Callable[[M], str]
    list_at_most: int | None = None


@dataclass(frozen=True)
class Change(Generic[M]):
    obj: M
    note: str = ""  # how it changed, when the action's verb does not say it all


@dataclass
class Outcome(Generic[M]):
    """What an action did: the objects it changed, and those it skipped, by reason."""

    changed: list[Change[M]] = field(default_factory=list)
    skipped: dict[str, list[M]] = field(default_factory=dict)

    def change(self, obj: M, note: str = "") -> None:
        self.changed.append(Change(obj, note))

    def skip(self, reason: str, obj: M) -> None:
        self.skipped.setdefault(reason, []).append(obj)

    @property
    def changed_objects(self) -> list[M]:
        return [change.obj for change in self.changed]

    @property
    def skipped_count(self) -> int:
        return sum(len(objects) for objects in self.skipped.values())


def by_whom(request: HttpRequest) -> str:
    """Who acts, as cancel requests and pauses record it: ``ops (admin)``."""
    return f"{request.user.get_username()} (admin)"


def each(objects: Iterable[M], step: Callable[[M, Outcome[M]], None]) -> Outcome[M]:
    """Apply ``step`` to each object; it records what it did in the outcome."""
    outcome: Outcome[M] = Outcome()
    for obj in objects:
        step(obj, outcome)
    return outcome


def entry_of(action: Action) -> str:
    """The change message of an action's history entries: ``Retry (admin action)``."""
    return f"{action.label} (admin action)"


def history_of(action: Action, outcome: Outcome[M]) -> list[tuple[str, list[M]]]:
    """The history entries of the changed objects: the message of each, and the objects
    it is written for (in order, consecutive objects with the same note together)."""
    entry = entry_of(action)
    return [
        (f"{entry}: {note}" if note else entry, [change.obj for change in changes])
        for note, changes in groupby(outcome.changed, key=lambda change: change.note)
    ]


def messages_of(action: Action, noun: Noun[M], outcome: Outcome[M]) -> list[tuple[str, int]]:
    """One message for what changed, one per reason for what was skipped."""
    found = []
    if outcome.changed:
        labels = [
            f"{noun.label(change.obj)} ({change.note})" if change.note else noun.label(change.obj)
            for change in outcome.changed
        ]
        what = plural(len(labels), noun.word)
        found.append(
            (f"{action.done(what)}: {listing(labels, noun.list_at_most)}.", messages.SUCCESS)
        )
    for reason, objects in outcome.skipped.items():
        labels = [noun.label(obj) for obj in objects]
        found.append(
            (
                f"Skipped {plural(len(labels), noun.word)} ({reason}): "
                f"{listing(labels, noun.list_at_most)}.",
                messages.WARNING,
            )
        )
    if not outcome.changed and not outcome.skipped:
        found.append((f"No {noun.word} was selected.", messages.WARNING))
    return found


def summary_messages(
    changes: list[tuple[Action, str, Tally]], skipped: list[tuple[str, Tally]], word: str
) -> list[tuple[str, int]]:
    """One message per kind of change (its action, the word for its objects, how many:
    "Retried 2 jobs: #1, #2."), one per reason (with some skipped) for the rest, all in
    terms of ``word`` ("job")."""
    found = [
        (done_message(action, noun, tally), messages.SUCCESS)
        for action, noun, tally in changes
        if tally.count
    ]
    for reason, tally in skipped:
        if tally.count:
            found.append(
                (f"Skipped {plural(tally.count, word)} ({reason}){named(tally)}.", messages.WARNING)
            )
    if not found:
        found.append((f"No {word} was selected.", messages.WARNING))
    return found


def done_message(action: Action, word: str, changed: Tally) -> str:
    """The success message: ``Retried 1,234 jobs: #1, #2, … #10 and 1,224 more.``"""
    return f"{action.done(plural(changed.count, word))}{named(changed)}."


def named(tally: Tally) -> str:
    """``: #1, #2 and 40 more`` for a tally with known ids, else nothing."""
    if not tally.ids:
        return ""
    ids = ", ".join(f"#{pk}" for pk in tally.ids)
    rest = tally.count - len(tally.ids)
    return f": {ids} and {rest:,} more" if rest else f": {ids}"

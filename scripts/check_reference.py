#!/usr/bin/env python
"""Check docs/reference.md (and docs/settings.md) against the code, so they cannot drift.

    .venv/bin/python scripts/check_reference.py            # exit 1 and list the differences
    .venv/bin/python scripts/check_reference.py --print    # print the signatures from the code

1. Every signature in a ```python block after ``<!-- reference: signatures -->`` in
   docs/reference.md must equal the code's (whitespace, trailing commas and quotes aside;
   ``dt.`` in the code's annotations is dropped, as the page writes ``datetime``), and
   every public function, method and decorator listed in SIGNATURES must be on the page.
2. docs/settings.md names every CRONQUEUE key and every system check id the code defines.
3. docs/reference.md names every option of the package's management commands, every
   signal, every exception class, and every option of ``@jobs.job`` and ``@jobs.cron``.
4. No markdown table in docs/ or README.md is broken in two by a blank line (Markdown ends
   the table there and prints the rest as a paragraph of pipes).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()


def documented_callables() -> dict[str, Callable[..., Any]]:
    from django_cronqueue import cron, health, jobs, testing
    from django_cronqueue.enqueueing.decorators import EnqueueOptions, JobHandle
    from django_cronqueue.enqueueing.workflows import Chain, Group
    from django_cronqueue.models import Batch, CronSchedule, Job

    found: dict[str, Callable[..., Any]] = {}
    from django_cronqueue.running.context import JobContext

    for name in (
        "job",
        "cron",
        "enqueue",
        "aenqueue",
        "enqueue_on_commit",
        "enqueue_many",
        "tick",
        "exponential",
        "current",
        "cancel",
        "acancel",
        "pause",
        "resume",
        "set_weight",
        "chain",
        "group",
    ):
        found[f"jobs.{name}"] = getattr(jobs, name)
    for cls, names in (
        (JobHandle, ("enqueue", "aenqueue", "enqueue_on_commit", "enqueue_many", "using", "s")),
        (EnqueueOptions, ("enqueue", "aenqueue", "enqueue_on_commit", "enqueue_many", "s")),
        (Chain, ("enqueue", "enqueue_on_commit")),
        (Group, ("then", "finally_", "enqueue", "enqueue_on_commit")),
        (Batch, ("results",)),
        (Job, ("retry", "cancel", "run_now")),
        (JobContext, ("check_cancelled", "set_progress", "upstream_results")),
        (CronSchedule, ("run_now", "backfill", "pause", "resume", "edit", "delete")),
    ):
        for name in names:
            found[f"{cls.__name__}.{name}"] = getattr(cls, name)
    found["CronSchedule.objects.create_dynamic"] = CronSchedule.objects.create_dynamic
    for name in (
        "run_due_jobs",
        "run_until_idle",
        "eager",
        "enqueued",
        "assert_enqueued",
        "assert_not_enqueued",
        "capture_jobs",
    ):
        found[f"testing.{name}"] = getattr(testing, name)
    for name in ("collect", "problems"):
        found[f"health.{name}"] = getattr(health, name)
    for name in (
        "occurrences",
        "next_occurrences",
        "is_interval",
        "validate_expression",
        "load_zone",
    ):
        found[f"cron.{name}"] = getattr(cron, name)
    return found


def render(name: str, func: Callable[..., Any]) -> str:
    """``name(params) -> return`` with unquoted annotations, as the page writes it."""
    signature = inspect.signature(func)
    parts: list[str] = []
    seen_keyword_only = False
    previous_kind = None
    for parameter in signature.parameters.values():
        kind = parameter.kind
        if kind is inspect.Parameter.KEYWORD_ONLY and not seen_keyword_only:
            parts.append("*")
            seen_keyword_only = True
        if kind is inspect.Parameter.VAR_POSITIONAL:
            seen_keyword_only = True
        if (
            previous_kind is inspect.Parameter.POSITIONAL_ONLY
            and kind is not inspect.Parameter.POSITIONAL_ONLY
        ):
            parts.append("/")
        prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
        text = prefix.get(kind, "") + parameter.name
        if parameter.annotation is not inspect.Parameter.empty:
            text += f": {annotation(parameter.annotation)}"
        if parameter.default is not inspect.Parameter.empty:
            text += f" = {parameter.default!r}"
        parts.append(text)
        previous_kind = kind
    if previous_kind is inspect.Parameter.POSITIONAL_ONLY:
        parts.append("/")
    prefix_async = "async " if inspect.iscoroutinefunction(func) else ""
    result = f"{prefix_async}{name}({', '.join(parts)})"
    if signature.return_annotation is not inspect.Signature.empty:
        result += f" -> {annotation(signature.return_annotation)}"
    return result


def annotation(value: Any) -> str:
    text = value if isinstance(value, str) else inspect.formatannotation(value)
    return text.replace("dt.", "")


def normalize(text: str) -> str:
    text = re.sub(r"\s+", "", text).replace('"', "'")
    return re.sub(r",([)\]])", r"\1", text)


def page_signatures(text: str) -> dict[str, str]:
    """name -> the signature as written, from the marked blocks."""
    found: dict[str, str] = {}
    marked = re.finditer(r"<!-- reference: signatures -->\s*```python\n(.*?)```", text, re.S)
    for block in marked:
        for entry in re.split(r"\n\s*\n", block.group(1).strip()):
            name = entry.split("(", 1)[0].strip().removeprefix("async ")
            found[name] = entry.strip()
    return found


def check_signatures(reference: str, problems: list[str]) -> None:
    written = page_signatures(reference)
    for name, func in documented_callables().items():
        actual = render(name, func)
        if name not in written:
            problems.append(f"reference.md lacks the signature of {name}:\n    {actual}")
        elif normalize(written.pop(name)) != normalize(actual):
            problems.append(
                f"reference.md: the signature of {name} differs; the code has\n    {actual}"
            )
    for name in written:
        problems.append(f"reference.md has a signature for {name}, which is not checked here")


def check_settings_page(settings_page: str, problems: list[str]) -> None:
    import dataclasses

    from django_cronqueue.conf import CronQueueSettings

    for field in dataclasses.fields(CronQueueSettings):
        if f"| `{field.name}` |" not in settings_page:
            problems.append(f"settings.md has no row for CRONQUEUE['{field.name}']")
    ids = set()
    for path in (ROOT / "django_cronqueue").rglob("*.py"):
        ids.update(re.findall(r"\b([EW]0\d\d)\b", path.read_text()))
    for check_id in sorted(ids):
        if f"`django_cronqueue.{check_id}`" not in settings_page:
            problems.append(
                f"settings.md does not list the system check django_cronqueue.{check_id}"
            )


def command_options() -> dict[str, list[str]]:
    from django.core.management import get_commands, load_command_class
    from django.core.management.base import BaseCommand

    class Plain(BaseCommand):
        pass

    base = {
        option
        for action in Plain().create_parser("manage.py", "x")._actions
        for option in action.option_strings
    }
    found = {}
    for name, app in sorted(get_commands().items()):
        if app != "django_cronqueue":
            continue
        parser = load_command_class(app, name).create_parser("manage.py", name)
        found[name] = [
            option
            for action in parser._actions
            for option in action.option_strings
            if option not in base and option.startswith("--")
        ]
    return found


def check_names(reference: str, problems: list[str]) -> None:
    from django.dispatch import Signal

    from django_cronqueue import backend, cron, exceptions, jobs, signals

    for command, options in command_options().items():
        section = re.search(rf"### {command}\n(.*?)(?=\n### |\n## |\Z)", reference, re.S)
        if section is None:
            problems.append(f"reference.md has no section '### {command}'")
            continue
        for option in options:
            if f"`{option}" not in section.group(1):
                problems.append(f"reference.md, ### {command}: option {option} is not described")
    for name, value in vars(signals).items():
        if isinstance(value, Signal) and f"`{name}`" not in reference:
            problems.append(f"reference.md does not list the signal {name}")
    for module in (exceptions, backend, cron):
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and name not in reference
            ):
                problems.append(
                    f"reference.md does not list the exception {module.__name__}.{name}"
                )
    for decorator in (jobs.job, jobs.cron):
        for parameter in inspect.signature(decorator).parameters.values():
            if parameter.name in ("func", "unsupported"):
                continue
            if f"| `{parameter.name}` |" not in reference:
                problems.append(
                    f"reference.md's option table lacks {decorator.__name__}'s {parameter.name}"
                )


TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
FENCE_LINE = re.compile(r"^\s*(```|~~~)")


def broken_tables(text: str) -> list[int]:
    """The line numbers (from 1) of table rows that follow a table after blank lines only,
    without a header of their own: Markdown ends a table at a blank line, so such rows
    render as a paragraph of pipes. Fenced code blocks are skipped."""
    lines = text.splitlines()
    found: list[int] = []
    in_fence = False
    last_row: int | None = None  # index of the last table row seen, outside fences
    for index, line in enumerate(lines):
        if FENCE_LINE.match(line):
            in_fence = not in_fence
            last_row = None
            continue
        if in_fence:
            continue
        if not line.strip():
            continue
        if TABLE_ROW.match(line):
            after_blank = last_row is not None and last_row < index - 1
            starts_table = index + 1 < len(lines) and TABLE_SEPARATOR.match(lines[index + 1])
            if after_blank and not starts_table and not TABLE_SEPARATOR.match(line):
                found.append(index + 1)
            last_row = index
        else:
            last_row = None
    return found


def check_tables(problems: list[str]) -> None:
    for path in sorted([ROOT / "README.md", *DOCS.rglob("*.md")]):
        for line in broken_tables(path.read_text()):
            problems.append(
                f"{path.relative_to(ROOT)}:{line}: a table row after a blank line: the blank "
                "line ends the table above, so this row renders as text; remove the blank line"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print", action="store_true", help="Print the code's signatures.")
    args = parser.parse_args()
    setup_django()
    if args.print:
        for name, func in documented_callables().items():
            print(render(name, func))
        return 0
    reference = (DOCS / "reference.md").read_text()
    problems: list[str] = []
    check_signatures(reference, problems)
    check_settings_page((DOCS / "settings.md").read_text(), problems)
    check_names(reference, problems)
    check_tables(problems)
    if problems:
        print("The reference does not match the code:", file=sys.stderr)
        for problem in problems:
            print(f"- {problem}", file=sys.stderr)
        return 1
    print(
        f"reference.md and settings.md match the code ({len(documented_callables())} signatures, "
        f"{sum(map(len, command_options().values()))} command options)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

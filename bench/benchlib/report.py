"""Medians over the runs, the derived figures, and the table (Markdown)."""

from __future__ import annotations

import statistics
from typing import Any

from .spec import System

PEERS = ("tasksdb", "procrastinate", "djangoq")
OTHER_DATABASES = ("cronqueue_sqlite", "cronqueue_mariadb")
HOME = "cronqueue"

# (figure, row label, format). Every system names its default drain "default", hence
# "drain_default"; drain_best, drain_two and drain_scaling are derived from the medians.
ROWS = [
    ("enqueue_single", "enqueue: single calls, autocommit (jobs/s)", "rate"),
    ("enqueue_transaction", "enqueue: in one transaction (jobs/s)", "rate"),
    ("enqueue_bulk", "enqueue: bulk API (jobs/s)", "rate"),
    ("enqueue_dedupe", "enqueue: single, with dedupe key (jobs/s)", "rate"),
    ("enqueue_single_persistent", "enqueue: single, CONN_MAX_AGE=None (jobs/s)", "rate"),
    ("drain_default", "drain: 1 process, defaults (jobs/s)", "rate"),
    ("drain_best", "drain: 1 process, best setting (jobs/s)", "rate"),
    ("drain_best_setting", "  best 1-process setting", "text"),
    ("drain_two", "drain: 2 processes (jobs/s)", "rate"),
    ("drain_two_setting", "  2-process setting", "text"),
    ("drain_scaling", "drain: 2 default processes / 1 default process", "ratio"),
    ("latency_p50_ms", "pickup latency p50 (ms, lower is better)", "ms"),
    ("latency_p95_ms", "pickup latency p95 (ms, lower is better)", "ms"),
    ("idle_rss_mb", "idle worker RSS (MB, lower is better)", "mb"),
    ("idle_pss_mb", "idle worker PSS (MB, shared pages split)", "mb"),
    ("idle_cpu_percent", "idle worker CPU (% of a core, lower is better)", "cpu"),
    ("flow_rate", "flow drain, 90% of due jobs over their limit: runnable jobs/s", "rate"),
    ("flow_statements_per_job", "  SQL statements per executed job", "per"),
    ("flow_round_trips_per_job", "  round trips per executed job (+ BEGIN/COMMIT)", "per"),
    ("plain_counted_rate", "plain drain of as many jobs, counted: jobs/s", "rate"),
    ("plain_counted_statements_per_job", "  SQL statements per executed job", "per"),
    ("plain_counted_round_trips_per_job", "  round trips per executed job (+ BEGIN/COMMIT)", "per"),
    ("group_rate", "group drain (jobs.group of no-op members, then a callback): jobs/s", "rate"),
    ("group_statements_per_job", "  SQL statements per executed job", "per"),
    ("group_plain_statements_per_job", "  the same, a plain drain of as many jobs", "per"),
    ("group_extra_statements_per_member", "  extra SQL statements per member", "per"),
    ("group_extra_round_trips_per_member", "  extra round trips per member", "per"),
]


def medians(rounds: list[dict[str, Any]], systems: list[System]) -> dict[str, dict[str, Any]]:
    """Median of every numeric figure over the runs, then the derived drain figures."""
    result: dict[str, dict[str, Any]] = {}
    for system in systems:
        values: dict[str, list[float]] = {}
        for one in rounds:
            for name, value in one.get(system.key, {}).get("figures", {}).items():
                if isinstance(value, (int, float)):
                    values.setdefault(name, []).append(value)
        figures: dict[str, Any] = {k: statistics.median(v) for k, v in values.items()}
        figures.update(derive(system, figures))
        result[system.key] = figures
    if any("ceiling" in one for one in rounds):
        ceiling: dict[str, list[float]] = {}
        for one in rounds:
            for name, value in one.get("ceiling", {}).get("figures", {}).items():
                ceiling.setdefault(name, []).append(value)
        result["ceiling"] = {k: statistics.median(v) for k, v in ceiling.items()}
    return result


def derive(system: System, figures: dict[str, Any]) -> dict[str, Any]:
    """Best one-process and two-process drains (best of the medians of each setting)."""
    derived: dict[str, Any] = {}
    for role, name in ((("default", "one"), "drain_best"), (("two",), "drain_two")):
        candidates = [
            (figures[f"drain_{d.key}"], d.label)
            for d in system.drains
            if d.role in role and f"drain_{d.key}" in figures
        ]
        if candidates:
            best, label = max(candidates)
            derived[name], derived[f"{name}_setting"] = best, label
    if figures.get("drain_default") and figures.get("drain_2proc"):
        derived["drain_scaling"] = figures["drain_2proc"] / figures["drain_default"]
    return derived


def fmt(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "text":
        return str(value)
    if unit == "rate":
        return f"{value:,.0f}"
    if unit == "ratio":  # two decimals, or two significant digits below 0.1
        return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"
    if unit in ("ms", "mb"):
        return f"{value:,.1f}"
    if unit in ("cpu", "per"):
        return f"{value:.2f}"
    return str(value)


def table(result: dict[str, dict[str, Any]], systems: list[System]) -> str:
    keys = [s.key for s in systems]
    labels = {s.key: s.label for s in systems}
    columns = [k for k in (HOME, *PEERS, *OTHER_DATABASES) if k in keys]
    peers = [k for k in PEERS if k in keys] if HOME in keys else []
    header = ["figure", *(labels[k] for k in columns), *(f"cq / {labels[k]}" for k in peers)]
    lines = [_row(header), _row(["---"] + ["---:"] * (len(header) - 1))]
    for figure, label, unit in ROWS:
        cells = [fmt(result.get(k, {}).get(figure), unit) for k in columns]
        if all(c == "-" for c in cells):
            continue
        ratios = []
        for peer in peers:
            ours, theirs = result[HOME].get(figure), result.get(peer, {}).get(figure)
            ratio = ours / theirs if unit != "text" and ours and theirs else None
            ratios.append(fmt(ratio, "ratio"))
        lines.append(_row([label, *cells, *ratios]))
    ceiling = result.get("ceiling")
    if ceiling:
        lines += ["", _row(["PostgreSQL ceiling (pgbench, 1 client)", "jobs/s",
                            "cq drain 1 process best / ceiling", "cq drain 2 processes / ceiling"]),
                  _row(["---", "---:", "---:", "---:"])]  # fmt: skip
        home = result.get(HOME, {})
        for figure, label in (("ceiling_one", "1 job per transaction"),
                              ("ceiling_batch", "50 jobs per statement")):  # fmt: skip
            value = ceiling.get(figure)
            one, two = home.get("drain_best"), home.get("drain_two")
            lines.append(_row([
                label, fmt(value, "rate"),
                f"{one / value:.0%}" if one and value else "-",
                f"{two / value:.0%}" if two and value else "-",
            ]))  # fmt: skip
    return "\n".join(lines)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"

"""Security: nothing from a row is imported or executed, SQL takes values only as
parameters, and payloads and error messages stay out of logs above DEBUG.

The admin's permission and escaping matrix is proven in tests/admin/test_permissions.py
and tests/admin/test_escaping.py.
"""

from __future__ import annotations

import ast
import datetime as dt
import logging
import re
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

import django_cronqueue
from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.models import Job
from tests.factories import JobFactory
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import log_records

PACKAGE = Path(django_cronqueue.__file__).resolve().parent


def sources(*patterns: str) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        found.extend(sorted(PACKAGE.glob(pattern)))
    return [path for path in found if "migrations" not in path.parts]


def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def enclosing_function(node: ast.AST, parent_of: dict[ast.AST, ast.AST]) -> str:
    while node in parent_of:
        node = parent_of[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node.name
    return "<module>"


def called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


# --- nothing from a row is imported or executed ---------------------------------------

FORBIDDEN_MODULES = {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle",
                     "runpy", "imp", "code", "codeop"}  # fmt: skip
FORBIDDEN_CALLS = {"eval", "exec", "__import__"}
IMPORTERS = {"import_module", "import_string", "locate"}
# Where the package imports by name, and why that name never comes from a row.
ALLOWED_IMPORTS = {
    # the claiming module of the connection's vendor: a value of a constant dict
    ("claiming/__init__.py", "import_module"),
    # settings.TASKS[alias]["BACKEND"]: configuration, like any Django backend path
    ("backend.py", "import_string"),
}


# The process pool's child checks that its own handler's return value and exception can
# cross the pipe to its parent (multiprocessing pickles them both ways): it pickles objects
# it made itself and unpickles only its own pickles. Nothing read from a row is unpickled:
# the parent pickles the claimed rows' decoded JSON (dicts, lists, strings) for its child.
ALLOWED_PICKLE = {("worker/child.py", "pickle")}


def test_the_package_never_imports_evaluates_or_unpickles_what_it_reads():
    violations, importers = [], set()
    for path in sources("**/*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(), filename=relative)
        parent_of = parents(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                modules = []
            for module in modules:
                root = module.split(".")[0]
                if root in FORBIDDEN_MODULES and (relative, root) not in ALLOWED_PICKLE:
                    violations.append(f"{relative}:{node.lineno} imports {module}")
                if root == "importlib" and relative != "claiming/__init__.py":
                    violations.append(f"{relative}:{node.lineno} imports {module}")
            if isinstance(node, ast.Call):
                name = called_name(node)
                if isinstance(node.func, ast.Name) and name in FORBIDDEN_CALLS | {"compile"}:
                    violations.append(f"{relative}:{node.lineno} calls {name}()")
                if name in IMPORTERS:
                    importers.add((relative, name))
                    where = (relative, enclosing_function(node, parent_of))
                    if where == ("backend.py", "configured_aliases"):
                        continue
                    argument = ast.unparse(node.args[0]) if node.args else ""
                    if argument != "f'{__name__}.{module_name}'":
                        violations.append(f"{relative}:{node.lineno} imports {argument}")
    assert violations == []
    assert importers == ALLOWED_IMPORTS
    claiming = (PACKAGE / "claiming" / "__init__.py").read_text()
    assert "module_name = _VENDOR_MODULES.get(connection.vendor)" in claiming


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_rows_naming_code_that_is_not_a_job_are_never_run(runjobs, tmp_path):
    marker = tmp_path / "pwned"
    rows = [
        JobFactory(name="os.system", payload={"command": f"touch {marker}"}),
        JobFactory(name="builtins.eval", payload={"source": f"open({str(marker)!r}, 'w')"}),
        JobFactory(name="builtins.exec", payload={"source": f"open({str(marker)!r}, 'w')"}),
        JobFactory(name="subprocess.call", payload={"args": ["touch", str(marker)]}),
        # the dotted path of a real job function is not its name ("testapp.record")
        JobFactory(name="tests.testapp.jobs.record", payload={"key": "by-dotted-path"}),
        JobFactory(name="django_cronqueue.lifecycle.prune", payload={}),
        JobFactory(name="REL.TRACKED", payload={"key": "by-case"}),
        JobFactory(name="rel.tracked ", payload={"key": "by-trailing-space"}),
    ]
    worker = runjobs.start("--burst")
    assert worker.wait(60) == 0, runjobs.log(worker)
    assert not marker.exists()
    assert not SideEffect.objects.exists()
    for row in rows:
        row.refresh_from_db()
        assert (row.status, row.attempts, row.worker_id) == ("pending", 0, ""), row.name


# --- raw SQL takes values only as parameters ------------------------------------------

SQL_WORDS = re.compile(r"\b(SELECT|UPDATE|INSERT|DELETE|WHERE|NOTIFY|LISTEN|FROM|SET)\b")
# What may be spliced into SQL text: table and column names from the models, fixed
# clauses and lock suffixes, and "%s, %s, ..." placeholder lists. Each name below was
# checked by hand to hold only such text.
# Module constants (ALL_CAPS: TABLE, ORDER, ROW_LOCK, NOTIFY_CHANNEL ...) are fixed text.
SAFE_NAMES = {
    "where",  # due_filter(): columns and placeholders
    "row_lock", "lock_suffix", "name_lock",  # " FOR UPDATE [SKIP LOCKED]" or ""
    "returning",  # enqueue: "id[, pg_notify(%s, '')]"
    "payload_placeholder",  # enqueue: "%s" or "%s::jsonb"
    "padding",  # claiming/postgresql.py: "NULL, NULL, ..."
    "sql", "alias", "col", "table",  # dashboard: compiled ORM SQL and quoted names
    "which",  # archive: ENDED or SUCCEEDED_ON_DAY (asserted there)
    "definition",  # archive: an index's columns, from its INDEXES constant
    "probes",  # claiming/fair.py: _probe()s, joined by ", "
    "sources_sql",  # admin/payload_search.py: json_each() of compiled columns, fixed aliases
}  # fmt: skip
# limit_clause(): "LIMIT " and an int() of the claim's size.
# job_rows(): the job table's name, after "ONLY" on PostgreSQL.
# limit_of(): "LIMIT " and an int() of its argument.
SAFE_CALLS = {
    "placeholders", "claim_set_clause", "limit_clause", "limit_of", "quote_name", "quote",
    "job_rows", "running_by_id",
    "by_id",  # claiming/erasing.py: "CASE id " and a fixed WHEN clause repeated
    "_probe",  # claiming/fair.py: fixed text around a where (due_filter) and job_rows()
}  # fmt: skip


def splice_is_safe(value: ast.expr) -> bool:
    if isinstance(value, ast.Name):
        return value.id in SAFE_NAMES or re.fullmatch(r"[A-Z][A-Z0-9_]*", value.id) is not None
    if isinstance(value, ast.IfExp):  # a choice between two safe splices
        return splice_is_safe(value.body) and splice_is_safe(value.orelse)
    if isinstance(value, ast.Attribute):
        # Model._meta.db_table, or a member of the JobStatus enum (fixed words)
        is_status = isinstance(value.value, ast.Name) and value.value.id == "JobStatus"
        return value.attr == "db_table" or is_status
    if isinstance(value, ast.Call):
        name = called_name(value)
        if name == "join":
            return len(value.args) == 1 and joined_parts_are_safe(value.args[0])
        return name in SAFE_CALLS
    return False


def joined_parts_are_safe(parts: ast.expr) -> bool:
    """What ``", ".join(...)`` may join into SQL text: fixed text repeated (``["%s"] * n``,
    where ``n`` only counts) or items that are each a safe splice (``quote_name(c) for c
    in ...``). Joining anything else (``", ".join(names)``) splices values."""
    if isinstance(parts, ast.BinOp) and isinstance(parts.op, ast.Mult):
        return any(
            isinstance(side, ast.List | ast.Tuple) and joined_parts_are_safe(side)
            for side in (parts.left, parts.right)
        )
    if isinstance(parts, ast.List | ast.Tuple):
        return all(is_fixed_or_safe(item) for item in parts.elts)
    if isinstance(parts, ast.GeneratorExp | ast.ListComp):
        return is_fixed_or_safe(parts.elt)
    return False


def is_fixed_or_safe(value: ast.expr) -> bool:
    return (isinstance(value, ast.Constant) and isinstance(value.value, str)) or splice_is_safe(
        value
    )


def test_raw_sql_splices_no_values_into_its_text():
    files = sources("**/*.py")
    unsafe, executes = [], 0
    for path in files:
        relative = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(), filename=relative)
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = "".join(part.value for part in node.values if isinstance(part, ast.Constant))
                if not SQL_WORDS.search(text):
                    continue
                for part in node.values:
                    if isinstance(part, ast.FormattedValue) and not splice_is_safe(part.value):
                        unsafe.append(f"{relative}:{node.lineno} {ast.unparse(part.value)}")
            if isinstance(node, ast.Call) and called_name(node) == "execute":
                executes += 1
                sql = node.args[0] if node.args else None
                constant = isinstance(sql, ast.Constant) or (
                    isinstance(sql, ast.JoinedStr)
                    and all(
                        isinstance(part, ast.Constant) or splice_is_safe(part.value)
                        for part in sql.values
                    )
                )
                if len(node.args) < 2 and not constant:
                    unsafe.append(f"{relative}:{node.lineno} execute() without parameters")
    assert unsafe == []
    assert executes >= 10  # the scan saw the raw SQL


def drain() -> None:
    for _ in range(10):
        if not jobs.tick().claimed:
            return


@pytest.mark.django_db(transaction=True)
def test_hostile_values_reach_the_database_only_as_parameters():
    """Every user-controlled value (name, payload, dedupe key, queue, result, error,
    cancel reason) goes through enqueue, claim (capped and not), completion, retry,
    failure, lease recovery and the operator actions: the SQL text never contains it."""
    injection = rel.INJECTION
    statements: list[str] = []

    def capture(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        ok = jobs.enqueue(rel.INJECTED_NAME, {"text": injection}, dedupe_key=injection)
        again = jobs.enqueue(rel.INJECTED_NAME, {"text": injection}, dedupe_key=injection)
        failing = jobs.enqueue(rel.INJECTED_NAME, {"text": injection, "fail": True})
        queued = jobs.enqueue(rel.tracked, {"key": injection[:60]}, queue=injection)
        jobs.enqueue_many(rel.INJECTED_NAME, [{"text": injection}])
        drain()  # the injected name has concurrency=1: one run per tick
        jobs.tick(queues=[injection])
        failing.refresh_from_db()
        assert failing.status == "failed"
        assert failing.retry()
        drain()
        lost = jobs.enqueue(rel.INJECTED_NAME, {"text": injection})
        now = timezone.now()
        claim_due(now, queues=None, limit=10, worker_id=injection[:90])
        maintenance.recover_expired_leases(now + dt.timedelta(hours=1))
        later = jobs.enqueue(rel.INJECTED_NAME, {"text": injection}, delay=3600)
        assert later.run_now()
        assert later.cancel(reason=injection)

    assert again.pk == ok.pk
    assert len(statements) > 20
    leaked = [sql for sql in statements if "DROP TABLE" in sql]
    assert leaked == []
    ok.refresh_from_db()
    assert (ok.status, ok.payload, ok.result, ok.dedupe_key) == (
        "succeeded",
        {"text": injection},
        injection,
        injection,
    )
    failing.refresh_from_db()
    assert failing.last_error == f"ValueError: {injection}"
    assert Job.objects.get(pk=queued.pk).status == "succeeded"
    assert "lease lost" in Job.objects.get(pk=lost.pk).last_error
    assert Job.objects.get(pk=later.pk).last_error == injection


# --- no payloads or errors in logs above DEBUG ----------------------------------------

SECRETS = {"card_number": "4111-1111-1111-1111", "api_token": "sk_live_SECRET_TOKEN_42"}


def assert_secret_free(records: list[tuple[str, str]]) -> None:
    for level, text in records:
        if level in ("DEBUG", "STDOUT"):
            continue
        for secret in SECRETS.values():
            assert secret not in text, (level, text)


@pytest.mark.django_db(transaction=True)
def test_a_failing_jobs_payload_and_message_stay_out_of_logs_above_debug(caplog):
    caplog.set_level(logging.DEBUG)
    job = jobs.enqueue(rel.charge_card, SECRETS)  # retries=1: two attempts
    now = timezone.now()
    jobs.tick(now=now)  # fails, retrying
    jobs.tick(now=now)  # fails for good
    lost = jobs.enqueue(rel.charge_card, SECRETS)
    now = timezone.now()
    claim_due(now, queues=None, limit=10, worker_id="w")
    maintenance.recover_expired_leases(now + dt.timedelta(hours=1))
    job.refresh_from_db()
    assert job.status == "failed"
    assert SECRETS["card_number"] in job.last_error  # the row keeps the error: it is data
    assert Job.objects.get(pk=lost.pk).last_error.startswith("LeaseLost")
    records = [
        (record.levelname, record.getMessage() + (record.exc_text or ""))
        for record in caplog.records
    ]
    assert any("charge_card" in text for level, text in records if level != "DEBUG")
    assert_secret_free(records)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_real_workers_log_keeps_payloads_and_messages_out_above_debug(runjobs):
    jobs.enqueue(rel.charge_card, SECRETS)
    worker = runjobs.start("--burst", env={"CRONQUEUE_TEST_LOG_LEVEL": "DEBUG"})
    assert worker.wait(60) == 0, runjobs.log(worker)
    records = log_records(runjobs.log(worker))
    assert any(level == "DEBUG" for level, _ in records)  # DEBUG was on
    failed = [text for level, text in records if level == "ERROR" and "charge_card" in text]
    assert failed, records
    assert_secret_free(records)


def test_the_sql_scan_flags_a_spliced_value():
    """The scan above is not vacuous: a value spliced into SQL text is caught."""
    bad = ast.parse("sql = f\"SELECT id FROM {TABLE} WHERE name = '{name}' LIMIT {limit}\"")
    joined = next(node for node in ast.walk(bad) if isinstance(node, ast.JoinedStr))
    spliced = [part.value for part in joined.values if isinstance(part, ast.FormattedValue)]
    assert [splice_is_safe(value) for value in spliced] == [True, False, False]


@pytest.mark.parametrize(
    ("splice", "safe"),
    [
        ("', '.join(['%s'] * len(values))", True),
        ("', '.join(['(%s)'] * len(names))", True),
        ("', '.join(quote_name(column) for column in COLUMNS)", True),
        ("', '.join(names)", False),
        ("', '.join([name] * 2)", False),
        ("', '.join(str(value) for value in values)", False),
        ("', '.join(f\"'{name}'\" for name in names)", False),
        ("', '.join(['%s', name])", False),
    ],
)
def test_the_sql_scan_accepts_a_join_only_of_fixed_text_or_safe_splices(splice, safe):
    call = ast.parse(splice, mode="eval").body
    assert splice_is_safe(call) is safe

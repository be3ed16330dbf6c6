#!/usr/bin/env bash
# Build the sdist and wheel, check them, and run the demo site from the wheel alone.
#
#   scripts/check_package.sh          (needs .venv with the "release" extra: build, twine)
#
# 1. python -m build, from a clean copy of the checkout (the files git tracks or does not
#    ignore: no build/ or egg-info left in the work tree can leak into the wheel);
# 2. twine check --strict on both files;
# 3. the wheel holds the templates, static files, py.typed, migrations and management
#    commands, and nothing else (no tests, no testproject);
# 4. a new virtualenv on the newest Python the package declares (3.13, so that plain pip
#    takes today's Django release) gets the wheel (and its dependencies from PyPI) and
#    nothing else;
# 5. a copy of testproject/ in another folder (testproject/manage.py puts its parent folder
#    on sys.path: there, that folder holds no django_cronqueue) runs check, migrate,
#    findstatic, a template lookup, an enqueue and runjobs --once, with the package
#    imported from the virtualenv's site-packages; then cronqueue_status --check, and the
#    admin's dashboard and MetricsView (with prometheus-client) as staff answer 200.
# DIST_DIR=path keeps the built files there (they go to a temporary folder otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronqueue-package.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DIST=${DIST_DIR:-$WORK/dist}
mkdir -p "$DIST"
step() { printf '\n== %s\n' "$*"; }

step "clean copy of the checkout"
"$PYTHON" - "$WORK/src" <<'EOF'
import os, shutil, subprocess, sys
from pathlib import Path
target = Path(sys.argv[1])
listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        check=True, stdout=subprocess.PIPE).stdout.split(b"\0")
count = 0
for raw in filter(None, listed):
    source = Path(os.fsdecode(raw))
    if source.is_file():
        (target / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / source)
        count += 1
print(f"{count} files in {target}")
EOF

step "python -m build"
rm -f "$DIST"/django_cronqueue-*
"$PYTHON" -m build --outdir "$DIST" "$WORK/src" 2>&1 | tail -n 3
ls -l "$DIST"
WHEEL=$(ls "$DIST"/django_cronqueue-*.whl)
SDIST=$(ls "$DIST"/django_cronqueue-*.tar.gz)

step "twine check --strict"
"$PYTHON" -m twine check --strict "$WHEEL" "$SDIST"

step "the wheel's contents"
"$PYTHON" - "$WHEEL" "$SDIST" <<'EOF'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
required = [
    "django_cronqueue/py.typed",
    "django_cronqueue/migrations/0001_initial.py",
    "django_cronqueue/management/commands/runjobs.py",
    "django_cronqueue/management/commands/cronqueue_worker.py",
    "django_cronqueue/management/worker_command.py",
    "django_cronqueue/management/commands/cronqueue_status.py",
    "django_cronqueue/management/commands/cronqueue_schedules.py",
    "django_cronqueue/static/django_cronqueue/admin.css",
    "django_cronqueue/templates/django_cronqueue/admin/job_change_list.html",
    "django_cronqueue/templates/django_cronqueue/admin/dashboard.html",
    "django_cronqueue/templates/admin/django_cronqueue/app_index.html",
    "django_cronqueue/claiming/postgresql.py",
]
missing = [name for name in required if name not in names]
stray = [n for n in names if not n.startswith(("django_cronqueue/", "django_cronqueue-"))]
stray += [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
plugin = "cronqueue = django_cronqueue.pytest_plugin" in zipfile.ZipFile(wheel).read(entry_points).decode()
sdist_names = tarfile.open(sdist).getnames()
sdist_missing = [f for f in ("LICENSE", "README.md", "pyproject.toml") if not any(n.endswith("/" + f) for n in sdist_names)]
print(f"{len(names)} files in the wheel; {len(sdist_names)} in the sdist")
problems = []
if missing: problems.append(f"the wheel lacks {missing}")
if stray: problems.append(f"the wheel has files outside the package: {stray}")
if not plugin: problems.append("the wheel lacks the pytest11 entry point")
if sdist_missing: problems.append(f"the sdist lacks {sdist_missing}")
if problems:
    sys.exit("\n".join(problems))
print("templates, static, py.typed, migrations, commands and the pytest plugin are in")
EOF

step "a new virtualenv with the wheel only (the newest declared Python: today's Django)"
NEWEST=3.13
VENV_PYTHON=""
for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$NEWEST.*/bin/python$NEWEST \
  /usr/local/bin/python$NEWEST /usr/bin/python$NEWEST; do
  [ -x "$candidate" ] && { VENV_PYTHON=$candidate; break; }
done
[ -n "$VENV_PYTHON" ] || { echo "no Python $NEWEST found" >&2; exit 1; }
"$VENV_PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --disable-pip-version-check "$WHEEL" 2>&1 | grep -v "^WARNING: Location" || true
"$VPY" -m pip check --disable-pip-version-check
"$VPY" -m pip list --disable-pip-version-check --format=freeze | grep -i -E "^(django|django-cronqueue|croniter|cron[-_]descriptor)=="

step "the demo site, run from the wheel"
mkdir "$WORK/site"
cp -r testproject "$WORK/site/testproject"
rm -f "$WORK/site/testproject"/db.sqlite3*
find "$WORK/site" -name __pycache__ -prune -exec rm -rf {} +
cd "$WORK/site"
manage() { env -u PYTHONPATH -u DJANGO_SETTINGS_MODULE -u DATABASE_URL "$VPY" testproject/manage.py "$@"; }
manage shell -c "
import django_cronqueue, sysconfig
where = django_cronqueue.__file__
assert where.startswith(sysconfig.get_paths()['purelib']), where
print('django_cronqueue imported from', where)
"
manage check
manage migrate --noinput -v 0
manage findstatic django_cronqueue/admin.css
manage shell -c "
from django.template.loader import get_template
get_template('django_cronqueue/admin/dashboard.html')
from shop.jobs import send_receipt
from shop.models import Order
send_receipt.enqueue(order_id=Order.objects.create(email='wheel@example.com').pk)
print('templates found; one job enqueued')
"
manage runjobs --once
manage shell -c "
from django_cronqueue.models import Job
job = Job.objects.get(name='shop.send_receipt')
assert job.status == 'succeeded', (job.status, job.last_error)
print('runjobs --once ran it:', job)
"
"$VPY" -m pip install -q --disable-pip-version-check prometheus-client 2>&1 | grep -v "^WARNING: Location" || true
manage cronqueue_status --check --min-workers 0
manage shell -c "
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
client = Client()
client.force_login(User.objects.create_superuser('wheel', 'wheel@example.com', 'x'))
for url in (reverse('admin:django_cronqueue_job_dashboard'), reverse('metrics')):
    response = client.get(url, HTTP_HOST='localhost')
    assert response.status_code == 200, (url, response.status_code, response.content[:500])
    print(url, response.status_code)
"
printf '\nThe package builds, passes twine check --strict, and runs the demo site from the wheel.\n'

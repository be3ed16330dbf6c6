# Shared by scripts/demo and scripts/test: make .venv with the package installed.
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

ensure_venv() {  # $1: extras, e.g. "[dev,postgres,mysql]" or ""
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  "$VENV/bin/python" -m pip install -q -e ".$1" 2>&1 | grep -v -e '^WARNING: Location' -e '^$' || true
}

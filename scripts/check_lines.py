"""Fail when the Python and Django lines the package declares are not the ones CI runs.

    python scripts/check_lines.py sqlite:3.13:6.1 postgres:3.10:5.2 mariadb:3.12:6.0

Each argument is one suite of ``.ci/run`` (database, Python, Django). Checked:

- every ``Framework :: Django :: X`` classifier has a suite on Django X, and every suite's
  Django line is a classifier;
- the oldest and the newest ``Programming Language :: Python :: 3.N`` classifier each have
  a suite, no suite runs an undeclared Python, and ``requires-python`` starts at the oldest;
- README.md and docs/index.md name exactly those lines (the sentence "Python 3.10 to 3.13,
  Django 5.2 LTS, 6.0 and 6.1").
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
STATED_IN = ("README.md", "docs/index.md")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def classified(classifiers: list[str], prefix: str) -> list[str]:
    found = [c.removeprefix(prefix) for c in classifiers if c.startswith(prefix)]
    return sorted((v for v in found if re.fullmatch(r"\d+\.\d+", v)), key=version_key)


def statement(pythons: list[str], djangos: list[str]) -> str:
    """The sentence README.md and docs/index.md carry, from the declared lines."""
    named = [f"{djangos[0]} LTS", *djangos[1:]]
    djangos_text = ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]
    return f"Python {pythons[0]} to {pythons[-1]}, Django {djangos_text}"


def problems(suites: list[tuple[str, str, str]]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    classifiers = project["classifiers"]
    pythons = classified(classifiers, "Programming Language :: Python :: ")
    djangos = classified(classifiers, "Framework :: Django :: ")
    run_pythons = {python for _, python, _ in suites}
    run_djangos = {django for _, _, django in suites}
    found = []
    if missing := [d for d in djangos if d not in run_djangos]:
        found.append(f"declared but run by no suite: Django {', '.join(missing)}")
    if extra := sorted(run_djangos - set(djangos), key=version_key):
        found.append(f"run but not declared (classifiers): Django {', '.join(extra)}")
    for python in (pythons[0], pythons[-1]):
        if python not in run_pythons:
            found.append(f"Python {python} (the oldest or newest declared) is run by no suite")
    if extra := sorted(run_pythons - set(pythons), key=version_key):
        found.append(f"run but not declared (classifiers): Python {', '.join(extra)}")
    if project["requires-python"] != f">={pythons[0]}":
        found.append(
            f"requires-python is {project['requires-python']!r}, "
            f"not '>={pythons[0]}' (the oldest Python classifier)"
        )
    sentence = statement(pythons, djangos)
    for name in STATED_IN:
        if sentence not in (ROOT / name).read_text():
            found.append(f"{name} does not say {sentence!r}")
    return found


def main(arguments: list[str]) -> int:
    suites = []
    for argument in arguments:
        database, python, django = argument.split(":")
        suites.append((database, python, django))
    if not suites:
        print(__doc__, file=sys.stderr)
        return 2
    found = problems(suites)
    for problem in found:
        print(f"check_lines: {problem}", file=sys.stderr)
    if not found:
        lines = ", ".join(f"{d} on Python {p} / Django {j}" for d, p, j in suites)
        print(f"The declared lines are the ones CI runs: {lines}.")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

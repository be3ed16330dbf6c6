"""Shared code of the benchmark harness (``python bench/run.py``)."""

from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
VENV_DIR = BENCH_DIR / ".venv-peers"

"""scripts/check_reference.py's table check: a table broken in two by a blank line."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_reference.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


broken_tables = load_script().broken_tables


def test_a_row_after_a_blank_line_inside_a_table_is_found() -> None:
    text = "intro\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n| 5 | 6 |\n"
    assert broken_tables(text) == [7]


def test_two_tables_separated_by_a_blank_line_are_not_broken() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| c | d |\n| --- | :---: |\n| 3 | 4 |\n"
    assert broken_tables(text) == []


def test_a_table_after_a_paragraph_is_not_broken() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\nSome text.\n\n| 3 | 4 |\n"
    assert broken_tables(text) == []


def test_pipes_in_fenced_blocks_are_ignored() -> None:
    text = "| a |\n|---|\n| 1 |\n\n```text\n| not a table |\n\n| still not |\n```\n"
    assert broken_tables(text) == []


def test_the_docs_have_no_broken_table() -> None:
    root = SCRIPT.parent.parent
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    assert {str(page): broken_tables(page.read_text()) for page in pages} == {
        str(page): [] for page in pages
    }

"""Bounded, readable, storable error text for ``last_error`` and ``traceback``, and the
class path recorded with them in ``exception_class_path``."""

from __future__ import annotations

import traceback as traceback_module

MAX_ERROR_CHARS = 2_000
MAX_TRACEBACK_CHARS = 64_000
MAX_CLASS_PATH_CHARS = 255  # Job.exception_class_path


def clean_text(text: str, limit: int) -> str:
    """Escape NUL (PostgreSQL rejects it in text) and lone surrogates (not UTF-8: no
    database driver can send them), and keep the head and tail within ``limit``."""
    text = escape_surrogates(text.replace("\x00", "\\x00"))
    if len(text) <= limit:
        return text
    marker = f"\n... [{len(text) - limit} characters cut] ...\n"
    head = (limit - len(marker)) // 3
    tail = limit - len(marker) - head
    return text[:head] + marker + text[-tail:]


def escape_surrogates(text: str) -> str:
    """``text`` with its lone surrogates escaped (``\\udcff``): what ``os.listdir()``
    gives for a file name that is not UTF-8, and what no database driver can send."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def ascii_text(text: str, limit: int) -> str:
    """``text`` with every non-ASCII character escaped (``\\xe9``, ``\\U0001f680``), within
    ``limit``: storable in a column of any character set."""
    return clean_text(text.encode("ascii", "backslashreplace").decode("ascii"), limit)


def class_path(exc: BaseException) -> str:
    """The dotted path of the class of ``exc`` (``builtins.ValueError``,
    ``shop.errors.Declined``), taken from the class itself, never from its text; "" when
    it does not fit the column or is not printable (a doctored ``__qualname__``)."""
    path = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return path if len(path) <= MAX_CLASS_PATH_CHARS and path.isprintable() else ""


def describe(exc: BaseException) -> str:
    """``ValueError: the message``, bounded."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not break the worker
        message = "<unprintable exception>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return clean_text(text, MAX_ERROR_CHARS)


def format_traceback(exc: BaseException) -> str:
    remote = getattr(exc, "remote_traceback", None)  # raised in a process-pool child
    if isinstance(remote, str):
        return clean_text(remote, MAX_TRACEBACK_CHARS)
    try:
        text = "".join(traceback_module.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        text = describe(exc)
    return clean_text(text, MAX_TRACEBACK_CHARS)

"""django_cronqueue.values.error_text: last_error and traceback are bounded, readable and
storable whatever the exception holds."""

from django_cronqueue.values.error_text import (
    MAX_CLASS_PATH_CHARS,
    MAX_ERROR_CHARS,
    MAX_TRACEBACK_CHARS,
    ascii_text,
    class_path,
    clean_text,
    describe,
    format_traceback,
)


def raised(exc):
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_clean_text_leaves_ordinary_text_alone():
    assert clean_text("ValueError: é 🎉", 100) == "ValueError: é 🎉"


def test_clean_text_escapes_nul_and_lone_surrogates():
    assert clean_text("a\x00b", 100) == "a\\x00b"
    cleaned = clean_text("bad \udc80 byte", 100)
    assert cleaned == "bad \\udc80 byte"
    cleaned.encode("utf-8")  # storable: valid UTF-8


def test_clean_text_keeps_the_head_and_the_tail_within_the_limit():
    text = "HEAD" + "m" * 10_000 + "TAIL"
    cleaned = clean_text(text, 500)
    assert len(cleaned) == 500
    assert cleaned.startswith("HEAD") and cleaned.endswith("TAIL")
    assert "[9508 characters cut]" in cleaned
    assert clean_text("x" * 500, 500) == "x" * 500  # at the limit: untouched


def test_describe_is_the_type_and_the_message():
    assert describe(ValueError("bad input")) == "ValueError: bad input"
    assert describe(KeyError("k")) == "KeyError: 'k'"
    assert describe(RuntimeError()) == "RuntimeError"
    assert describe(SystemExit(3)) == "SystemExit: 3"


def test_describe_survives_a_broken_str():
    class Nasty(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert describe(Nasty()) == "Nasty: <unprintable exception>"


def test_describe_is_bounded_and_storable():
    text = describe(ValueError("\x00" + "x" * 10 * MAX_ERROR_CHARS))
    assert len(text) == MAX_ERROR_CHARS
    assert text.startswith("ValueError: \\x00")
    assert "\x00" not in text


def test_format_traceback_shows_where_it_was_raised():
    text = format_traceback(raised(ValueError("deep down")))
    assert text.startswith("Traceback (most recent call last):")
    assert "in raised" in text
    assert text.rstrip().endswith("ValueError: deep down")


def test_format_traceback_is_bounded():
    text = format_traceback(raised(ValueError("y" * 2 * MAX_TRACEBACK_CHARS)))
    assert len(text) == MAX_TRACEBACK_CHARS
    assert text.startswith("Traceback")
    assert "characters cut" in text


def test_format_traceback_survives_a_broken_str():
    class Nasty(Exception):
        def __str__(self):
            raise RuntimeError("no")

    text = format_traceback(raised(Nasty()))
    assert "Nasty" in text


class Declined(Exception):
    pass


def test_class_path_is_the_class_raised_whatever_its_text_names():
    text = "bad\nos.path.ValueError: x\ntests.testapp.never_imported.TaskBoom: y"
    assert class_path(ValueError(text)) == "builtins.ValueError"
    assert class_path(Declined(text)) == f"{__name__}.Declined"
    assert class_path(SystemExit(3)) == "builtins.SystemExit"


def test_class_path_of_a_class_it_cannot_store_is_empty():
    long = type("L" * MAX_CLASS_PATH_CHARS, (Exception,), {})
    assert class_path(long()) == ""
    doctored = type("Doctored", (Exception,), {"__qualname__": "bad\x00name"})
    assert class_path(doctored()) == ""


def test_ascii_text_escapes_every_non_ascii_character_within_the_limit():
    assert ascii_text("ValueError: échec 🚀", 100) == "ValueError: \\xe9chec \\U0001f680"
    assert ascii_text("a\x00\udc80", 100) == "a\\x00\\udc80"
    escaped = ascii_text("🚀" * 1_000, 500)
    assert len(escaped) == 500 and escaped.isascii()

"""Sensitive arguments (SPEC section 16): the values encrypted, decrypted, erased and
encrypted again under the keys of ``CRONQUEUE["ENCRYPTION_KEYS"]``; the options that
declare them, checked at import."""

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.enqueueing.arguments import check_payload
from django_cronqueue.exceptions import DecryptionError, InvalidPayload
from django_cronqueue.integrations import encryption
from tests.sensitive_keys import KEY_A, KEY_B, KEY_C, SECRET


@pytest.fixture(autouse=True)
def _restore_registry():
    saved = dict(registry._definitions)
    yield
    registry._definitions.clear()
    registry._definitions.update(saved)


def keys(*values):
    return override_settings(CRONQUEUE={"ENCRYPTION_KEYS": list(values)})


def test_a_value_round_trips_and_its_token_holds_no_clear_text():
    with keys(KEY_A):
        stored = encryption.encrypt_value({"card": SECRET, "n": 3})
        assert list(stored) == ["$encrypted"]
        assert SECRET not in json.dumps(stored)
        assert encryption.decrypt_value(stored, "Job x #1") == {"card": SECRET, "n": 3}


def test_the_first_key_encrypts_and_every_key_decrypts():
    with keys(KEY_B):
        old = encryption.encrypt_value(SECRET)
    with keys(KEY_A, KEY_B):
        assert encryption.decrypt_value(old, "Job x #1") == SECRET
        new = encryption.encrypt_value(SECRET)
    with keys(KEY_A):
        assert encryption.decrypt_value(new, "Job x #1") == SECRET
        with pytest.raises(DecryptionError):
            encryption.decrypt_value(old, "Job x #1")


def test_a_value_no_key_decrypts_names_where_not_what():
    with keys(KEY_A):
        stored = encryption.encrypt_value(SECRET)
    with keys(KEY_C), pytest.raises(DecryptionError) as caught:
        encryption.decrypt_payload({"card_token": stored}, "Job shop.charge #7")
    text = str(caught.value)
    assert "Job shop.charge #7" in text and "'card_token'" in text
    assert SECRET not in text and stored["$encrypted"] not in text and KEY_C not in text


def test_reencrypting_moves_a_value_to_the_first_key():
    with keys(KEY_B):
        old = encryption.encrypt_value(SECRET)
    with keys(KEY_A, KEY_B):
        rotated = encryption.reencrypt_payload({"card": old, "order": 5}, "Job x #1")
    assert rotated["order"] == 5
    with keys(KEY_A):
        assert encryption.decrypt_value(rotated["card"], "Job x #1") == SECRET


def test_erasing_keeps_the_marker_without_the_token():
    with keys(KEY_A):
        payload = {"card": encryption.encrypt_value(SECRET), "order": 5}
    erased = encryption.erase_payload(payload)
    assert erased == {"card": {"$encrypted": None}, "order": 5}
    assert not encryption.holds_encrypted(erased)
    assert encryption.shown_payload(erased) == {"card": "[erased]", "order": 5}
    assert encryption.shown_payload(payload) == {"card": "[encrypted]", "order": 5}
    with keys(KEY_A), pytest.raises(DecryptionError, match="erased"):
        encryption.decrypt_payload(erased, "Job x #1")


def test_invalid_keys_are_named_by_position():
    assert encryption.invalid_key_positions([KEY_A, "short", KEY_B, ""]) == [1, 3]


def test_without_keys_nothing_is_encrypted():
    with keys(), pytest.raises(ImproperlyConfigured, match="ENCRYPTION_KEYS"):
        encryption.encrypt_value(SECRET)


def test_an_invalid_key_is_refused_by_position_without_printing_it():
    with keys(KEY_A, "not-a-SECRET-key"), pytest.raises(ImproperlyConfigured) as caught:
        encryption.encrypt_value(SECRET)
    assert "['ENCRYPTION_KEYS'][1]" in str(caught.value)
    assert "not-a-SECRET-key" not in str(caught.value)


def test_a_naive_datetime_warning_does_not_show_a_sensitive_value():
    import datetime as dt

    @jobs.job(name="unit_sensitive.when", sensitive=("secret_at",))
    def when(secret_at, public_at) -> None: ...

    secret_at, public_at = dt.datetime(2031, 2, 3, 4, 5), dt.datetime(2032, 1, 1, 0, 0)
    with keys(KEY_A), pytest.warns(RuntimeWarning) as warned:
        check_payload(when, {"secret_at": secret_at, "public_at": public_at})
    texts = sorted(str(w.message) for w in warned)
    assert len(texts) == 2
    assert "'public_at'" in texts[0] and str(public_at) in texts[0]
    assert "'secret_at'" in texts[1] and str(secret_at) not in texts[1]


# --- the options, checked at import --------------------------------------------------


def test_named_arguments_are_stored_encrypted_and_the_others_in_clear():
    @jobs.job(name="unit_sensitive.charge", sensitive=("card_token",))
    def charge(order_id: int, card_token: str) -> None: ...

    with keys(KEY_A):
        stored = check_payload(charge, {"order_id": 5, "card_token": SECRET})
        assert stored["order_id"] == 5
        assert encryption.is_encrypted(stored["card_token"])
        assert SECRET not in json.dumps(stored)
        assert encryption.decrypt_payload(stored, "x")["card_token"] == SECRET
        # Checked again (a workflow's signature, an edit), it is not encrypted twice.
        assert check_payload(charge, dict(stored)) == stored


def test_sensitive_true_encrypts_every_argument():
    @jobs.job(name="unit_sensitive.all", sensitive=True)
    def everything(email: str, amount: int) -> None: ...

    with keys(KEY_A):
        stored = check_payload(everything, {"email": SECRET, "amount": 12})
    assert all(encryption.is_encrypted(value) for value in stored.values())
    assert everything.sensitive_all and everything.sensitive


def test_a_job_without_the_option_is_not_sensitive():
    @jobs.job(name="unit_sensitive.none")
    def plain(email: str) -> None: ...

    assert not plain.sensitive
    assert "unit_sensitive.none" not in registry.sensitive_names


def test_a_bad_sensitive_value_is_refused_at_the_payload_check_without_quoting_it():
    @jobs.job(name="unit_sensitive.bad_value", sensitive=("card_token",))
    def charge(card_token) -> None: ...

    with keys(KEY_A), pytest.raises(InvalidPayload) as caught:
        check_payload(charge, {"card_token": {SECRET, "x"}})
    text = str(caught.value)
    assert "'card_token'" in text and "unit_sensitive.bad_value" in text
    assert SECRET not in text
    assert isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("card", "must be True or a tuple of argument names"),
        ((), "is empty"),
        (("missing",), "names 'missing', which is not a keyword argument"),
        ((3,), "must hold argument names"),
    ],
)
def test_bad_sensitive_options_are_refused_at_import(option, message):
    with pytest.raises(ImproperlyConfigured, match=message):

        @jobs.job(name="unit_sensitive.bad", sensitive=option)
        def charge(card: str) -> None: ...


@pytest.mark.parametrize("option", ["limit_by", "fair_by"])
def test_a_key_taken_from_a_sensitive_argument_is_refused_at_import(option):
    extra = {"concurrency": 1} if option == "limit_by" else {}
    with pytest.raises(ImproperlyConfigured) as caught:

        @jobs.job(name="unit_sensitive.keyed", sensitive=("email",), **{option: "email"}, **extra)
        def charge(order_id: int, email: str) -> None: ...

    text = str(caught.value)
    assert "'unit_sensitive.keyed'" in text and f"{option}='email'" in text
    assert "not sensitive" in text  # the fix


def test_any_key_of_a_wholly_sensitive_job_is_refused_at_import():
    with pytest.raises(ImproperlyConfigured, match="fair_by= is a callable"):

        @jobs.job(name="unit_sensitive.all_keyed", sensitive=True, fair_by=lambda p: "k")
        def charge(order_id: int) -> None: ...

    with pytest.raises(ImproperlyConfigured, match="limit_by='order_id'"):

        @jobs.job(
            name="unit_sensitive.all_keyed", sensitive=True, limit_by="order_id", concurrency=1
        )
        def charge2(order_id: int) -> None: ...


def test_a_key_from_another_argument_is_accepted():
    @jobs.job(name="unit_sensitive.other_key", sensitive=("email",), fair_by="account")
    def charge(account: str, email: str) -> None: ...

    assert charge.sensitive_keys == frozenset({"email"})


def test_a_cron_schedule_takes_no_sensitive_option():
    with pytest.raises(ImproperlyConfigured, match="sensitive= is not accepted"):

        @jobs.cron("* * * * *", name="unit_sensitive.cron", sensitive=True)
        def tick(run) -> None: ...

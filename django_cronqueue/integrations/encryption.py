"""Sensitive arguments (the optional extra ``[encryption]``): payload values stored
encrypted with Fernet from ``cryptography``, under ``CRONQUEUE["ENCRYPTION_KEYS"]``
(the first key encrypts, every key decrypts: ``MultiFernet``).

A stored value is an object ``{"$encrypted": "<token>"}`` in place of the clear value;
once its job succeeded or was cancelled the token is erased: ``{"$encrypted": null}``
(shown as ``[erased]``). Neither holds anything a search of values can match.

The only module that imports ``cryptography``, and only when a value is first encrypted
or decrypted: a site without sensitive jobs never loads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from ..conf import get_settings
from ..exceptions import DecryptionError

if TYPE_CHECKING:
    from cryptography.fernet import Fernet, MultiFernet

ENCRYPTED = "$encrypted"
ERASED_TEXT = "[erased]"
ENCRYPTED_TEXT = "[encrypted]"

# The configured keys, their MultiFernet and the first key's Fernet (which encrypts).
_fernet: tuple[tuple[str, ...], MultiFernet, Fernet] | None = None


def is_encrypted(value: Any) -> bool:
    """``value`` is a stored sensitive value: encrypted, or erased."""
    return isinstance(value, dict) and len(value) == 1 and ENCRYPTED in value


def is_erased(value: Any) -> bool:
    return is_encrypted(value) and value[ENCRYPTED] is None


def erased() -> dict[str, None]:
    """What an erased value is stored as."""
    return {ENCRYPTED: None}


def shown(value: Any) -> Any:
    """``value`` as a screen shows it: ``[encrypted]`` or ``[erased]`` in place of a
    stored sensitive value (the token is of no use to a reader)."""
    if is_encrypted(value):
        return ERASED_TEXT if value[ENCRYPTED] is None else ENCRYPTED_TEXT
    return value


def shown_payload(payload: Any) -> Any:
    """A payload as a screen shows it (``shown`` for each value)."""
    if not isinstance(payload, dict):
        return shown(payload)
    return {key: shown(value) for key, value in payload.items()}


def holds_encrypted(payload: Any) -> bool:
    """``payload`` (a dict) holds a value still encrypted (not erased)."""
    return isinstance(payload, dict) and any(
        is_encrypted(value) and not is_erased(value) for value in payload.values()
    )


def is_available() -> bool:
    """Whether ``cryptography`` can be imported."""
    try:
        import cryptography.fernet  # noqa: F401
    except ImportError:
        return False
    return True


def configured_keys() -> tuple[str, ...]:
    """``ENCRYPTION_KEYS`` as a tuple of strings (a bad value is refused by a check)."""
    keys = get_settings().ENCRYPTION_KEYS
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        return ()
    return tuple(key.decode() if isinstance(key, bytes) else str(key) for key in keys)


def invalid_key_positions(keys: Iterable[Any]) -> list[int]:
    """The positions (from 0) of the keys that are not valid Fernet keys; never their
    text. Needs ``cryptography``."""
    from cryptography.fernet import Fernet

    positions = []
    for position, key in enumerate(keys):
        try:
            Fernet(key)
        except (TypeError, ValueError):
            positions.append(position)
    return positions


def _multi_fernet() -> MultiFernet:
    """The MultiFernet of the configured keys (every one decrypts)."""
    return _fernets()[1]


def _fernets() -> tuple[tuple[str, ...], MultiFernet, Fernet]:
    """The configured keys, their MultiFernet and the first key's Fernet, made again
    when the keys change. A setting the checks refuse (E050 to E052) raises
    ImproperlyConfigured; a value no key decrypts is DecryptionError's."""
    global _fernet
    keys = configured_keys()
    if _fernet is not None and _fernet[0] == keys:
        return _fernet
    if not keys:
        raise ImproperlyConfigured(
            "CRONQUEUE['ENCRYPTION_KEYS'] is empty: sensitive arguments cannot be encrypted "
            "or decrypted. Add a key (cryptography.fernet.Fernet.generate_key().decode())."
        )
    try:
        from cryptography.fernet import Fernet, MultiFernet
    except ImportError:
        raise ImproperlyConfigured(
            "Sensitive arguments need the cryptography package: "
            "pip install 'django-cronqueue[encryption]'."
        ) from None
    fernets = []
    for position, key in enumerate(keys):
        try:
            fernets.append(Fernet(key))
        except (TypeError, ValueError):
            raise ImproperlyConfigured(
                f"CRONQUEUE['ENCRYPTION_KEYS'][{position}] is not a valid Fernet key "
                "(32 url-safe base64-encoded bytes)."
            ) from None
    _fernet = (keys, MultiFernet(fernets), fernets[0])
    return _fernet


def encrypt_value(value: Any) -> dict[str, str]:
    """``value`` (JSON) stored encrypted under the first key."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return {ENCRYPTED: _multi_fernet().encrypt(text.encode()).decode()}


def decrypt_value(stored: Mapping[str, Any], where: str) -> Any:
    """The clear value of ``stored`` (``{"$encrypted": token}``); raises DecryptionError
    naming ``where`` (the job and the key), never the value, when no key decrypts it or
    it was erased."""
    from cryptography.fernet import InvalidToken

    token = stored[ENCRYPTED]
    if token is None:
        raise DecryptionError(f"{where}: the value was erased (its job had ended).")
    fernet = _multi_fernet()
    try:
        text = fernet.decrypt(str(token).encode())
    except (InvalidToken, TypeError, ValueError):
        count = len(configured_keys())
        raise DecryptionError(
            f"{where}: no key of CRONQUEUE['ENCRYPTION_KEYS'] ({count} configured) decrypts "
            "its value; add the key it was encrypted with."
        ) from None
    return json.loads(text)


def reencrypt_value(stored: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """``stored`` encrypted again under the first key, or None when it is already (or
    erased); raises DecryptionError as ``decrypt_value`` does."""
    from cryptography.fernet import InvalidToken

    token = stored[ENCRYPTED]
    if token is None:
        return None
    _, fernet, first = _fernets()
    try:
        first.decrypt(str(token).encode())
        return None
    except (InvalidToken, TypeError, ValueError):
        pass
    try:
        return {ENCRYPTED: fernet.rotate(str(token).encode()).decode()}
    except (InvalidToken, TypeError, ValueError):
        raise DecryptionError(
            f"{where}: no key of CRONQUEUE['ENCRYPTION_KEYS'] decrypts its value."
        ) from None


def encrypt_payload(payload: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """``payload`` with the values of ``keys`` encrypted (those already stored
    encrypted kept as they are)."""
    sensitive = set(keys)
    return {
        key: value if key not in sensitive or is_encrypted(value) else encrypt_value(value)
        for key, value in payload.items()
    }


def decrypt_payload(payload: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``payload`` with every encrypted value decrypted."""
    return {
        key: decrypt_value(value, f"{where}, payload key {key!r}") if is_encrypted(value) else value
        for key, value in payload.items()
    }


def erase_payload(payload: Any) -> Any:
    """``payload`` with every encrypted value erased."""
    if not isinstance(payload, dict):
        return payload
    return {key: erased() if is_encrypted(value) else value for key, value in payload.items()}


def reencrypt_payload(payload: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """``payload`` with every value encrypted under an older key encrypted again under
    the first, or None when none is."""
    rotated = {}
    for key, value in payload.items():
        if is_encrypted(value):
            again = reencrypt_value(value, f"{where}, payload key {key!r}")
            if again is not None:
                rotated[key] = again
    return {**payload, **rotated} if rotated else None

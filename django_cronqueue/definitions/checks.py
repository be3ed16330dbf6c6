"""System checks of the jobs' definitions against the setting: sensitive arguments
(``@jobs.job(sensitive=...)``) need ``cryptography`` and valid ``ENCRYPTION_KEYS``.

Every id is stable and documented in docs/settings.md. A key is named by its position
in the list, never printed.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

from ..conf import user_settings
from ..integrations import encryption
from .registry import registry

CHECK_ID = "django_cronqueue.{}"
KEYS = "CRONQUEUE['ENCRYPTION_KEYS']"
NEW_KEY = "cryptography.fernet.Fernet.generate_key().decode()"


@register(Tags.compatibility)
def check_encryption(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    sensitive = sorted(registry.sensitive_names)
    raw = user_settings().get("ENCRYPTION_KEYS")
    if not sensitive and not raw:
        return []
    if not encryption.is_available():
        return [
            Error(
                f"{_jobs(sensitive) if sensitive else KEYS + ' is set'}, but the cryptography "
                "package is not installed.",
                hint="pip install 'django-cronqueue[encryption]'.",
                id=CHECK_ID.format("E052"),
            )
        ]
    messages = _key_problems(raw)
    if sensitive and not raw:
        messages.append(
            Error(
                f"{_jobs(sensitive)}, but {KEYS} is not set: their arguments cannot be encrypted.",
                hint=f"Set {KEYS} to a list of Fernet keys, the first from {NEW_KEY}; "
                "keep them out of the code (an environment variable).",
                id=CHECK_ID.format("E050"),
            )
        )
    return messages


def _jobs(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    if len(names) == 1:
        return f"Job {shown} declares sensitive= arguments"
    return f"Jobs {shown}{more} declare sensitive= arguments"


def _key_problems(raw: Any) -> list[CheckMessage]:
    if raw is None:
        return []
    if isinstance(raw, (str, bytes)) or not isinstance(raw, (list, tuple)):
        return [
            Error(
                f"{KEYS} must be a list of Fernet keys (the first encrypts, every one "
                f"decrypts), got a {type(raw).__name__}.",
                hint=f'Write {KEYS} = [env("CQ_KEY")], not a single string.',
                id=CHECK_ID.format("E051"),
            )
        ]
    return [
        Error(
            f"{KEYS}[{position}] is not a valid Fernet key (32 url-safe base64-encoded "
            "bytes); its value is not shown.",
            hint=f"Replace it with a key made by {NEW_KEY}.",
            id=CHECK_ID.format("E051"),
        )
        for position in encryption.invalid_key_positions(raw)
    ]

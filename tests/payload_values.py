"""Values a job's payload may hold, for the round-trip tests (hypothesis strategies):
JSON whose keys often look like tags, and what a round trip keeps of an aware datetime."""

import datetime as dt
import uuid

from hypothesis import strategies as st


def at_fixed_offsets(value):
    """``value`` with each aware datetime at its own UTC offset instead of its zone: what
    a round trip keeps (the instant and the offset). Python never finds a zone's datetime
    in a repeated or skipped hour equal to one of another zone (PEP 495), even at the
    same instant, so the zone itself cannot be compared."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.replace(tzinfo=dt.timezone(value.utcoffset()))
    if isinstance(value, list):
        return [at_fixed_offsets(item) for item in value]
    if isinstance(value, dict):
        return {key: at_fixed_offsets(item) for key, item in value.items()}
    return value


JSON_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"))
TAG_LIKE_KEYS = st.sampled_from(
    ["$date", "$datetime", "$time", "$timedelta", "$decimal", "$uuid", "$", "$$date", "$gt"]
)
TAG_LIKE_TEXT = st.sampled_from(
    ["2026-01-01", "2026-01-01T00:00:00Z", "12:00", "P1D", "12.50", str(uuid.UUID(int=7))]
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | JSON_TEXT
    | TAG_LIKE_TEXT,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(JSON_TEXT | TAG_LIKE_KEYS, children, max_size=4)
        | st.dictionaries(TAG_LIKE_KEYS, children, min_size=1, max_size=1)
    ),
    max_leaves=12,
)

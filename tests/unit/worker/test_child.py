"""What a process-pool child sends back for a return value that cannot cross to its
parent (the multi-process behaviour: reliability/test_process_pool_faults.py)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from django_cronqueue.worker.child import UnsendableValue, _sendable_result


class TwoArgumentError(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


def test_a_value_that_pickles_but_cannot_be_unpickled_is_replaced_by_a_stand_in():
    value = TwoArgumentError(1, "x")
    data = pickle.dumps(value)  # it pickles...
    try:
        pickle.loads(data)
    except TypeError:
        pass  # ...but cannot be read back
    else:
        raise AssertionError("TwoArgumentError unpickled")
    sent = _sendable_result(SimpleNamespace(result=value))  # type: ignore[arg-type]
    assert isinstance(sent, UnsendableValue)
    assert repr(pickle.loads(pickle.dumps(sent))) == (
        "<TwoArgumentError, which cannot leave the child process>"
    )


def test_a_value_that_travels_is_sent_as_it_is():
    value = {"a": [1, 2.5, "x"]}
    assert _sendable_result(SimpleNamespace(result=value)) is value  # type: ignore[arg-type]
    assert _sendable_result(SimpleNamespace(result=None)) is None  # type: ignore[arg-type]

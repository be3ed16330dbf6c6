"""``manage.py runjobs`` refuses options it cannot honour, before it touches anything."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


@pytest.mark.parametrize("value", ["inf", "nan", "1e12", "0", "-1", "soon"])
def test_runjobs_refuses_a_poll_interval_it_cannot_wait(value):
    with pytest.raises(CommandError, match="poll-interval"):
        call_command("runjobs", "--once", "--poll-interval", value)

"""The fair-share jobs, for the workers of the multi-process test (``settings``)."""

from tests.fair_jobs.definitions import define, define_flow

define()
define_flow()

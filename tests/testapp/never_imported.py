"""Imported by no code: a test names it in error text and in a row's recorded class
path, and checks that reading the row did not import it. Importing it leaves a mark."""

import os

os.environ["CRONQUEUE_TEST_NEVER_IMPORTED_WAS_IMPORTED"] = "1"


class TaskBoom(Exception):
    pass

"""``python -m tests.without_extras <command> ...``: a Django management command run as
if no optional extra were installed: importing ``prometheus_client``, ``opentelemetry``
or ``cryptography`` raises ImportError, whatever this environment holds."""

import sys
from importlib.abc import MetaPathFinder

BLOCKED = ("prometheus_client", "opentelemetry", "cryptography")


class NotInstalled(MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {fullname!r} (blocked: not installed)")
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, NotInstalled())
    from django.core.management import execute_from_command_line

    execute_from_command_line([sys.argv[0], *sys.argv[1:]])

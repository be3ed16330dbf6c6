"""The model fields of the package's own."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["ExactCharField"]


class ExactCharField(models.CharField):  # type: ignore[type-arg]
    """A CharField compared byte for byte on every vendor.

    MySQL's and MariaDB's default collations ignore case (and, on MariaDB, trailing
    spaces), so limit keys "Acme" and "acme" would share one limit there, and a pause of
    queue "Emails" would hold back "emails"; this column gets the binary NO PAD collation
    that migration 0002 gave the job names. Other
    vendors compare text exactly already and get no collation clause."""

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        parameters = super().db_parameters(connection)
        if connection.vendor == "mysql" and not parameters.get("collation"):
            mariadb = getattr(connection, "mysql_is_mariadb", False)
            parameters["collation"] = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
        return parameters

    def deconstruct(self) -> Any:
        # Migrations name it where it was first declared, so they keep naming it there.
        name, _, args, kwargs = super().deconstruct()
        return name, "django_cronqueue.models.ExactCharField", args, kwargs

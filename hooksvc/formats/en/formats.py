"""The admin's own lists and pages write times as hooksvc's pages do (workflows.durations.at):
2025-06-01 12:03:04 UTC, not Django's English "June 1, 2025, 12:03 p.m." without a zone."""

from __future__ import annotations

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"

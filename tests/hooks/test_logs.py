"""Structured logs: one JSON object per line, with the fields a log pipeline joins on."""

from __future__ import annotations

import json
import logging

from hooksvc import logs


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "workflows.engine", logging.INFO, __file__, 1, "step succeeded", (), None
    )
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_json_line_carries_the_extra_fields_at_top_level() -> None:
    line = logs.JSONFormatter().format(
        _record(
            action="step_succeeded",
            run=12,
            hook="BeforeClusterUpgrade",
            cluster="fleet/c1",
            step="snapshot",
        )
    )
    entry = json.loads(line)
    assert {
        k: entry[k]
        for k in ("level", "logger", "message", "action", "run", "hook", "cluster", "step")
    } == {
        "level": "INFO",
        "logger": "workflows.engine",
        "message": "step succeeded",
        "action": "step_succeeded",
        "run": 12,
        "hook": "BeforeClusterUpgrade",
        "cluster": "fleet/c1",
        "step": "snapshot",
    }
    assert "\n" not in line


def test_the_text_format_appends_the_extra_fields() -> None:
    formatter = logs.TextFormatter("%(levelname)s %(message)s")
    assert (
        formatter.format(_record(run=12, step="snapshot"))
        == "INFO step succeeded run=12 step=snapshot"
    )

"""`{{ value|at }}`: a time in a template as every page writes it (workflows.durations.at)."""

from __future__ import annotations

import datetime

from django import template

from workflows import durations

register = template.Library()


@register.filter
def at(moment: datetime.datetime | None) -> str:
    return durations.at(moment)

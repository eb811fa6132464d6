"""hooksvc: a Cluster API Runtime Extension server (the Django project and the hook API)."""

from __future__ import annotations

from hooksvc.celery import app as celery_app

__all__ = ["celery_app"]

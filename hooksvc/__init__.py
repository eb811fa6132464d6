"""hooksvc: a Cluster API Runtime Extension server (the Django project and the hook API)."""

from __future__ import annotations

#: hooksvc's version, the one place it is written (semantic versioning). `make release`
#: (scripts/release.py) sets it and copies it everywhere else; tests/test_release.py holds
#: every copy equal to it. Between releases it stays the last release's: a build is told
#: apart by its commit (hooksvc.build.commit()), not by a development version.
__version__ = "0.2.0"

from hooksvc.celery import app as celery_app

__all__ = ["__version__", "celery_app"]

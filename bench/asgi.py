"""hooksvc as an ASGI application, for benchmark 1's comparison of serving stacks only.

hooksvc is served by gunicorn (WSGI, hooksvc/wsgi.py); this module lets uvicorn serve
the same Django project so the two can be measured side by side.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")

application = get_asgi_application()

#!/usr/bin/env python
"""Django's command-line entry point for hooksvc."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")
    if sys.argv[1:] in (["version"], ["--version"]):
        # Django answers these two itself, with its own version, before any command runs.
        from hooksvc import build

        sys.stdout.write(build.describe() + "\n")
        return
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()

"""`manage.py apply_workflows -f FILE [--prune] [--dry-run]`: templates, add-on profiles and
in-place and upgrade policies.

Every document is parsed and validated before anything is written: one bad document
and nothing changes (exit code 1, the problems on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from workflows.definitions import apply, spec


class Command(BaseCommand):
    help = "Create, update (and with --prune delete) workflow templates from a YAML file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "-f", "--filename", required=True, help="YAML file of documents; - reads stdin"
        )
        parser.add_argument(
            "--prune", action="store_true", help="delete templates that are not in the file"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="validate and report; write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        filename: str = options["filename"]
        try:
            text = sys.stdin.read() if filename == "-" else Path(filename).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{filename}: cannot read: {exc}") from None
        try:
            documents = spec.parse(text)
        except spec.SpecError as exc:
            raise CommandError("\n".join(f"{filename}: {m}" for m in exc.messages)) from None
        try:
            report = apply.templates_apply(
                documents=documents, prune=options["prune"], dry_run=options["dry_run"]
            )
        except spec.SpecError as exc:
            raise CommandError("\n".join(f"{filename}: {m}" for m in exc.messages)) from None
        suffix = " (dry run)" if options["dry_run"] else ""
        verbs = {
            **dict.fromkeys(report.created, "created"),
            **dict.fromkeys(report.updated, "configured"),
            **dict.fromkeys(report.unchanged, "unchanged"),
        }
        profile_verbs = {
            **dict.fromkeys(report.profiles_created, "created"),
            **dict.fromkeys(report.profiles_updated, "configured"),
            **dict.fromkeys(report.profiles_unchanged, "unchanged"),
        }
        for doc in documents:
            if doc.kind == "WorkflowTemplate" and doc.name in verbs:
                self.stdout.write(f"workflowtemplate/{doc.name} {verbs[doc.name]}{suffix}")
            elif doc.kind == "AddonProfile" and doc.name in profile_verbs:
                self.stdout.write(f"addonprofile/{doc.name} {profile_verbs[doc.name]}{suffix}")
        for name in report.pruned:
            self.stdout.write(f"workflowtemplate/{name} pruned{suffix}")
        for name in report.profiles_pruned:
            self.stdout.write(f"addonprofile/{name} pruned{suffix}")
        policy_verbs = {
            **dict.fromkeys(report.policies_created, "created"),
            **dict.fromkeys(report.policies_updated, "configured"),
            **dict.fromkeys(report.policies_unchanged, "unchanged"),
            **dict.fromkeys(report.policies_pruned, "pruned"),
        }
        for key, verb in policy_verbs.items():
            kind, name = key.split("/", 1)
            self.stdout.write(f"{kind.lower()}/{name} {verb}{suffix}")
        for names, verb in (
            (report.generated_created, "generated"),
            (report.generated_updated, "regenerated"),
            (report.generated_deleted, "deleted"),
        ):
            for name in names:
                self.stdout.write(f"workflowtemplate/{name} {verb}{suffix}")

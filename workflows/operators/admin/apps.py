"""The admin app, with hooksvc's site as the default one (Django's documented way to replace it)."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig as DjangoAdminConfig


class AdminConfig(DjangoAdminConfig):
    default_site = "workflows.operators.admin.site.Site"

    def ready(self) -> None:
        super().ready()
        # The model admins live with the other operator pieces (workflows.operators), where
        # Django's autodiscovery (which imports `<app>.admin`) would not find them.
        from workflows.operators import roles
        from workflows.operators.admin import (  # noqa: F401
            bypasses,
            documents,
            hookcalls,
            policies,
            rollouts,
            runs,
            tokens,
        )

        # A malformed HOOKSVC_ROLES_FILE stops the process here, naming the rule and field.
        roles.current()

"""The record of hook calls: written on every answered call, shown in the admin, pruned by beat."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from hooksvc import wire
from workflows import selection
from workflows.models import HookCall


def record(
    *,
    call: wire.HookCall,
    handler: str,
    status: str,
    message: str,
    retry_after: int | None,
    latency_ms: float,
) -> None:
    """Keep one row for the admin.

    Its commit does not wait for the disk (PostgreSQL's asynchronous commit, for this
    transaction only): a crash may lose the last few records, never a run, and each poll
    saves a flush.
    """
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        HookCall.objects.create(
            hook=call.hook.name,
            handler=handler,
            cluster_key=call.cluster.key,
            cluster_namespace=call.cluster.namespace,
            cluster_name=call.cluster.name,
            moment=selection.moment_key(call),
            status=status,
            retry_after=retry_after,
            message=message[:1000],
            latency_ms=latency_ms,
        )


def prune(batch: int = 10_000) -> int:
    """Delete calls older than the retention, in batches so that no lock is held for long."""
    cutoff = timezone.now() - datetime.timedelta(days=settings.HOOK_CALL_RETENTION_DAYS)
    deleted = 0
    while True:
        ids = list(HookCall.objects.filter(at__lt=cutoff).values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        deleted += HookCall.objects.filter(pk__in=ids).delete()[0]

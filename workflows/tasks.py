"""Celery tasks: thin wrappers that pass ids and call the engine. Safe to run twice.

Tasks are acknowledged late (settings: CELERY_TASK_ACKS_LATE), so a worker that dies
mid-task has its message delivered again; the engine's row locks and compare-and-set
transitions make the repeat harmless.
"""

from __future__ import annotations

from celery import shared_task

from workflows import engine, hookcalls


@shared_task(name="workflows.advance")
def advance(run_id: int) -> None:
    engine.advance(run_id)


@shared_task(name="workflows.run_step")
def run_step(step_id: int) -> None:
    engine.run_step(step_id)


@shared_task(name="workflows.reconcile")
def reconcile() -> None:
    engine.reconcile()


@shared_task(name="workflows.prune_hook_calls")
def prune_hook_calls() -> None:
    hookcalls.prune()

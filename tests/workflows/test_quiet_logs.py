"""Quiet, useful logs: an idle hooksvc writes no routine lines; operator actions are logged.

An idle worker with its embedded beat still runs the batch poller every second and the
reconciler every few seconds. Celery logs each such message at INFO three times (beat's
"Scheduler: Sending due task", the worker's "Task received" and "Task succeeded"): about
110 lines per 30 s before these loggers were quieted, none of them about a run. The web
answers probes without a line. The worker and web run as `make run` and the image run
them (`celery worker -l INFO`, gunicorn with hooksvc's configuration).

Every operator action (the CLI here; the admin calls the same workflows.operators.actions)
writes one line, after it commits, with who, which run and why.
"""

from __future__ import annotations

import io
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command

from hooksvc.celery import app as celery_app
from tests.support import servers
from tests.support.worker import Worker
from tests.workflows.runs import make_run
from workflows.models import Run, StepRun

#: Long enough for several rounds of every frequent beat task (batch poller every 1 s,
#: reconciler every 1 s with the test workers' settings).
IDLE_SECONDS = 6


def _new_lines(path: Path, offset: int) -> list[str]:
    return path.read_bytes()[offset:].decode(errors="replace").splitlines()


def _poll_due_sent(client: redis.Redis, within: float) -> bool:
    """Whether beat sends a poll_due within `within` s, seen in Redis itself: kombu's Redis
    transport LPUSHes each message onto the queue's list, its headers (the task's name) in
    plain JSON (celery/kombu kombu/transport/redis.py, `Channel._put`), and MONITOR shows
    every command the server runs, with its database."""
    db = client.connection_pool.connection_kwargs.get("db", 0)
    watcher = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=1.0)
    deadline = time.monotonic() + within
    try:
        with watcher.monitor() as monitor:  # type: ignore[no-untyped-call]
            while time.monotonic() < deadline:
                try:
                    command = monitor.next_command()
                except redis.TimeoutError:
                    continue
                text = str(command["command"])
                ours = command["db"] == db
                if ours and text.startswith("LPUSH") and "workflows.poll_due" in text:
                    return True
    finally:
        watcher.close()
    return False


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_idle_worker_and_beat_write_no_lines(
    tmp_path: Path, no_worker: None, redis_client: redis.Redis
) -> None:
    worker = Worker(tmp_path / "data", tmp_path / "worker.log")
    worker.start()
    try:
        # Startup lines ("ready.", the broker's address) are not routine; start counting
        # once the first beat ticks are through, with every beat task seen at least once.
        time.sleep(2)
        offset = worker.log_path.stat().st_size
        time.sleep(IDLE_SECONDS)
        lines = _new_lines(worker.log_path, offset)
        # A worker that died writes no lines either: this one must still be alive, and
        # its beat still ticking, or the silence proves nothing.
        assert worker.alive, f"the worker died:\n{worker.log()[-3000:]}"
        replies = celery_app.control.ping(timeout=5) or []
        ticked = _poll_due_sent(redis_client, within=5)
    finally:
        worker.stop()
    assert lines == [], f"an idle worker and beat wrote {len(lines)} lines: {lines[:6]}"
    assert len(replies) == 1, f"the worker does not answer a ping: {replies}"
    assert ticked, "beat sent no poll_due in 5 s: the idle window had nothing to log"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_debug_level_shows_celerys_task_lines_again(tmp_path: Path, no_worker: None) -> None:
    """The quieted lines are not lost for good: HOOKSVC_LOG_LEVEL=DEBUG brings them back.

    Why it was flaky, and is not: the queue may still hold a poll_due that an earlier
    test's worker's beat sent, so the first "succeeded in" (the test waited for any, then
    looked for beat's line) can come before this worker's beat has sent anything. The
    test follows one message of this worker's own beat instead: beat logs "Sending due
    task" and then, at DEBUG, the id it sent (celery/beat.py, `Scheduler.apply_entry`);
    the worker logs that id's receipt (celery/worker/strategy.py) and its success
    (celery/app/trace.py, LOG_SUCCESS). The worker's tasks also need the test database,
    which exists only once some test has asked for it (django_db).
    """
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", env={"HOOKSVC_LOG_LEVEL": "DEBUG"})
    worker.start()
    try:
        # A bound for a worker that never gets there, not a measure of how soon it does.
        deadline = time.monotonic() + 120
        while not (sent := _beats_poll_due_done(worker.log())):
            assert time.monotonic() < deadline, f"no poll_due done:\n{worker.log()[-3000:]}"
            time.sleep(0.2)
        text = worker.log()
    finally:
        worker.stop()
    assert "Scheduler: Sending due task poll-due (workflows.poll_due)" in text
    assert f"Task workflows.poll_due[{sent}] received" in text


def _beats_poll_due_done(text: str) -> str:
    """The id of a poll_due that this log's beat sent and its worker ran, or ""."""
    for sent in re.findall(r"workflows\.poll_due sent\. id->([0-9a-f-]+)", text):
        if f"Task workflows.poll_due[{sent}] succeeded in" in text:
            return str(sent)
    return ""


@pytest.mark.slow
def test_an_idle_web_server_answers_probes_without_a_line(
    hook_server: servers.HookServer, django_db_blocker: Any
) -> None:
    offset = hook_server.log_path.stat().st_size
    for _ in range(5):
        for path in ("/healthz", "/readyz"):
            conn = hook_server.connection()
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                assert response.status == 200, path
            finally:
                conn.close()
    time.sleep(1)
    assert _new_lines(hook_server.log_path, offset) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "step"),
    [
        (("retry", "--step", "snapshot"), "snapshot"),
        (("skip", "--step", "snapshot"), "snapshot"),
        (("cancel",), ""),
        (("release",), ""),
    ],
)
def test_every_operator_action_logs_its_actor_run_and_reason(
    args: tuple[str, ...],
    step: str,
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = make_run(
        state=Run.State.FAILED if args[0] == "retry" else Run.State.RUNNING,
        steps=(("snapshot", "noop", StepRun.State.FAILED if args[0] == "retry" else "waiting"),),
    )
    command, *rest = args
    argv = [command, str(run.pk), *rest, "--reason", "CAB-7 approved", "--actor", "ops:ann"]
    with (
        caplog.at_level(logging.INFO, logger="workflows.operators.actions"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        call_command("workflows", *argv, stdout=io.StringIO())
    [record] = [r for r in caplog.records if getattr(r, "action", "") == "operator_action"]
    keys = ("operation", "actor", "run", "reason", "step", "cluster")
    fields = {k: getattr(record, k, "") for k in keys}
    assert fields == {
        "operation": command,
        "actor": "ops:ann",
        "run": run.pk,
        "reason": "CAB-7 approved",
        "step": step,
        "cluster": "prod/c1",
    }


@pytest.mark.django_db
def test_an_action_that_does_not_apply_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    run = make_run(state=Run.State.SUCCEEDED)
    with caplog.at_level(logging.INFO), pytest.raises(CommandError):
        call_command("workflows", "cancel", str(run.pk), "--reason", "late", stdout=io.StringIO())
    assert not [r for r in caplog.records if getattr(r, "action", "") == "operator_action"]

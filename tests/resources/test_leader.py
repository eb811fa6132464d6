"""One leader among the watcher's replicas: a PostgreSQL advisory lock on its own session.

Covers: of two replicas one runs the loops and the other stands by (healthy); when the
leader stops, the standby takes over; a leader whose database session ends (as when
PostgreSQL drops the session of a vanished machine) stops its loops and campaigns again.
PostgreSQL documents that a session-level advisory lock is held until released or the
session ends (postgresql.org/docs, "Advisory Locks", explicit-locking.html).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.resources.conftest import wait_for
from workflows.controllers import leader

pytestmark = pytest.mark.django_db(transaction=True)


class Stub:
    """A loop that runs until its term ends."""

    def __init__(self, stop: threading.Event, running: set[str], name: str) -> None:
        self.stop, self.running, self.name = stop, running, name

    def run(self) -> None:
        self.running.add(self.name)
        self.stop.wait()
        self.running.discard(self.name)

    def healthy(self) -> bool:
        return True


class Replica:
    def __init__(self, name: str, running: set[str]) -> None:
        self.stop = threading.Event()
        self.manager = leader.Manager(
            stop=self.stop,
            loops=lambda term: [Stub(term, running, name)],
            check_seconds=0.1,
            campaign_seconds=0.1,
        )
        self.thread = threading.Thread(target=self.manager.run, name=name, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


@pytest.fixture
def replicas() -> Iterator[tuple[Replica, Replica, set[str]]]:
    running: set[str] = set()
    first = Replica("first", running)
    wait_for("the first to lead", lambda: running == {"first"})
    second = Replica("second", running)
    yield first, second, running
    for replica in (first, second):
        replica.close()


def test_one_replica_leads_and_the_other_stands_by_until_it_stops(
    replicas: tuple[Replica, Replica, set[str]],
) -> None:
    first, second, running = replicas
    wait_for(
        "the second to campaign", lambda: second.manager.terms == 0 and second.thread.is_alive()
    )
    threading.Event().wait(0.5)  # several campaigns of the second
    assert running == {"first"}
    assert second.manager.healthy() and first.manager.healthy()
    first.close()
    wait_for("the standby to lead", lambda: running == {"second"})
    assert second.manager.terms == 1


def test_a_leader_whose_session_ends_stops_its_loops_and_campaigns_again(
    replicas: tuple[Replica, Replica, set[str]],
) -> None:
    first, second, running = replicas
    session = first.manager.leader._conn
    assert session is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [session.info.backend_pid])
    wait_for("a new term", lambda: first.manager.terms + second.manager.terms == 2)
    wait_for("exactly one leader again", lambda: len(running) == 1)

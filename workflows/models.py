"""What runs per hook (templates) and what ran (runs, step runs, events): PostgreSQL is the truth.

State changes go through `workflows.engine.transitions` only; nothing else assigns `state`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from hooksvc.contract import catalog

# Defined apart for this module's size; imported here, it is one of the app's models.
from workflows.policy_model import Policy  # noqa: F401
from workflows.rollout_actions import RolloutAction  # noqa: F401

HOOK_CHOICES = [(name, name) for name in catalog.BYPASSABLE]
#: A hook call's record may be of an optional hook too.
CALL_HOOK_CHOICES = [(name, name) for name in catalog.ALL_HOOKS]
#: What templates and runs name: the hooks, and hooksvc's own moments (ClusterDeleted).
MOMENT_CHOICES = [(name, name) for name in catalog.MOMENTS]


class WorkflowTemplate(models.Model):
    """An operator's definition of the steps to run at one hook (`kind: WorkflowTemplate`)."""

    name = models.CharField(max_length=63, unique=True)
    hook = models.CharField(max_length=64, choices=MOMENT_CHOICES, db_index=True)
    #: The validated `spec` of the YAML document (see workflows.definitions.spec).
    spec = models.JSONField()
    #: Bumped on every change of `spec`; runs record the generation they started from.
    generation = models.PositiveIntegerField(default=1)
    #: "" for an operator's template (apply_workflows, the admin); "addonprofile:<name>" for
    #: one generated from a profile, which only its profile changes; "resource" for one kept
    #: in sync with its custom resource. Only its own source writes it.
    managed_by = models.CharField(max_length=80, blank=True, default="", db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AddonProfile(models.Model):
    """An operator's add-on profile (`kind: AddonProfile`); its templates are generated."""

    name = models.CharField(max_length=40, unique=True)
    #: The validated `spec` of the YAML document (see workflows.definitions.spec.addon_profile).
    spec = models.JSONField()
    generation = models.PositiveIntegerField(default=1)
    #: "" for an operator's profile (apply_workflows, the admin); "resource" for one kept in
    #: sync with its custom resource by the resource controller.
    managed_by = models.CharField(max_length=80, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        # Its name in prose everywhere (Django would say "addon profile").
        verbose_name = "add-on profile"

    def __str__(self) -> str:
        return self.name


class RunState(models.TextChoices):
    PENDING = "pending"  #: recorded; waiting to start (concurrency budget, waitFor)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepState(models.TextChoices):
    PENDING = "pending"  #: its dependencies have not finished
    READY = "ready"  #: due at `due_at`
    WAITING = "waiting"  #: started; polled again at `due_at`
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class EventKind(models.TextChoices):
    TRANSITION = "transition"
    ACTION = "action"


class Run(models.Model):
    """One workflow run: a template applied to one cluster at one moment of its life."""

    State = RunState

    FINISHED = (State.SUCCEEDED, State.FAILED, State.CANCELLED)
    ACTIVE = (State.PENDING, State.RUNNING)

    template = models.ForeignKey(
        WorkflowTemplate, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    template_name = models.CharField(max_length=63)
    template_generation = models.PositiveIntegerField()
    #: The template's spec when the run was created: later edits change only new runs.
    spec = models.JSONField()
    hook = models.CharField(max_length=64, choices=MOMENT_CHOICES)
    #: The cluster's UID, or namespace/name when CAPI sent none.
    cluster_key = models.CharField(max_length=320)
    cluster_namespace = models.CharField(max_length=253)
    cluster_name = models.CharField(max_length=253)
    #: The moment's attributes (hookpath.selection.moment_key); "" for once-only hooks.
    moment = models.CharField(max_length=200, blank=True)
    #: What steps see: cluster metadata, versions, settings. Never secrets.
    context = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    #: The deterministic sentence the hook answers while this run holds the lifecycle.
    message = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    #: Set once the deadline passed and onDeadline was acted on.
    deadline_exceeded = models.BooleanField(default=False)
    #: When the engine must look at this run next; the reconciler re-enqueues overdue ones.
    wake_at = models.DateTimeField(null=True, blank=True)
    #: An operator let the lifecycle proceed whatever the run's state.
    released = models.BooleanField(default=False)

    class Meta:
        permissions = [("operate_run", "Can retry, cancel, approve, skip and release runs")]
        constraints = [
            models.UniqueConstraint(
                fields=["template_name", "hook", "cluster_key", "moment"],
                name="workflows_run_moment_uniq",
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=RunState.values),
                name="workflows_run_state_check",
            ),
        ]
        indexes = [
            # The reconciler's scan: active runs whose wake-up is overdue.
            models.Index(
                fields=["wake_at"],
                name="workflows_run_wake_idx",
                condition=models.Q(state__in=["pending", "running"]),
            ),
            # Concurrency budgets and waitFor: active runs per template or cluster.
            models.Index(fields=["template_name", "state"], name="workflows_run_tmpl_state_idx"),
            models.Index(fields=["cluster_key", "template_name"], name="workflows_run_cluster_idx"),
            models.Index(fields=["-created_at"], name="workflows_run_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.template_name} {self.cluster_namespace}/{self.cluster_name} {self.moment}"

    @property
    def is_finished(self) -> bool:
        return self.state in self.FINISHED


class StepRun(models.Model):
    """One step of a run, with kopf's record shape: attempts, timing, outcome, message."""

    State = StepState

    FINISHED = (State.SUCCEEDED, State.FAILED, State.SKIPPED, State.CANCELLED)
    #: Finished in a way that lets dependent steps go on.
    DONE = (State.SUCCEEDED, State.SKIPPED)
    DUE = (State.READY, State.WAITING)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=63)
    position = models.PositiveSmallIntegerField()
    type = models.CharField(max_length=63)
    params = models.JSONField(default=dict)
    depends_on = models.JSONField(default=list)
    #: The whole step's bound from its first attempt (the template's timeoutSeconds, else its
    #: type's default); None or 0: none.
    timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    #: The bound of one call of its type's function (StepType.call_timeout_seconds when the
    #: run started); None: the function runs inline (no I/O), unbounded per call.
    call_timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    #: Its error budget: a temporary error fails the step only when more than `retries`
    #: attempts failed in a row AND the streak has lasted `retry_for_seconds`.
    retries = models.PositiveSmallIntegerField(default=0)
    retry_for_seconds = models.PositiveIntegerField(default=0, db_default=0)
    #: Only a person ends this step's waiting (its type's StepType.waits_for_person when the
    #: run started): the hook path and the display states read it in SQL, without loading
    #: the step types (the web process does not import them).
    waits_for_person = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    #: How long this step may go without progress before it shows as stalled (its type's
    #: StepType.stall_seconds when the run started; workflows.engine.stalls); 0: never.
    stall_seconds = models.PositiveIntegerField(null=True, blank=True)
    #: When the step last made progress: what it reports (its due state, message or output)
    #: changed, by an outcome that was no error. Written by a trigger of the table on change
    #: only (migration 0015), on the database's clock; see workflows.engine.stalls.
    progress_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: A digest of what it reported at progress_at, so that a poll after an error that
    #: reports the same as before the error is no progress (the same trigger writes it).
    progress_mark = models.CharField(
        max_length=32, blank=True, default="", db_default="", editable=False
    )
    #: When the current stall was announced (a Warning Event on the Cluster); a stall is new
    #: when the step made progress since.
    stall_noticed_at = models.DateTimeField(null=True, blank=True)
    #: Failed attempts in a row since the step last made progress (a poll or its end).
    failures = models.PositiveSmallIntegerField(default=0)
    #: When the current streak of failed attempts began (None: no failure since progress).
    failing_since = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    #: The step type's own memory between polls (names of what it created, timers).
    memo = models.JSONField(default=dict)
    #: What the step reports (results, lists of objects); shown in the admin.
    output = models.JSONField(default=dict)
    #: Deterministic progress or error text.
    message = models.CharField(max_length=500, blank=True)
    #: The process attempting the step now ("" when no attempt holds it): host:pid:nonce,
    #: as its WorkerBeat row names it; see workflows.engine.leases. Any move of the step by
    #: someone else clears it.
    lease_owner = models.CharField(max_length=255, blank=True, default="")
    #: When the attempt's lease passes (extended while the step's code runs); another
    #: attempt may claim the step after it.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    #: How often the step was claimed: the lease's token. An attempt records its outcome
    #: only while the row still carries the token and owner it claimed with.
    claims = models.PositiveIntegerField(default=0)
    #: Attempts claimed since its last recorded outcome: a claim counts one, an outcome or a
    #: move by someone else resets it; past HOOKSVC_STEP_LOST_ATTEMPTS its worker died that
    #: often running it, and the step fails (workflows.engine.lifecycle.before_call).
    unrecorded = models.PositiveSmallIntegerField(default=0, db_default=0)
    #: The process of its last attempt that ended without an outcome (host:pid:nonce): the
    #: reaper writes a dead process, a claim the holder of a lease that passed.
    lost_by = models.CharField(max_length=255, blank=True, default="", db_default="")

    class Meta:
        ordering = ["run_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "name"], name="workflows_step_name_uniq"),
            models.CheckConstraint(
                condition=models.Q(state__in=StepState.values),
                name="workflows_step_state_check",
            ),
        ]
        indexes = [
            models.Index(
                fields=["due_at"],
                name="workflows_step_due_idx",
                condition=models.Q(state__in=["ready", "waiting"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.type})"


class WorkerBeat(models.Model):
    """A process that holds step leases, and when it last said it is alive (one row each).

    Written by the process' heartbeat thread every WORKER_BEAT_SECONDS while it holds leases
    (workflows.engine.leases); a row older than WORKER_DEAD_SECONDS is a dead process, whose
    leases the reaper frees (workflows.engine.workers). Times are the database's clock, so
    that hosts whose clocks differ by seconds still judge each other alike.
    """

    #: host:pid:nonce (the nonce is new at every start, so a reused pid is another owner).
    owner = models.CharField(max_length=255, primary_key=True)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.owner


class StepArtifact(models.Model):
    """A file a step keeps with its run (the conformance JUnit), downloadable in the admin."""

    step = models.ForeignKey(StepRun, on_delete=models.CASCADE, related_name="artifacts")
    #: The file's name as the step found it (junit_01.xml).
    name = models.CharField(max_length=100)
    content_type = models.CharField(max_length=100, default="application/octet-stream")
    #: The file's bytes; the step caps the size (PostgreSQL compresses large values).
    content = models.BinaryField()
    size = models.PositiveIntegerField()
    #: When the step stored it last (a repeated attempt replaces the file).
    stored_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["step_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["step", "name"], name="workflows_artifact_name_uniq"),
        ]

    def __str__(self) -> str:
        return self.name


class RunEvent(models.Model):
    """The audit trail of a run: every transition and every operator action, with who and why."""

    Kind = EventKind

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    step_name = models.CharField(max_length=63, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    #: For transitions "from->to"; for actions the action's name (retry, cancel, ...).
    name = models.CharField(max_length=64)
    actor = models.CharField(max_length=150, blank=True)
    #: For an action by someone who signed in through the identity provider: its `sub` and
    #: `email` claims (workflows.operators.identities), "" otherwise.
    actor_subject = models.CharField(max_length=255, blank=True, default="", db_default="")
    actor_email = models.CharField(max_length=254, blank=True, default="", db_default="")
    reason = models.CharField(max_length=500, blank=True)
    message = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(auto_now_add=True)
    details: Any = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["run", "-at"], name="workflows_event_run_idx")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=EventKind.values),
                name="workflows_event_kind_check",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class HookCall(models.Model):
    """One hook call CAPI made and the answer it got; kept HOOK_CALL_RETENTION_DAYS days."""

    at = models.DateTimeField(auto_now_add=True)
    hook = models.CharField(max_length=64, choices=CALL_HOOK_CHOICES)
    handler = models.CharField(max_length=63)
    cluster_key = models.CharField(max_length=320)
    cluster_namespace = models.CharField(max_length=253)
    cluster_name = models.CharField(max_length=253)
    moment = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16)
    retry_after = models.PositiveIntegerField(null=True, blank=True)
    message = models.CharField(max_length=1000, blank=True)
    latency_ms = models.FloatField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(
                fields=["cluster_key", "hook", "moment", "-at"], name="workflows_call_moment_idx"
            ),
            models.Index(fields=["at"], name="workflows_call_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.hook} {self.cluster_namespace}/{self.cluster_name}"


class Bypass(models.Model):
    """Break glass: a hook's matching calls are answered Success, starting no run, until it expires.

    Opened and ended by an operator (`manage.py workflows bypass`, workflows.operators.bypasses)
    with who and why; the hook path reads the ones in force in its one query
    (workflows.hookpath.bypass). Existing runs are left as they are.
    """

    hook = models.CharField(max_length=64, choices=HOOK_CHOICES)
    #: Only clusters in this namespace ("" for every namespace).
    namespace = models.CharField(max_length=253, blank=True)
    #: A Kubernetes label selector on the cluster's labels ("" for every cluster).
    selector = models.CharField(max_length=500, blank=True)
    actor = models.CharField(max_length=150)
    #: The identity provider's subject and e-mail of who opened it ("" for a local account).
    actor_subject = models.CharField(max_length=255, blank=True, default="", db_default="")
    actor_email = models.CharField(max_length=254, blank=True, default="", db_default="")
    reason = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    #: Set when an operator ended it before it expired.
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=150, blank=True)
    ended_by_subject = models.CharField(max_length=255, blank=True, default="", db_default="")
    ended_by_email = models.CharField(max_length=254, blank=True, default="", db_default="")
    end_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        verbose_name_plural = "bypasses"
        ordering = ["-created_at", "-id"]
        indexes = [
            # The hook path's look-up: the ones of a hook not ended yet.
            models.Index(
                fields=["hook", "expires_at"],
                name="workflows_bypass_hook_idx",
                condition=models.Q(ended_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"bypass {self.pk} of {self.hook}"


class KnownCluster(models.Model):
    """A Cluster the watcher saw, so that its deletion is noticed after a watch gap too.

    The Cluster watcher (workflows.controllers.watcher) records each Cluster it sees and
    drops the record when it has started the Cluster's ClusterDeleted runs: a Cluster
    whose record remains but which a new list no longer holds was deleted meanwhile.
    """

    #: The Cluster's UID, or namespace/name (wire.cluster_key), as runs key it.
    key = models.CharField(max_length=320, unique=True)
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    #: What selection and a run's context need of it (the fields of wire.Cluster).
    cluster = models.JSONField()
    seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Identity(models.Model):
    """A person as the identity provider names them, tied to the Django user they sign in as.

    Written at each sign-in (workflows.operators.identities): the issuer and subject that
    identify them for good, the e-mail and groups the provider gave then. Their roles are
    computed from these groups and the role rules on every request, so a rules change
    applies at once and a groups change at the next sign-in.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identity"
    )
    issuer = models.CharField(max_length=500)
    #: The `sub` claim: unique and never reassigned within its issuer.
    subject = models.CharField(max_length=255)
    email = models.CharField(max_length=254, blank=True)
    groups: Any = models.JSONField(default=list, blank=True)
    signed_in_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="workflows_identity_uniq"),
        ]

    def __str__(self) -> str:
        return self.email or self.subject


class ApiToken(models.Model):
    """A robot's credential for the REST API, made and revoked by an admin.

    Scoped like a role rule (roles, in every namespace or in some) and always expiring;
    only the SHA-256 of the token is kept (workflows.operators.tokens): whoever reads the
    database cannot use it, and the token itself is shown once, when it is made.
    """

    #: Unique; the actor's name in what the token does is `token:<name>`.
    name = models.CharField(max_length=100, unique=True)
    #: The token's first characters, to tell tokens apart (`hks_Ab3dE`); not enough to use.
    prefix = models.CharField(max_length=16)
    #: The SHA-256 of the whole token, hex: how a request's token is found.
    digest = models.CharField(max_length=64, unique=True)
    roles: Any = models.JSONField()
    #: None: every namespace.
    namespaces: Any = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    created_by = models.CharField(max_length=150)
    created_by_subject = models.CharField(max_length=255, blank=True)
    created_by_email = models.CharField(max_length=254, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True)
    #: Written at most once a minute (workflows.operators.tokens.USE_RECORD_SECONDS).
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

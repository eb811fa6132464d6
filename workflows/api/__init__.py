"""The operator REST API under /api/v1/: DRF views over the service functions the admin and
the CLI call (workflows.operators), under the same permission model. docs/api.md tells it."""

"""The workflow engine: templates, runs and steps, tracked in PostgreSQL, driven by Celery."""

"""`manage.py apply_workflows` and `manage.py workflows`."""

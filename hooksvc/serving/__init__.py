"""The serving layer: the hook views, probes, /metrics, gunicorn over TLS, `make run`.

The top of the house: it calls the hook path (workflows.hookpath) and nothing calls it.
"""

"""Tests of the workflows app: template files, the operator CLI."""

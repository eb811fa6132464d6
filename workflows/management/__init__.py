"""Management commands of the workflows app."""

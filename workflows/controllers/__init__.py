"""Processes that watch the management cluster (one leader each): the Cluster watcher."""

"""Benchmarks of hooksvc at fleet scale; `make bench` runs them all (see bench/run.py)."""

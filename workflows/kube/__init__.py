"""Kubernetes: the one client module (k8s), manifests by kind, Events on Clusters."""

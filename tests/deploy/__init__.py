"""Deployment tests: the image, docker-compose.yml, the k8s/ manifests, the Helm chart and the
clusterctl provider files.
"""

"""Deployment tests: the image, docker-compose.yml and the k8s/ manifests, checked statically."""

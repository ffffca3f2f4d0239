#!/bin/sh
# The image's entry point.
#   serve [ARGS]   migrate (unless S2S_MIGRATE=0), then `manage.py serve` on S2S_HOST:S2S_PORT (0.0.0.0:8000)
#   worker [ARGS]  the Celery worker with its beat (run exactly one; docs/deploy.md)
#   anything else  run as given (`manage.py create_api_key NAME`, `sh`, ...)
# exec: the server is PID 1 and gets the SIGTERM itself, which drains the sessions (docs/deploy.md#containers).
set -e
case "${1:-serve}" in
  serve)
    [ $# -gt 0 ] && shift
    if [ "${S2S_MIGRATE:-1}" = 1 ]; then python manage.py migrate --noinput; fi
    exec python manage.py serve --host "${S2S_HOST:-0.0.0.0}" --port "${S2S_PORT:-8000}" "$@"
    ;;
  worker)
    shift
    exec celery -A s2s_project worker -B -s /data/celerybeat-schedule --loglevel "${S2S_WORKER_LOG_LEVEL:-info}" "$@"
    ;;
  *)
    exec "$@"
    ;;
esac

#!/usr/bin/env bash
# `make stop`: stops a `make run` left in the background and the private
# Postgres and Redis that `make deps` started. Safe to call when nothing runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
run="$root/.run"
if [ -f "$run/launch.pid" ]; then
  pid=$(cat "$run/launch.pid")
  if kill -0 "$pid" 2>/dev/null; then
    # The launcher stops supervising (nothing is restarted from here),
    # sends its components SIGTERM and SIGKILLs those left after 10 s.
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$run/launch.pid"
fi
if [ -f "$run/redis.pid" ]; then
  kill -TERM "$(cat "$run/redis.pid")" 2>/dev/null || true
  rm -f "$run/redis.pid"
fi
if [ -e "$run/pg/PG_VERSION" ]; then
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  pgdir=$(readlink -f "$run/pg")
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdir" -m fast -w stop >/dev/null 2>&1 || true
  else
    "$pgbin/pg_ctl" -D "$pgdir" -m fast -w stop >/dev/null 2>&1 || true
  fi
fi
echo "stopped"

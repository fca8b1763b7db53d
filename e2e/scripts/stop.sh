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
# A launcher that was killed (kill -9) left its components running,
# unsupervised: stop those .run/status.json still lists as live, when the
# pid is still one of this checkout's binaries (not a reused pid).
if [ -f "$run/status.json" ] && [ "$(jq -r .launcher.state "$run/status.json" 2>/dev/null)" != stopped ]; then
  launcher=$(jq -r .launcher.pid "$run/status.json")
  if ! kill -0 "$launcher" 2>/dev/null; then
    for c in $(jq -r '.components[] | select(.state != "stopped" and .state != "failed") | .pid' "$run/status.json"); do
      case "$(readlink "/proc/$c/exe" 2>/dev/null)" in
        "$root"/bin/*) kill -TERM "$c" 2>/dev/null && echo "stopped pid $c, left by a launcher that was killed" ;;
      esac
    done
  fi
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

#!/usr/bin/env bash
# Dependency bootstrap for `make deps`, `make run` and `make test`.
# Idempotent: installs postgresql and redis-server with apt when missing, then
# starts private instances under .run/ unless they already answer.
#   Postgres 127.0.0.1:${PORTICO_PG_PORT:-55432}, user postgres (trust), database portico
#   Redis    127.0.0.1:${PORTICO_REDIS_PORT:-56379}, no persistence
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
run="$root/.run"
pg_port=${PORTICO_PG_PORT:-55432}
redis_port=${PORTICO_REDIS_PORT:-56379}
mkdir -p "$run"

log() { printf 'deps: %s\n' "$*" >&2; }

pg_bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

missing=()
[ -n "$(pg_bindir)" ] || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v pg_isready >/dev/null 2>&1 || missing+=(postgresql-client)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)  # make proto and its staleness check
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing ${missing[*]} and not root: install them and retry"; exit 1
  fi
  log "installing ${missing[*]} with apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The Debian package starts a cluster and a redis on default ports; ours are private.
fi
pgbin=$(pg_bindir)

# --- Postgres -------------------------------------------------------------
# Postgres refuses to run as root, so it runs as the postgres user. Its data
# directory must be reachable by that user; when the work tree is not (a
# private home, say), the data lives under /var/tmp and .run/pg links to it.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if ! "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" 2>/dev/null; then
  pgdir="$run/pg"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
    if [ ! -e "$pgdir" ]; then
      if runuser -u postgres -- test -x "$run"; then
        mkdir -p "$pgdir"
      else
        alt="/var/tmp/portico-pg-$(echo "$root" | md5sum | cut -c1-12)"
        mkdir -p "$alt"
        ln -sfn "$alt" "$pgdir"
      fi
    fi
    pgdir=$(readlink -f "$pgdir")
    chown postgres:postgres "$pgdir"
    chmod 700 "$pgdir"
  else
    mkdir -p "$pgdir"
  fi
  if [ ! -f "$pgdir/PG_VERSION" ]; then
    log "initdb in $pgdir"
    as_pg "$pgbin/initdb" -D "$pgdir" -U postgres -A trust -E UTF8 --no-locale >"$run/pg-initdb.log" 2>&1
  fi
  log "starting postgres on 127.0.0.1:$pg_port"
  as_pg "$pgbin/pg_ctl" -D "$pgdir" -l "$pgdir/server.log" -w -t 60 start \
    -o "-p $pg_port -c listen_addresses=127.0.0.1 -k $pgdir -c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >/dev/null
fi
if ! psql -h 127.0.0.1 -p "$pg_port" -U postgres -tAc "select 1 from pg_database where datname='portico'" postgres | grep -q 1; then
  psql -h 127.0.0.1 -p "$pg_port" -U postgres -qc "create database portico" postgres
fi

# --- Redis ----------------------------------------------------------------
if ! redis-cli -h 127.0.0.1 -p "$redis_port" ping >/dev/null 2>&1; then
  log "starting redis on 127.0.0.1:$redis_port"
  redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
    --daemonize yes --pidfile "$run/redis.pid" --logfile "$run/redis.log" --dir "$run" >/dev/null
  for _ in $(seq 1 100); do
    redis-cli -h 127.0.0.1 -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -h 127.0.0.1 -p "$redis_port" ping >/dev/null
fi
log "postgres 127.0.0.1:$pg_port and redis 127.0.0.1:$redis_port are up"

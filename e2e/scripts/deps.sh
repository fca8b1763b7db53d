#!/usr/bin/env bash
# Dependency bootstrap for `make deps`, `make run` and `make test`.
# Idempotent: installs with apt what e2e/scripts/deps.txt lists and this machine
# lacks, then starts private instances under .run/ unless they already answer.
#   Postgres 127.0.0.1:${PORTICO_PG_PORT:-55432}, user postgres (trust), database portico
#   Redis    127.0.0.1:${PORTICO_REDIS_PORT:-56379}, no persistence
# With --install-only it installs and starts nothing else (make proto).
set -euo pipefail
install_only=false
[ "${1:-}" = --install-only ] && install_only=true

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

# have KIND WHAT: whether one requirement of deps.txt is met.
have() {
  case $1 in
    cmd|machine) command -v "$2" >/dev/null 2>&1 ;;
    pgbin) local d; d=$(pg_bindir) && [ -x "$d/$2" ] ;;
    file) [ -e "$2" ] ;;
    optional|goinstall) return 0 ;;  # not apt's: skipped, or built by make
    *) log "deps.txt: unknown kind $1"; return 1 ;;
  esac
}

# unmet: the deps.txt lines not met, as "kind what package".
unmet() {
  local kind what pkg
  while read -r kind what pkg _; do
    case $kind in ''|'#'*) continue ;; esac
    have "$kind" "$what" || echo "$kind $what $pkg"
  done <"$root/e2e/scripts/deps.txt"
}

mapfile -t missing < <(unmet)
pkgs=()
for m in "${missing[@]}"; do
  read -r kind what pkg <<<"$m"
  if [ "$kind" = machine ]; then
    log "$what is missing: this machine must have it before make can help (Debian, root, Go, git)"; exit 1
  fi
  [[ " ${pkgs[*]} " == *" $pkg "* ]] || pkgs+=("$pkg")
done
if [ ${#pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing ${pkgs[*]} and not root: install them and retry"; exit 1
  fi
  log "installing ${pkgs[*]} with apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  # The Debian package starts a cluster and a redis on default ports; ours are private.
  mapfile -t missing < <(unmet)
  if [ ${#missing[@]} -gt 0 ]; then
    log "still missing after apt (deps.txt names the wrong package?): ${missing[*]}"; exit 1
  fi
fi
$install_only && exit 0
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

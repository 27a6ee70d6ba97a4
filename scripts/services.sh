#!/usr/bin/env bash
# Makes sure Postgres (127.0.0.1:5432, user postgres, trust auth) and Redis (127.0.0.1:6379)
# run on this machine, installing them from Debian's packages when missing. Used by .ci/run
# and by `npm run services`; safe to run again.
set -euo pipefail

log() { printf '[services] %s\n' "$*"; }
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then log "postgres is up"; return; fi
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    log "installing postgresql"
    apt_install postgresql
  fi
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  # Local development and tests connect as postgres over TCP without a password.
  local hba="/etc/postgresql/$version/main/pg_hba.conf"
  if ! grep -qE '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  fi
  log "starting postgres $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && return; sleep 1; done
  log "postgres did not come up"; exit 1
}

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then log "redis is up"; return; fi
  if ! command -v redis-server >/dev/null 2>&1; then
    log "installing redis"
    apt_install redis-server
  fi
  log "starting redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/local.log
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG && return; sleep 1; done
  log "redis did not come up"; exit 1
}

ensure_postgres
ensure_redis

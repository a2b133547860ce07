#!/usr/bin/env bash
# Makes sure the services the test suite talks to answer on loopback, starting them if not.
# Redis (the `redis` feature's KV store, state store and lease tests) and PostgreSQL (the
# `postgres` feature's state store and lease tests: trust auth on loopback, database `test`).
set -euo pipefail

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! redis_up; then
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "services: installing redis-server" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools) >/dev/null
  fi
  echo "services: starting redis on 127.0.0.1:6379" >&2
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 1 50); do redis_up && break; sleep 0.1; done
  redis_up || { echo "services: redis did not start" >&2; exit 1; }
fi

pg_up() { pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; }

if ! pg_up; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "services: installing postgresql" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null
  fi
  # The tests connect as `postgres` without a password over loopback.
  for hba in /etc/postgresql/*/main/pg_hba.conf; do
    grep -q '^host all all 127.0.0.1/32 trust' "$hba" || sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  done
  echo "services: starting postgresql on 127.0.0.1:5432" >&2
  for cluster in /etc/postgresql/*/main; do
    version=$(basename "$(dirname "$cluster")")
    pg_ctlcluster "$version" main start >/dev/null 2>&1 || true
  done
  for _ in $(seq 1 100); do pg_up && break; sleep 0.1; done
  pg_up || { echo "services: postgresql did not start" >&2; exit 1; }
fi

if ! psql -h 127.0.0.1 -U postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
  echo "services: creating database test" >&2
  psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE test" >/dev/null
fi

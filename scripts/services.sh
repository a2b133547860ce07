#!/usr/bin/env bash
# Makes sure the services the test suite talks to answer on loopback, starting them if not.
# Only Redis is needed today (the `redis` feature's KV store tests).
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

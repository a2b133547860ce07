#!/usr/bin/env bash
# What a test run leaves behind in the shared services and the temporary folder: the Redis
# keys and PostgreSQL tables and sequences under the test prefixes (harness-test-support's
# REDIS_ROOT and PG_ROOT), and headless-Chromium profiles (the page tests' `harness-chromium-`
# folders, and the `org.chromium.*` folders a killed browser leaves in /tmp).
#
#   scripts/leftovers.sh          prints one `kind count` line per kind
#   scripts/leftovers.sh --list   also lists the names (for the failure message)
set -euo pipefail

list=${1:-}
tmp=${TMPDIR:-/tmp}

redis_keys() { redis-cli -h 127.0.0.1 -p 6379 --scan --pattern 'harness-test:*'; }
pg_relations() {
  psql -h 127.0.0.1 -U postgres -d test -At -c \
    "SELECT relname FROM pg_class WHERE relkind IN ('r', 'S', 'p') AND starts_with(relname::text, 'harness_test_') ORDER BY relname"
}
profiles() { find "$tmp" /tmp -maxdepth 1 \( -name 'harness-chromium-*' -o -name '.org.chromium.*' -o -name 'org.chromium.*' \) 2>/dev/null | sort -u; }

for kind in redis_keys pg_relations profiles; do
  names=$($kind)
  count=$(printf '%s' "$names" | grep -c . || true)
  echo "$kind $count"
  if [ "$list" = "--list" ] && [ "$count" -gt 0 ]; then
    printf '%s\n' "$names" | head -20 | sed 's/^/  /'
  fi
done

#!/usr/bin/env bash
# Installs the real MCP servers the tests run against, outside the repository:
#   - @modelcontextprotocol/server-everything (npm) under $HARNESS_TEST_MCP_DIR/npm
#   - mcp-server-time (PyPI) in a venv under $HARNESS_TEST_MCP_DIR/venv
# Idempotent: a second run with the pinned versions in place returns at once.
# Tests find the servers through HARNESS_TEST_MCP_DIR (default /var/tmp/harness-mcp).
set -euo pipefail

EVERYTHING_VERSION="2026.8.31"
TIME_VERSION="2026.10.19"
DIR="${HARNESS_TEST_MCP_DIR:-/var/tmp/harness-mcp}"
mkdir -p "$DIR"

everything="$DIR/npm/node_modules/@modelcontextprotocol/server-everything"
if ! grep -qs "\"version\": \"$EVERYTHING_VERSION\"" "$everything/package.json"; then
    echo "mcp-servers: installing @modelcontextprotocol/server-everything@$EVERYTHING_VERSION" >&2
    mkdir -p "$DIR/npm"
    npm install --prefix "$DIR/npm" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" >&2
fi

venv="$DIR/venv"
installed="$("$venv/bin/python" -m pip show mcp-server-time 2>/dev/null || true)"
if ! grep -qx "Version: $TIME_VERSION" <<<"$installed"; then
    echo "mcp-servers: installing mcp-server-time==$TIME_VERSION" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp-server-time==$TIME_VERSION" >&2
fi

test -f "$everything/dist/index.js"
test -x "$venv/bin/mcp-server-time"
echo "$DIR"

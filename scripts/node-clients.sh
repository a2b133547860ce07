#!/usr/bin/env bash
# Installs the Node clients the `harness serve` tests use, outside the repository: the official
# `openai` npm SDK and the Vercel AI SDK (`ai` + `@ai-sdk/openai`), under
# $HARNESS_TEST_NODE_DIR (default /var/tmp/harness-node), and prints that directory.
# Idempotent: a second run with the pinned versions in place returns at once.
# Tests find it through HARNESS_TEST_NODE_DIR; they run `node` from PATH.
set -euo pipefail

OPENAI_VERSION="7.60.0"
AI_VERSION="7.0.173"
AI_SDK_OPENAI_VERSION="4.0.118"
DIR="${HARNESS_TEST_NODE_DIR:-/var/tmp/harness-node}"
mkdir -p "$DIR"

pinned() { grep -qs "\"version\": \"$2\"" "$DIR/node_modules/$1/package.json"; }
if ! pinned openai "$OPENAI_VERSION" || ! pinned ai "$AI_VERSION" || ! pinned @ai-sdk/openai "$AI_SDK_OPENAI_VERSION"; then
    echo "node-clients: installing openai@$OPENAI_VERSION ai@$AI_VERSION @ai-sdk/openai@$AI_SDK_OPENAI_VERSION in $DIR" >&2
    npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error \
        "openai@$OPENAI_VERSION" "ai@$AI_VERSION" "@ai-sdk/openai@$AI_SDK_OPENAI_VERSION" >&2
fi

node -e "require('$DIR/node_modules/openai'); require('$DIR/node_modules/ai'); require('$DIR/node_modules/@ai-sdk/openai')" >&2
echo "$DIR"

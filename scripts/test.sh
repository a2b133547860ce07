#!/usr/bin/env bash
# The project's test command: formatting, lints, a build without optional features, and
# every test of every crate with every feature (including the Redis-backed store against a
# real Redis on 127.0.0.1:6379).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/services.sh
# Real MCP servers for the MCP client tests (installed outside the repository).
HARNESS_TEST_MCP_DIR="$(bash scripts/mcp-servers.sh)"
export HARNESS_TEST_MCP_DIR
# The official `openai` Python SDK, the client of the `harness serve` tests (a venv outside
# the repository).
HARNESS_TEST_PYTHON="$(bash scripts/python-env.sh)"
export HARNESS_TEST_PYTHON
# The official `openai` npm SDK and the Vercel AI SDK, the Node clients of the `harness serve`
# tests (under /var/tmp/harness-node).
HARNESS_TEST_NODE_DIR="$(bash scripts/node-clients.sh)"
export HARNESS_TEST_NODE_DIR
# moto in server mode, the local S3-compatible endpoint of the snapshot store's S3 tests.
HARNESS_TEST_MOTO="$(bash scripts/moto.sh)"
export HARNESS_TEST_MOTO
# Debian's bubblewrap and the toolchains of the sandbox's normal-work suite (harness-sandbox tests).
bash scripts/sandbox-deps.sh
# mockllm (shared/bench), the scripted provider of the binary's subagent delegation test.
HARNESS_TEST_MOCKLLM="$(bash scripts/mockllm.sh)"
export HARNESS_TEST_MOCKLLM
# Debian's chromium, the browser of the web page's headless test.
bash scripts/chromium.sh
cargo fmt --all -- --check
# Warnings fail the script in both configurations (clippy's `-D warnings` reaches only our
# crates, so dependencies keep their build cache).
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
cargo clippy --workspace --all-targets --no-default-features --locked -- -D warnings
# The binaries the CLI tests run (harness, mock-llm, bench-driver), built with the same features
# as the tests so no test has to build them itself.
cargo build --workspace --all-features --bins --locked
# Every test removes what it creates in Redis, PostgreSQL and the temporary folder: the run
# fails if it left more behind than there was before it.
before=$(bash scripts/leftovers.sh)
status=0
cargo test --workspace --all-features --locked --no-fail-fast || status=$?
after=$(bash scripts/leftovers.sh)
if [ "$before" != "$after" ] && [ "$(paste -d' ' <(echo "$before") <(echo "$after") | awk '$4 > $2' | wc -l)" -gt 0 ]; then
  echo "test.sh: the tests left things behind (kind before / after):" >&2
  paste -d' ' <(echo "$before") <(echo "$after") | awk '{print "  " $1 ": " $2 " -> " $4}' >&2
  bash scripts/leftovers.sh --list >&2
  status=1
fi
exit "$status"

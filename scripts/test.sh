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
# Debian's bubblewrap and the toolchains of the sandbox's normal-work suite (harness-sandbox tests).
bash scripts/sandbox-deps.sh
# mockllm (shared/bench), the scripted provider of the binary's subagent delegation test.
HARNESS_TEST_MOCKLLM="$(bash scripts/mockllm.sh)"
export HARNESS_TEST_MOCKLLM
# Debian's chromium, the browser of the web page's headless test.
bash scripts/chromium.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
cargo check --workspace --all-targets --no-default-features --locked
# The binaries the CLI tests run (harness, mock-llm, bench-driver), built with the same features
# as the tests so no test has to build them itself.
cargo build --workspace --all-features --bins --locked
cargo test --workspace --all-features --locked --no-fail-fast

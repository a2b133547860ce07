#!/usr/bin/env bash
# Builds mockllm (the deterministic OpenAI-compatible fake LLM of shared/bench, a measuring
# instrument kept outside the repository) for the binary tests that need a real provider
# process with `--script` rules: subagent delegation through `harness serve`.
#   - source: $HARNESS_MOCKLLM_SRC (default ../shared/bench/mockllm, beside the checkout)
#   - binary: $HARNESS_TEST_MOCKLLM_DIR/mockllm (default /var/tmp/harness-mockllm)
# Idempotent: cargo rebuilds only when the source changed. Prints the binary's path.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="${HARNESS_MOCKLLM_SRC:-}"
if [ -z "$SRC" ]; then
    # Beside the checkout, else where the team's shared folder lives on the build machines.
    for candidate in "$ROOT/../shared/bench/mockllm" /work/shared/bench/mockllm; do
        if [ -f "$candidate/Cargo.toml" ]; then SRC="$candidate"; break; fi
    done
fi
DIR="${HARNESS_TEST_MOCKLLM_DIR:-/var/tmp/harness-mockllm}"
if [ -z "$SRC" ] || [ ! -f "$SRC/Cargo.toml" ]; then
    echo "mockllm: no source at $SRC (set HARNESS_MOCKLLM_SRC to shared/bench/mockllm)" >&2
    exit 1
fi
mkdir -p "$DIR"
# Its own target directory: the workspace's build is never shared or copied.
cargo build --quiet --manifest-path "$SRC/Cargo.toml" --target-dir "$DIR/target" >&2
cp "$DIR/target/debug/mockllm" "$DIR/mockllm.new"
mv "$DIR/mockllm.new" "$DIR/mockllm"
echo "$DIR/mockllm"
